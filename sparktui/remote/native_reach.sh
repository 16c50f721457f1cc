# Native backend, doctor (read-only): can this node reach rank 0's rendezvous? $1 container
# ('' = none), $2 master address, $3 master port, $4 reach.py. Prints `route <ip route get
# output>` and `tcp <open|refused|timeout|unreachable|error: ...>` (reach.py), with the
# container's python3 when it runs, else the node's own.
echo "route $(ip -o route get "$2" 2>&1 | head -n 1)"
state=; [ -n "$1" ] && state=$(docker inspect -f '{{.State.Status}}' "$1" 2>/dev/null)
if [ "$state" = running ] && docker exec "$1" python3 -c "$4" "$2" "$3" 2>/dev/null; then exit 0; fi
if command -v python3 >/dev/null 2>&1; then exec python3 -c "$4" "$2" "$3"; fi
echo "tcp error: no python3 on the node or in the container"
