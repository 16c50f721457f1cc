# The resident probe (core/resident.py): one bash per node for the console's whole run,
# started once on its own SSH channel, that runs probe.sh as a function on each request and
# keeps what has not changed between ticks. A request on stdin: the number of arguments,
# then each (or \001: the same as last time), every one NUL-terminated (probe.sh's positional parameters less $7-$9, the
# helper programs, given here once). The answer is probe.sh's output, ending
# `@@sparktui:end@@`, so the console parses it as it parses a one-off probe.
# What it saves the node each tick: the SSH session and the shell start; nvidia-smi's start
# (one `nvidia-smi -lms` loop runs here); dockerd's container list, the vLLM processes and
# `ip addr` while nothing changed (a docker events stream and `ip monitor` say when, and
# each is read again after an age anyway); curl for vLLM's HTTP (bash's /dev/tcp).
# It ends, and stops what it started, when stdin closes (the console quit or the channel
# broke); each helper also ends on its own soon after if this shell is killed.
#  $1 probe.sh   $2 ray_nodes.py   $3 probe_env.sh   $4 http_get.py
#  $5 the GPU loop's interval in ms (the console's refresh)
# The K_*, GPUS_CACHED, rhttp and gcs_peers this file sets are probe.sh's (see its head):
# shellcheck disable=SC2034,SC2329
PROBE=$1; SNIP=$2; ENVS=$3; HTTPPY=$4; GMS=$5
RD=$(mktemp -d 2>/dev/null) || RD=
GFD=; GPID=; GAT=0; GTRY=-999; GCUR=; GPREV=-1   # the nvidia-smi loop
EFD=; EPID=; ESEQ=0; ETRY=-999                   # dockerd's events
IFD=; IPID=; ISEQ=0; ITRY=-999                   # ip monitor
RESTART=30  # seconds between tries to start a helper again
have() { command -v "$1" >/dev/null 2>&1; }
stop_all() {
  for p in $GPID $EPID $IPID; do kill "$p" 2>/dev/null; done
  [ -n "$RD" ] && rm -rf "$RD"
}
trap stop_all EXIT
trap 'exit 0' HUP PIPE TERM INT

eval "probe_once() {
$PROBE
}"

# rhttp code|body URL: GET over bash's /dev/tcp, HTTP/1.0 (the server closes when done):
# `code` prints the status (000 when nothing answers), `body` the body of a 2xx answer.
# Exit status as curl's: 7 no connection, 28 timed out, 22 not 2xx (body only).
rhttp() {
  local hp=${2#http://} fd st l r
  local host=${hp%%/*} path=/${hp#*/}
  if ! exec {fd}<>"/dev/tcp/${host%:*}/${host##*:}"; then
    [ "$1" = code ] && printf 000
    return 7
  fi 2>/dev/null
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$host" >&"$fd"
  if ! IFS= read -r -t 2 -u "$fd" st; then
    exec {fd}>&-
    [ "$1" = code ] && printf 000
    return 28
  fi
  st=${st#HTTP/* }; st=${st%% *}
  while IFS= read -r -t 2 -u "$fd" l && [ -n "${l%$'\r'}" ]; do :; done  # the headers
  if [ "$1" = code ]; then
    printf '%s' "$st"; exec {fd}>&-; return 0
  fi
  case $st in 2??) ;; *) exec {fd}>&-; return 22 ;; esac
  if have timeout; then timeout 3 cat <&"$fd"; else cat <&"$fd"; fi
  r=$?; exec {fd}>&-
  [ "$r" = 124 ] && r=28
  return "$r"
}

# probe.sh calls this after defining its helpers: bash versions of two of them
resident_overrides() {
  [ -n "$RD" ] || return 0
  # run NAME CMD...: as probe.sh's, with the command's stderr through a file, not a subshell
  run() {
    local n=$1 e f=$RD/err.$BASHPID
    shift
    beg "$n"
    "$@" 2>"$f"
    R=$?
    fin "$n" "rc=$R"
    if [ -s "$f" ]; then
      IFS= read -r -d '' -n 2000 e <"$f"
      beg "$n.err"; printf '%s' "$e"; fin "$n.err" rc=0
    fi
    return 0
  }
  # readf FILE: read in blocks (the sh version reads a byte at a time, and a /proc file is
  # made again at each seek)
  readf() {
    local a
    mapfile -t a <"$1" || return 1
    [ "${#a[@]}" = 0 ] || printf '%s\n' "${a[@]}"
  }
}

# gcs_peers PORT_HEX: GCS_PEERS is the remote ends of established TCP connections to that
# local port, a line each (what probe.sh's awk prints)
gcs_peers() {
  local f l a
  GCS_PEERS=
  for f in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$f" ] || continue
    mapfile -t a <"$f" || continue
    for l in "${a[@]:1}"; do
      [[ $l == *":$1 "*" 01 "* ]] || continue
      # the line's fields after the port: split on purpose
      # shellcheck disable=SC2086
      set -- "$1" $l
      [ "$5" = 01 ] && [ "${3##*:}" = "$1" ] && GCS_PEERS=$GCS_PEERS$4$'\n'
    done
  done
  return 0
}

