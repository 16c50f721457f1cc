# The doctor's read-only probe (core/actions/doctor.py): one round trip per node, sections
# framed by `@@<name>` lines, `@@end` last. Nothing here changes the node.
# $1 container   $2 configured image ('' = none)   $3 model path ('' = not a local path)
# $4 peers: the other nodes' configured ips, space-separated ('' = none)
# $5 the Ray GCS address <head ip>:<port> ('' = unknown)
# $6 doctor_container.py (runs in the container)   $7 doctor_net.py (runs on the host)
C=$1; MODEL=$3; PEERS=$4; GCS=$5; INPY=$6; NETPY=$7
LC_ALL=C; export LC_ALL
have() { command -v "$1" >/dev/null 2>&1; }
if have timeout; then T() { timeout "$@"; }; else T() { shift; "$@"; }; fi
echo "@@clock"
date +%s.%N
# The slow parts (docker exec python3 in the container; ICMP to the peers) run in the
# background while the rest is read; their output is printed in order at the end.
TMPA=; TMPB=
if have mktemp; then TMPA=$(mktemp 2>/dev/null); TMPB=$(mktemp 2>/dev/null); fi
incontainer() {
  if [ -z "$C" ] || ! have docker; then return 0; fi
  # $1 and $2 belong to the inner sh (the program and its two arguments)
  # shellcheck disable=SC2016
  T 10 docker exec "$C" sh -c 'command -v python3 >/dev/null 2>&1 || { echo "{\"error\": \"no python3 in the container\"}"; exit 0; }; exec python3 -c "$1" "$2" "$3"' sh "$INPY" "$MODEL" "$GCS" 2>&1
}
net() {
  if have python3; then
    # shellcheck disable=SC2086
    T 8 python3 -c "$NETPY" $PEERS 2>&1
  else
    echo '{"error": "no python3 on the host"}'
  fi
}
if [ -n "$TMPA" ] && [ -n "$TMPB" ]; then
  incontainer >"$TMPA" 2>&1 &
  PA=$!
  net >"$TMPB" 2>&1 &
  PB=$!
fi
echo "@@container_image"
docker inspect -f '{{.Image}}' "$C" 2>/dev/null
echo "@@image"
# range, not join: docker 26+ decodes RepoDigests as []interface{}, which join refuses
[ -n "$2" ] && docker image inspect -f '{{.Id}} {{range .RepoDigests}}{{.}},{{end}}' "$2" 2>/dev/null
echo "@@model"
if [ -n "$3" ]; then
  if docker exec "$C" test -e "$3" 2>/dev/null; then echo container
  elif test -e "$3"; then echo host
  else echo missing; fi
fi
echo "@@listen"
cat /proc/net/tcp /proc/net/tcp6 2>/dev/null
echo "@@hostconfig"
[ -n "$C" ] && docker inspect -f '{{json .HostConfig}}' "$C" 2>/dev/null
echo "@@runtimes"
have docker && T 5 docker info --format '{{json .Runtimes}} {{.DefaultRuntime}}' 2>/dev/null
echo "@@host_gpus"
have nvidia-smi && T 5 nvidia-smi -L 2>/dev/null
echo "@@netdev"
for d in /sys/class/net/*; do
  [ -e "$d/mtu" ] || continue
  m=; s=; c=
  read -r m <"$d/mtu" 2>/dev/null
  read -r s <"$d/operstate" 2>/dev/null
  read -r c <"$d/carrier" 2>/dev/null
  echo "${d##*/} ${m:-?} ${s:-?} ${c:-?}"
done
echo "@@ib"
# /sys/class/infiniband/<dev>/ports/<n>/{state,link_layer,gids/<i>,gid_attrs/{types,ndevs}/<i>}:
# one line per port, one per populated GID (unpopulated entries fail to read: skipped).
for p in /sys/class/infiniband/*/ports/*; do
  [ -d "$p" ] || continue
  dev=${p%/ports/*}; dev=${dev##*/}; port=${p##*/}
  s=; l=
  read -r s <"$p/state" 2>/dev/null
  read -r l <"$p/link_layer" 2>/dev/null
  echo "port $dev $port ${l:-?} $s"
  for g in "$p"/gid_attrs/types/*; do
    [ -e "$g" ] || continue
    i=${g##*/}; t=; gid=; nd=
    read -r t <"$g" 2>/dev/null || continue
    [ -n "$t" ] || continue
    read -r gid <"$p/gids/$i" 2>/dev/null
    read -r nd <"$p/gid_attrs/ndevs/$i" 2>/dev/null
    echo "gid $dev $port $i $gid ${nd:--} $t"
  done
done
echo "@@ibdev2netdev"
have ibdev2netdev && T 5 ibdev2netdev 2>/dev/null
echo "@@meminfo"
cat /proc/meminfo 2>/dev/null
if [ -n "$TMPA" ] && [ -n "$TMPB" ]; then
  wait "$PA" "$PB"
  echo "@@incontainer"; cat "$TMPA"; echo
  echo "@@net"; cat "$TMPB"; echo
  rm -f "$TMPA" "$TMPB"
else
  echo "@@incontainer"; incontainer; echo
  echo "@@net"; net; echo
fi
echo "@@clock_end"
date +%s.%N
echo "@@end"
