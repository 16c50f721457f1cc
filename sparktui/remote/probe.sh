# The combined node probe (core/probes/script.py): every source in one round trip, each
# framed as a section (@@sparktui:<name>@@ ... @@sparktui:/<name> <status>@@). Every section
# name used here is declared once in script.py's SECTIONS; tests/unit/test_remote_scripts.py
# checks the two agree. Positional parameters:
#  $1 container name ('' = none)   $2 is_head (1/0)   $3 vLLM port ('' = don't ask vLLM)
#  $4 ray: auto|dashboard|python|off   $5 Ray dashboard port   $6 Ray query timeout (s)
#  $7 ray_nodes.py   $8 probe_env.sh   $9 http_get.py
#  $10 Ray GCS port in hex ('' = don't list its connections)
#  $11 the vLLM log on the head ('' = don't read it)   $12 how many bytes of its end
#  $13 what nvidia-smi is asked: gpus,apps | gpus
#  $14 the env key the console already holds the environment for ('' = read it)
# Run once per tick (`sh -c`), or as a function of the resident probe (probe_resident.bash),
# which keeps the shell between ticks: then RD is its private directory, K_<name> says
# whether a source can have changed since it was last read (its watcher's change count and
# an age), GPUS_CACHED holds the nvidia-smi loop's last block and rhttp is its HTTP client.
# `cached` keeps a section's output in KEPT_<name> (and its key in KEPTKEY_<name>) of that
# shell; in a shell of its own nothing is kept and every source is read.
C=$1; HEAD=$2; VPORT=$3; RAYVIA=$4; DPORT=$5; RAYT=$6
SNIP=$7; ENVS=$8; HTTPPY=$9; GPORT=${10}; VLOG=${11}; VLOGB=${12}
GPUQ=${13:-gpus,apps}; ENVKEY=${14:-}
GPUFIELDS=index,name,uuid,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu,clocks.sm
LC_ALL=C; export LC_ALL
have() { command -v "$1" >/dev/null 2>&1; }
if have timeout; then T() { timeout "$@"; }; else T() { shift; "$@"; }; fi
beg() { printf '@@sparktui:%s@@\n' "$1"; }
fin() { printf '\n@@sparktui:/%s %s@@\n' "$1" "$2"; }
mark() { beg "$1"; fin "$1" "$2"; }
# stale NAME KEY: true when NAME must be read (again): no KEY, or not the one it was read for
# (then KEY is recorded as read)
stale() {
  [ -n "$2" ] || return 0
  if eval "[ \"\${KEPTKEY_$1-}\" = \"\$2\" ]"; then return 1; fi
  eval "KEPTKEY_$1=\$2"
}
# cached NAME KEY CMD...: what CMD prints (its sections), printed again while KEY is the key
# it was read for; an empty KEY: run it now
cached() {
  n=$1; k=$2; shift 2
  if ! stale "$n" "$k"; then eval "printf '%s' \"\$KEPT_$n\""; return 0; fi
  o=$("$@"; printf x); o=${o%x}
  eval "KEPT_$n=\$o"
  printf '%s' "$o"
}
# readf FILE: a file's text with the shell's own read (no program started)
readf() { while IFS= read -r l || [ -n "$l" ]; do printf '%s\n' "$l"; done < "$1"; }
R=0
run() {
  n=$1; shift
  beg "$n"
  { E=$( { "$@"; } 2>&1 1>&3 3>&- ); R=$?; } 3>&1
  fin "$n" "rc=$R"
  if [ -n "$E" ]; then beg "$n.err"; printf '%.2000s' "$E"; fin "$n.err" rc=0; fi
  return 0
}
vmetrics() {
  M=$("$@"); r=$?
  if have grep; then
    printf '%s\n' "$M" | grep -E '^(# (HELP|TYPE) )?vllm:(num_requests_running|num_requests_waiting|kv_cache_usage_perc|gpu_cache_usage_perc|prompt_tokens(_total)?|generation_tokens(_total)?|(time_to_first_token|inter_token_latency|time_per_output_token)_seconds(_bucket|_sum|_count)?)[ {]'
  else
    printf '%s\n' "$M"
  fi
  return $r
}

# the resident probe's bash versions of run and readf (no subshell, no byte-wise read)
if have resident_overrides; then resident_overrides; fi

