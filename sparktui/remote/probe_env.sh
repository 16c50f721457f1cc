# Runs inside the container (`docker exec <c> sh -c "$ENVS"`, from probe.sh): picks the
# vLLM API server process (lowest PID whose command line names the vLLM serve command or
# the OpenAI API server module and is not a shell), else a shell running it, else PID 1;
# prints `pid=<n> source=<vllm|vllm-shell|pid1>`, for a vLLM process `argv=<its argv, \001
# between arguments>`, then that process's raw NUL-separated environ. The patterns are
# spelt so that this script's own command line never matches them (comment lines do not
# travel: see sparktui/remote/__init__.py).
best=; shl=
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  c=$(tr '\000' ' ' < "$d/cmdline" 2>/dev/null) || continue
  case $c in
    *vllm\ serve*|*vllm.entrypoints.openai.api[_]server*) ;;
    *) continue ;;
  esac
  case ${c%% *} in
    sh|*/sh|bash|*/bash|dash|*/dash|ash|*/ash|-*)
      if [ -z "$shl" ] || [ "$p" -lt "$shl" ]; then shl=$p; fi ;;
    *) if [ -z "$best" ] || [ "$p" -lt "$best" ]; then best=$p; fi ;;
  esac
done
if [ -n "$best" ]; then pid=$best; src=vllm
elif [ -n "$shl" ]; then pid=$shl; src=vllm-shell
else pid=1; src=pid1; fi
printf 'pid=%s source=%s\n' "$pid" "$src"
# the chosen vLLM process's argv (NULs as \001) on a line of its own: rank, --nnodes, ...
if [ "$src" != pid1 ]; then printf 'argv='; tr '\000' '\001' <"/proc/$pid/cmdline"; printf '\n'; fi
exec cat "/proc/$pid/environ"
