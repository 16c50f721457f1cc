# Native backend, after `docker run -d ... sleep infinity`: exit 0 once the container ($1)
# runs and `vllm` is on its PATH; 1 not yet; 3 the container is gone or stopped (its log
# tail follows), or it has no `vllm` command.
#@include _container_running.sh
if docker exec "$1" sh -c 'command -v vllm' 2>/dev/null; then exit 0; fi
echo "container $1 runs, but has no vllm command on its PATH"; exit 3