ray_block() {
  if [ "$RAYVIA" = off ]; then
    mark ray skipped
  else
    DONE=0
    if [ "$RAYVIA" != python ] && have curl; then
      J=$(curl -s -m 2 "http://127.0.0.1:$DPORT/api/v0/nodes?limit=10000" 2>/dev/null)
      case $J in
        *'"result": true'*|*'"result":true'*)
          beg ray_dashboard; printf '%s' "$J"; fin ray_dashboard rc=0; DONE=1
          # what Ray cannot place: its placement groups (with the head's clock, for their
          # age) and `ray status`'s Pending Demands (core/probes/ray_pending.py)
          P=$(curl -s -m 2 "http://127.0.0.1:$DPORT/api/v0/placement_groups?detail=true&limit=10000" 2>&1); r=$?
          beg ray_pgs; printf 'now=%s\n%s' "$(date +%s 2>/dev/null)" "$P"; fin ray_pgs "rc=$r"
          P=$(curl -s -m 2 "http://127.0.0.1:$DPORT/api/cluster_status?format=1" 2>&1); r=$?
          beg ray_status; printf '%s' "$P"; fin ray_status "rc=$r" ;;
      esac
    fi
    if [ "$DONE" = 0 ]; then
      if [ "$RAYVIA" = dashboard ]; then mark ray unavailable
      elif ! have docker; then mark ray skipped:no-docker
      elif [ -z "$C" ]; then mark ray skipped:no-container
      elif [ "$RUNNING" != 1 ]; then mark ray skipped:container-not-running
      else
        # $1 and $2 belong to the inner sh (the timeout and ray_nodes.py), not to this one;
        # `pending`: the snippet also prints the placement groups and the pending demands
        # shellcheck disable=SC2016
        run ray T "$((RAYT + 2))" docker exec "$C" sh -c 'if command -v timeout >/dev/null 2>&1; then exec timeout "$1" python3 -c "$2" pending; else exec python3 -c "$2" pending; fi' sh "$RAYT" "$SNIP"
      fi
    fi
  fi
}

beg probe; printf 'version=1 head=%s container=%s vllm_port=%s ray=%s\n' "$HEAD" "$C" "$VPORT" "$RAYVIA"; fin probe rc=0
if [ -r /proc/sys/kernel/hostname ]; then run hostname readf /proc/sys/kernel/hostname
else run hostname uname -n; fi

addrs() {
  run addr ip -j addr
  if [ "$R" != 0 ]; then run addr4 ip -o -4 addr show; run link ip -o link; fi
}
if have ip; then
  cached addr "${K_addr:-}" addrs
else
  mark addr missing
fi

# dockerd's API on its default socket (curl, ~4x cheaper than starting the docker CLI)
dapi() {
  [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && have curl &&
    T 8 curl -sf --unix-socket /var/run/docker.sock "http://localhost$1"
}
# the containers as read (DRAW), one a line (DPS), and the exit status (DR)
list_containers() {
  if DRAW=$(dapi '/containers/json?all=1' 2>/dev/null) && [ "${DRAW#\[}" != "$DRAW" ]; then
    DR=0; DPS=$(printf '%s' "$DRAW" | sed 's/},{"Id":/}\n{"Id":/g')
  else
    DRAW=$(T 8 docker ps -a --no-trunc --size=false --format '{{json .}}' 2>&1); DR=$?
    DPS=$DRAW
  fi
}
RUNNING=0; CID=
if have docker; then
  if stale dps "${K_containers:-}"; then list_containers; fi
  R=$DR
  beg containers; printf '%s' "$DRAW"; fin containers "rc=$R"
  if [ "$R" = 0 ] && [ -n "$C" ]; then
    L=$(printf '%s\n' "$DPS" | while IFS= read -r L; do
      case $L in
        *'"Names":"'"$C"'"'*'"State":"running"'*|*'"Names":["/'"$C"'"]'*'"State":"running"'*)
          printf '%s' "$L"; break ;;
      esac
    done)
    if [ -n "$L" ]; then
      RUNNING=1
      # the container's ID: the first "ID"/"Id" key (escaped quotes inside values break it)
      X=${L#*\"I[Dd]\":\"}; CID=${X%%\"*}
    fi
  fi
  # What decides the environment: the container and its vLLM processes (their PIDs, seen
  # from the host; grep -P's \x00 never matches this script's own text). Unchanged: the
  # console keeps what it read (no docker exec).
  KEY=
  if [ "$RUNNING" = 1 ] && [ -n "$CID" ]; then
    if stale procs "${K_procs:-}"; then
      V=$(grep -laP 'vllm\x00serve|vllm\.entrypoints\.openai\.api_server' /proc/[0-9]*/cmdline 2>/dev/null)
      case $? in  # 2: no -P, or a process left while grep read it: no key, read it
        0) VP=" $(printf '%s' "$V" | tr -cs '0-9' ' ')" ;;
        1) VP= ;;
        *) VP=- ;;
      esac
    fi
    case $VP in -) ;; *) KEY=$CID$VP ;; esac
    beg env_key; printf '%s' "$KEY"; fin env_key rc=0
  fi
  if [ -z "$C" ]; then mark env skipped:no-container
  elif [ "$R" != 0 ]; then mark env skipped:docker-failed
  elif [ "$RUNNING" != 1 ]; then mark env skipped:container-not-running
  elif [ -n "$KEY" ] && [ "$KEY" = "$ENVKEY" ]; then mark env skipped:unchanged
  else run env T 5 docker exec "$C" sh -c "$ENVS"; fi
