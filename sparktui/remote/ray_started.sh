# Exit 0: the container ($1) runs and `ray start` has printed "Ray runtime started." (the
# GCS and raylet are up); 1: not yet; 3: the container is gone or stopped (its log tail
# follows).
#@include _container_running.sh
if docker logs "$1" 2>&1 | grep -q 'Ray runtime started'; then echo "Ray runtime started"; exit 0; fi
exit 1
