# Included (`#@include _container_running.sh`) at the top of the scripts that need container
# $1 running: exit 3 saying why when it is gone or stopped (a stopped one's log tail follows).
state=$(docker inspect -f '{{.State.Status}}' "$1" 2>&1) || { echo "container $1 is gone: $state"; exit 3; }
if [ "$state" != running ]; then
  echo "container $1 is $state; its last output:"; docker logs --tail 15 "$1" 2>&1; exit 3
fi