else
  mark containers missing
  mark env skipped:no-docker
fi

# Who is connected to Ray's GCS (remote endpoints of established TCP connections to its
# port): a node joining, leaving or reconnecting changes it, so the console asks for the
# Ray table (a Python start in the container) when it changes, not every few ticks.
if [ "$HEAD" = 1 ] && [ -n "$GPORT" ]; then
  if have gcs_peers; then
    # (the resident probe: again when K_gcs changed, kept in the shell, no subshell)
    if stale gcs "${K_gcs:+$K_gcs $GPORT}"; then gcs_peers "$GPORT"; fi
    beg gcs_conns; printf '%s' "$GCS_PEERS"; fin gcs_conns rc=0
  elif have awk; then
    beg gcs_conns
    awk -v p=":$GPORT" 'toupper(substr($2, length($2) - 4)) == p && $4 == "01" { print $3 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
    fin gcs_conns rc=0
  else
    mark gcs_conns missing
  fi
fi

# The Ray table (~1 s of Python in the head container) runs alongside the other sections.
RAYTMP=
if [ "$HEAD" = 1 ]; then
  if [ "$RAYVIA" = off ]; then
    mark ray skipped
  elif [ -n "${RD:-}" ]; then
    RAYTMP=$RD/ray; ray_block >"$RAYTMP" 2>&1 &
    RAYPID=$!
  elif have mktemp && RAYTMP=$(mktemp 2>/dev/null); then
    ray_block >"$RAYTMP" 2>&1 &
    RAYPID=$!
  else
    RAYTMP=; ray_block
  fi
fi

if have nvidia-smi; then
  if [ -n "${GPUS_CACHED:-}" ]; then
    beg gpus; printf '%s' "$GPUS_CACHED"; fin gpus rc=0
  else
    run gpus T 5 nvidia-smi --query-gpu="$GPUFIELDS" --format=csv,noheader,nounits
  fi
  case $GPUQ in
    *apps*) run gpu_apps T 5 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits ;;
    *) mark gpu_apps skipped:recent ;;
  esac
else
  mark gpus missing
  mark gpu_apps missing
fi

run meminfo readf /proc/meminfo

if [ "$HEAD" = 1 ]; then
  if [ -n "$VPORT" ]; then
    U="http://127.0.0.1:$VPORT"
    if have rhttp; then
      run health rhttp code "$U/health"
      if [ "$R" = 0 ]; then
        run metrics vmetrics rhttp body "$U/metrics"
        cached version "${KEY:-}" run version rhttp body "$U/version"
      fi
    elif have curl; then
      run health curl -s -m 2 -o /dev/null -w '%{http_code}' "$U/health"
      if [ "$R" = 0 ]; then
        run metrics vmetrics curl -s -m 2 "$U/metrics"
        run version curl -s -m 2 "$U/version"
      fi
    elif have python3; then
      run health python3 -c "$HTTPPY" "$U/health" code
      if [ "$R" = 0 ]; then
        run metrics vmetrics python3 -c "$HTTPPY" "$U/metrics" body
        run version python3 -c "$HTTPPY" "$U/version" body
      fi
    else
      mark health unavailable
    fi
  fi
fi
# The end of vLLM's log while it starts (core/phases.py reads the start-up phase from it):
# first line `mtime=<unix s> size=<bytes>`, then the bytes; `missing` before vLLM ran.
vllm_log() {
  beg vllm_log
  if [ -f "$VLOG" ]; then
    printf 'mtime=%s size=%s\n' "$(stat -c %Y "$VLOG" 2>/dev/null)" "$(stat -c %s "$VLOG" 2>/dev/null)"
    tail -c "$VLOGB" "$VLOG"
  else
    echo missing
  fi
  fin vllm_log rc=0
}
if [ "$HEAD" = 1 ] && [ -n "$VLOG" ]; then
  # resident: read again once the log is newer than the stamp written before the last read
  VK=
  if [ -n "${RD:-}" ]; then
    if [ ! -f "$RD/vlog.stamp" ] || [ "$VLOG" -nt "$RD/vlog.stamp" ]; then
      VSEQ=$((${VSEQ:-0} + 1)); printf x >"$RD/vlog.stamp"
    fi
    VK="$VLOG $VLOGB ${VSEQ:-0}"
  fi
  # unchanged since the console read it: it keeps what it parsed then
  if stale vlog "$VK"; then vllm_log; else mark vllm_log skipped:unchanged; fi
fi
if [ -n "$RAYTMP" ]; then
  wait "$RAYPID"; cat "$RAYTMP"
  [ -n "${RD:-}" ] || rm -f "$RAYTMP"
fi
printf '@@sparktui:end@@\n'
