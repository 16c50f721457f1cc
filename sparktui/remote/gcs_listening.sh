# The GCS is up: the container ($1) runs and, with host networking, something listens on
# the GCS port in the head's network namespace (/proc/net/tcp{,6}, state 0A; the port in
# hex as $2, in decimal as $3), or `ray start` has already printed "Ray runtime started."
# Exit codes as in ray_started.sh.
#@include _container_running.sh
if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -qiE "^ *[0-9]+: [0-9A-F]+:$2 [0-9A-F]+:[0-9A-F]+ 0A "; then
  echo "GCS listening on port $3"; exit 0
fi
if docker logs "$1" 2>&1 | grep -q 'Ray runtime started'; then echo "Ray runtime started"; exit 0; fi
exit 1
