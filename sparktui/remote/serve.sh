# Runs inside the container (docker exec -d): the log file gets a marker line, then vLLM's
# output. $1 = log path; the rest is the vllm argv. The marker's prefix is
# core/actions/builtin.py's SERVE_MARKER_PREFIX.
log=$1; shift
mkdir -p "$(dirname "$log")"
printf '%s%s ===\n' '=== sparktui serve ' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$log"
exec "$@" >>"$log" 2>&1
