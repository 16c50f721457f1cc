# vLLM's /health on the head (host network): exit 0 healthy; 1 not yet; 3 the container or the
# vllm process is gone. $1 http_get.py (used when curl is absent), $2 port, $3 container,
# $4 (optional) the vLLM log: when not healthy, a line `@@sparktui:log@@` then its last 64 KiB
# follow the message (the start-up phase, core/phases.py).
logtail() { [ -n "$1" ] && [ -f "$1" ] && { echo '@@sparktui:log@@'; tail -c 65536 "$1"; }; return 0; }
url="http://127.0.0.1:$2/health"
if command -v curl >/dev/null 2>&1; then
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" 2>/dev/null) || code=000
else
  code=$(python3 -c "$1" "$url" code 2>/dev/null) || code=000
fi
if [ "$code" = 200 ]; then echo "healthy (HTTP 200)"; exit 0; fi
state=$(docker inspect -f '{{.State.Status}}' "$3" 2>/dev/null)
if [ "$state" != running ]; then echo "container $3 is ${state:-gone}"; logtail "$4"; exit 3; fi
if ! docker exec "$3" sh -c 'for f in /proc/[0-9]*/cmdline; do tr "\000" " " <"$f" 2>/dev/null | grep -q "vllm[ ]serve" && exit 0; done; exit 1'; then
  echo "the vllm serve process has exited"; logtail "$4"; exit 3
fi
echo "vLLM starting (/health: $code)"; logtail "$4"; exit 1
