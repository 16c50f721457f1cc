# Native backend, while the head starts: a worker's rank. Exit 1 while its `vllm serve`
# (headless) runs in container $1; 3 when the container is gone or the process has exited
# (the tail of its log, $2, follows). It never exits 0: the head's /health ends the wait.
#@include _container_running.sh
if docker exec "$1" sh -c 'for f in /proc/[0-9]*/cmdline; do tr "\000" " " <"$f" 2>/dev/null | grep -q "vllm[ ]serve" && exit 0; done; exit 1'; then
  echo "rank running (vllm serve --headless)"; exit 1
fi
echo "the vllm serve process has exited; the end of $2:"
tail -n 12 "$2" 2>/dev/null || docker exec "$1" tail -n 12 "$2" 2>&1
exit 3
