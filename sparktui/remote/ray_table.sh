# The Ray node table from inside the head container ($1): ray_nodes.py comes as $2.
# Exit 3 when the container is gone or stopped.
#@include _container_running.sh
exec docker exec "$1" python3 -c "$2"
