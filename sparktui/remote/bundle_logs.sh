# One node's logs for `sparktui bundle` (read-only). $1 container ('' = none), $2 lines per
# file, $3 the vLLM log path ('' = not this node), $4 Ray's log directory in the container.
# Each file is framed: a line `@@sparktui:file <name>@@`, then its last $2 lines.
C=$1; N=$2; VLOG=$3; RD=$4
beg() { printf '\n@@sparktui:file %s@@\n' "$1"; }
beg node.txt
uname -a 2>&1
if command -v docker >/dev/null 2>&1; then
  docker version --format 'docker {{.Server.Version}}' 2>&1
fi
if [ -n "$VLOG" ] && [ -f "$VLOG" ]; then beg vllm.log; tail -n "$N" "$VLOG" 2>&1; fi
if [ -n "$C" ] && command -v docker >/dev/null 2>&1; then
  beg "docker-logs.txt"
  docker logs --tail "$N" "$C" 2>&1
  # $1 and $2 belong to the inner sh; Ray names its files worker-<id>-<job>-<pid>.{out,err}
  # shellcheck disable=SC2016
  docker exec "$C" sh -c 'cd "$1" 2>/dev/null || exit 0; for f in raylet.out raylet.err $(ls -t worker-*.out worker-*.err 2>/dev/null | head -n 12); do [ -s "$f" ] || continue; printf "\n@@sparktui:file ray/%s@@\n" "$f"; tail -n "$2" "$f"; done' sh "$RD" "$N" 2>/dev/null
fi
printf '\n@@sparktui:end@@\n'