start_gpu() {
  [ -n "$GPUFIELDS" ] && have nvidia-smi || return 0
  GTRY=$SECONDS
  exec {GFD}< <(exec nvidia-smi --query-gpu="$GPUFIELDS" --format=csv,noheader,nounits -lms "$GMS" </dev/null 2>/dev/null)
  GPID=$!; GCUR=; GPREV=-1
}
# the rows the loop wrote since the last tick; a row whose index is not above the one before
# starts a new block; the last block is GPUS_CACHED while it is fresh
drain_gpu() {
  local l i got=0
  while [ -n "$GFD" ] && read -r -t 0 -u "$GFD"; do
    if IFS= read -r -u "$GFD" l; then
      i=${l%%,*}
      case $i in ''|*[!0-9]*) i=-1 ;; esac
      if [ "$i" -le "$GPREV" ] || [ "$i" = -1 ]; then GCUR=; fi
      GCUR=$GCUR$l$'\n'; GPREV=$i; got=1
    else
      exec {GFD}<&-; GFD=; GPID=; GCUR=
    fi
  done
  if [ "$got" = 1 ] && [ -n "$GCUR" ]; then GPUS_CACHED=$GCUR; GAT=$SECONDS; fi
  # stale (the loop ended or stopped writing): the probe runs nvidia-smi itself
  if [ $((SECONDS - GAT)) -gt $((GMS * 3 / 1000 + 5)) ]; then GPUS_CACHED=; fi
  if [ -z "$GFD" ] && [ $((SECONDS - GTRY)) -ge "$RESTART" ]; then start_gpu; fi
}

# dockerd's container events (create, start, die, exec, ...): each one, and each new
# stream, counts as a change of the containers and of the processes in them
start_events() {
  [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && have curl || return 0
  ETRY=$SECONDS
  exec {EFD}< <(exec curl -sN -m 600 --unix-socket /var/run/docker.sock \
    'http://localhost/events?filters=%7B%22type%22%3A%5B%22container%22%5D%7D' </dev/null 2>/dev/null)
  EPID=$!; ESEQ=$((ESEQ + 1))
}
# ip monitor: a link or address changed
start_ipmon() {
  have ip || return 0
  ITRY=$SECONDS
  if have timeout; then
    exec {IFD}< <(exec timeout 600 ip -o monitor link address </dev/null 2>/dev/null)
  else
    exec {IFD}< <(exec ip -o monitor link address </dev/null 2>/dev/null)
  fi
  IPID=$!; ISEQ=$((ISEQ + 1))
}
# drain FD_VAR SEQ_VAR PID_VAR: count what a watcher wrote; at its end close it
drain() {
  local l
  while [ -n "${!1}" ] && read -r -t 0 -u "${!1}"; do
    if IFS= read -r -u "${!1}" l; then
      printf -v "$2" '%s' $((${!2} + 1))
    else
      eval "exec {$1}<&-"
      printf -v "$1" ''; printf -v "$3" ''
      printf -v "$2" '%s' $((${!2} + 1))
    fi
  done
}
watch() {
  drain EFD ESEQ EPID
  [ -z "$EFD" ] && [ $((SECONDS - ETRY)) -ge "$RESTART" ] && start_events
  drain IFD ISEQ IPID
  [ -z "$IFD" ] && [ $((SECONDS - ITRY)) -ge "$RESTART" ] && start_ipmon
  # a source is read again when its watcher saw a change, or at this age (s); without its
  # watcher, every tick
  K_containers=; K_procs=; K_addr=
  [ -n "$EFD" ] && K_containers="$ESEQ $((SECONDS / 120))" && K_procs="$ESEQ $((SECONDS / 60))"
  [ -n "$IFD" ] && K_addr="$ISEQ $((SECONDS / 120))"
  # who is connected to Ray's GCS: reading /proc/net/tcp* walks the kernel's whole socket
  # table (~4 ms of system time a file on the lab), so every 10 s
  K_gcs=$((SECONDS / 10))
  drain_gpu
}

# one request: the count, then the arguments; an argument that is the one byte \001 is the
# one the last request had there (bash reads a pipe a byte at a time: keep requests short)
request() {
  local n i x
  IFS= read -r -d '' n || return 1
  case $n in ''|*[!0-9]*) return 1 ;; esac
  for ((i = 0; i < n; i++)); do
    IFS= read -r -d '' x || return 1
    [ "$x" = $'\001' ] || A[i]=$x
  done
  A=("${A[@]:0:n}")
}

GPUS_CACHED=
GPUFIELDS=
A=()
printf '@@sparktui:resident 1@@\n'
while request; do
  watch
  probe_once "${A[@]:0:6}" "$SNIP" "$ENVS" "$HTTPPY" "${A[@]:6}" </dev/null
  # the first probe set GPUFIELDS (the fields it asks nvidia-smi for): start the loop
  [ -z "$GFD" ] && [ "$GTRY" = -999 ] && start_gpu
done
exit 0
