# The doctor's extra read-only probe (core/actions/doctor.py), sections `@@<name>` lines.
# $1 container, $2 configured image ('' = none), $3 model path ('' = not a local path).
echo "@@container_image"
docker inspect -f '{{.Image}}' "$1" 2>/dev/null
echo "@@image"
[ -n "$2" ] && docker image inspect -f '{{.Id}} {{join .RepoDigests ","}}' "$2" 2>/dev/null
echo "@@model"
if [ -n "$3" ]; then
  if docker exec "$1" test -e "$3" 2>/dev/null; then echo container
  elif test -e "$3"; then echo host
  else echo missing; fi
fi
echo "@@listen"
cat /proc/net/tcp /proc/net/tcp6 2>/dev/null
echo "@@end"
