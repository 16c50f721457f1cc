"""The combined node probe: ONE shell command per node per tick, one SSH channel round trip.

`build_probe()` returns a read-only `Command` running the constant script `PROBE_SCRIPT`
with every variable (container name, role, ports, the helper snippets) as a positional
parameter. The script prints each source as a section framed by sentinel lines::

    @@sparktui:<name>@@
    <output>
    @@sparktui:/<name> <status>@@

where `<status>` is `rc=<exit status>`, `missing` (the tool is not installed), `skipped`
or `skipped:<why>`, or `unavailable`. A section's stderr, when there is any, follows as
section `<name>.err`. The last line is `@@sparktui:end@@`; without it the output was cut.
`parse_probe()` turns the output into a `ProbeResult`.

Sections: probe (script version and arguments), hostname, addr (`ip -j addr`; if that
fails, addr4 + link with `ip -o`), containers (`docker ps -a ... {{json .}}`), env (the
container's vLLM-serve process environment, else its PID 1's, read *inside* the container
with `docker exec`, so no root is needed on the host; only when the container runs), gpus and
gpu_apps (nvidia-smi), meminfo; on the head only: ray_dashboard (`/api/v0/nodes` on
127.0.0.1) or ray (`ray.nodes()` via `docker exec <c> python3 -c RAY_NODES_SNIPPET`), and
health / metrics / version of the vLLM server on 127.0.0.1:<port> (curl, else python3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from sparktui.core.command import Command, sh
from sparktui.core.model import (
    Container,
    Gpu,
    GpuProcess,
    Interface,
    NodeState,
    RayNode,
    VllmStatus,
)
from sparktui.core.probes.docker import parse_docker_ps
from sparktui.core.probes.env import parse_environ
from sparktui.core.probes.gpu import parse_compute_apps, parse_gpu_query
from sparktui.core.probes.meminfo import MemInfo, parse_meminfo
from sparktui.core.probes.network import parse_ip_json, parse_ip_text
from sparktui.core.probes.ray import RAY_NODES_SNIPPET, parse_ray_nodes
from sparktui.core.probes.vllm_metrics import health_from_code, parse_vllm_metrics

PROBE_VERSION = 1
SENTINEL = "@@sparktui:"

RayVia = Literal["auto", "dashboard", "python", "off"]

# Runs inside the container (`docker exec <c> sh -c "$ENV_SCRIPT"`): picks the vLLM API
# server process (lowest PID whose command line has `vllm serve` or the OpenAI api_server
# module and is not a shell), else a shell running it, else PID 1; prints
# `pid=<n> source=<vllm|vllm-shell|pid1>` then that process's raw NUL-separated environ.
# The patterns are spelt so that this script's own command line never matches them.
ENV_SCRIPT = r"""best=; shl=
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
exec cat "/proc/$pid/environ"
"""

# `python3 -c "$HTTP_PY" <url> code|body`: the fallback HTTP client when curl is absent.
# Exit status 7 (curl's "could not connect") when the server cannot be reached.
HTTP_PY = r"""import sys, urllib.request, urllib.error
url, mode = sys.argv[1], sys.argv[2]
try:
    r = urllib.request.urlopen(url, timeout=2)
    code, body = r.status, r.read()
except urllib.error.HTTPError as e:
    code, body = e.code, e.read()
except Exception as e:
    sys.stderr.write("%s\n" % (e,))
    sys.stdout.write("000" if mode == "code" else "")
    sys.exit(7)
sys.stdout.write(str(code) if mode == "code" else body.decode("utf-8", "replace"))
"""

# The script. Positional parameters:
#  $1 container name ('' = none)   $2 is_head (1/0)   $3 vLLM port ('' = don't ask vLLM)
#  $4 ray: auto|dashboard|python|off   $5 Ray dashboard port   $6 Ray query timeout (s)
#  $7 RAY_NODES_SNIPPET   $8 ENV_SCRIPT   $9 HTTP_PY
PROBE_SCRIPT = r"""C=$1; HEAD=$2; VPORT=$3; RAYVIA=$4; DPORT=$5; RAYT=$6
SNIP=$7; ENVS=$8; HTTPPY=$9
LC_ALL=C; export LC_ALL
have() { command -v "$1" >/dev/null 2>&1; }
if have timeout; then T() { timeout "$@"; }; else T() { shift; "$@"; }; fi
beg() { printf '@@sparktui:%s@@\n' "$1"; }
fin() { printf '\n@@sparktui:/%s %s@@\n' "$1" "$2"; }
mark() { beg "$1"; fin "$1" "$2"; }
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
    printf '%s\n' "$M" | grep -E '^(# (HELP|TYPE) )?vllm:(num_requests_running|num_requests_waiting|kv_cache_usage_perc|gpu_cache_usage_perc|prompt_tokens(_total)?|generation_tokens(_total)?)[ {]'
  else
    printf '%s\n' "$M"
  fi
  return $r
}

ray_block() {
  if [ "$RAYVIA" = off ]; then
    mark ray skipped
  else
    DONE=0
    if [ "$RAYVIA" != python ] && have curl; then
      J=$(curl -s -m 2 "http://127.0.0.1:$DPORT/api/v0/nodes?limit=10000" 2>/dev/null)
      case $J in
        *'"result": true'*|*'"result":true'*)
          beg ray_dashboard; printf '%s' "$J"; fin ray_dashboard rc=0; DONE=1 ;;
      esac
    fi
    if [ "$DONE" = 0 ]; then
      if [ "$RAYVIA" = dashboard ]; then mark ray unavailable
      elif ! have docker; then mark ray skipped:no-docker
      elif [ -z "$C" ]; then mark ray skipped:no-container
      elif [ "$RUNNING" != 1 ]; then mark ray skipped:container-not-running
      else
        run ray T "$((RAYT + 2))" docker exec "$C" sh -c 'if command -v timeout >/dev/null 2>&1; then exec timeout "$1" python3 -c "$2"; else exec python3 -c "$2"; fi' sh "$RAYT" "$SNIP"
      fi
    fi
  fi
}

beg probe; printf 'version=1 head=%s container=%s vllm_port=%s ray=%s\n' "$HEAD" "$C" "$VPORT" "$RAYVIA"; fin probe rc=0
run hostname uname -n

if have ip; then
  run addr ip -j addr
  if [ "$R" != 0 ]; then run addr4 ip -o -4 addr show; run link ip -o link; fi
else
  mark addr missing
fi

RUNNING=0
if have docker; then
  beg containers
  DPS=$(T 8 docker ps -a --no-trunc --size=false --format '{{json .}}' 2>&1); R=$?
  printf '%s' "$DPS"
  fin containers "rc=$R"
  if [ "$R" = 0 ] && [ -n "$C" ]; then
    RUNNING=$(printf '%s\n' "$DPS" | while IFS= read -r L; do
      case $L in *'"Names":"'"$C"'"'*'"State":"running"'*) echo 1; break ;; esac
    done)
    [ -n "$RUNNING" ] || RUNNING=0
  fi
  if [ -z "$C" ]; then mark env skipped:no-container
  elif [ "$R" != 0 ]; then mark env skipped:docker-failed
  elif [ "$RUNNING" = 1 ]; then run env T 5 docker exec "$C" sh -c "$ENVS"
  else mark env skipped:container-not-running; fi
else
  mark containers missing
  mark env skipped:no-docker
fi

# The Ray table (~1 s of Python in the head container) runs alongside the other sections.
RAYTMP=
if [ "$HEAD" = 1 ]; then
  if have mktemp && RAYTMP=$(mktemp 2>/dev/null); then
    ray_block >"$RAYTMP" 2>&1 &
    RAYPID=$!
  else
    RAYTMP=; ray_block
  fi
fi

if have nvidia-smi; then
  run gpus T 5 nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits
  run gpu_apps T 5 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits
else
  mark gpus missing
  mark gpu_apps missing
fi

run meminfo cat /proc/meminfo

if [ "$HEAD" = 1 ]; then
  if [ -n "$VPORT" ]; then
    U="http://127.0.0.1:$VPORT"
    if have curl; then
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
if [ -n "$RAYTMP" ]; then wait "$RAYPID"; cat "$RAYTMP"; rm -f "$RAYTMP"; fi
printf '@@sparktui:end@@\n'
"""

# Why the Ray table was not read, for messages.
SKIP_REASONS = {
    "container-not-running": "the Ray container is not running",
    "no-container": "no container configured",
    "no-docker": "docker is not installed on the head",
}

# What a `missing` section means, for messages.
MISSING_TOOL = {
    "addr": "ip", "containers": "docker", "gpus": "nvidia-smi", "gpu_apps": "nvidia-smi",
    "health": "curl or python3",
}


def build_probe(
    node_name: str,
    container: str | None,
    is_head: bool,
    vllm_port: int | None = 8000,
    *,
    query_ray: bool = True,
    ray_via: RayVia = "auto",
    ray_dashboard_port: int = 8265,
    ray_timeout: float = 8.0,
    timeout: float = 45.0,
) -> Command:
    """The one read-only command that probes `node_name` this tick.

    `query_ray=False` (or `ray_via="off"`) skips the Ray table (the slow part, ~1-3 s through
    Python) so the monitor can ask for it at a slower cadence than the rest. `ray_via`:
    `auto` tries the dashboard's `/api/v0/nodes` on the head's loopback, then `ray.nodes()`
    inside the container; `dashboard` or `python` use only one. Ray and vLLM are asked only
    when `is_head`; `vllm_port=None` skips vLLM. Each step has its own limit (docker ps 8 s,
    env 5 s, nvidia-smi 5 s each, Ray `ray_timeout` + 2 s, HTTP 2 s each), so the worst case
    stays under the default overall `timeout`.
    """
    via = ray_via if query_ray else "off"
    args = (
        container or "",
        "1" if is_head else "0",
        "" if vllm_port is None else str(int(vllm_port)),
        via,
        str(int(ray_dashboard_port)),
        str(max(1, int(round(ray_timeout)))),
        RAY_NODES_SNIPPET,
        ENV_SCRIPT,
        HTTP_PY,
    )
    return sh(PROBE_SCRIPT, *args, mutating=False, timeout=timeout,
              description=f"probe {node_name}")


@dataclass
class Section:
    """One framed section of the probe's output."""

    name: str
    body: str
    status: str  # rc=<n> | missing | skipped[:why] | unavailable
    stderr: str = ""

    @property
    def rc(self) -> int | None:
        if self.status.startswith("rc="):
            try:
                return int(self.status[3:])
            except ValueError:
                return None
        return None

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def missing(self) -> bool:
        return self.status == "missing"

    @property
    def skipped(self) -> bool:
        return self.status.startswith("skipped")

    def error(self) -> str | None:
        """A one-line reason when the section ran and failed, else None."""
        rc = self.rc
        if rc is None or rc == 0:
            return None
        if rc in (124, 137, 143):  # timeout(1), or killed by it (SIGKILL/SIGTERM)
            return "timed out"
        text = (self.stderr or self.body).strip()
        last = text.splitlines()[-1][:300] if text else ""
        return f"exit {rc}: {last}" if last else f"exit {rc}"


@dataclass
class ProbeResult:
    """Everything one probe run said about a node. Lists are empty when a source was
    missing or failed; `errors` says why, keyed by section name."""

    hostname: str | None = None
    interfaces: list[Interface] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    gpu_processes: list[GpuProcess] = field(default_factory=list)
    mem: MemInfo = field(default_factory=MemInfo)
    env: dict[str, str] = field(default_factory=dict)  # relevant vars only, secrets masked
    env_pid: int | None = None  # the container-side PID whose environ was read
    env_source: str | None = None  # vllm | vllm-shell | pid1
    ray_nodes: list[RayNode] | None = None  # None: not asked (worker, or skipped this tick)
    ray_source: str | None = None  # dashboard | python
    ray_error: str | None = None
    vllm: VllmStatus | None = None  # None: not asked (worker, or no port)
    vllm_http_code: int | None = None
    missing: list[str] = field(default_factory=list)  # sections whose tool is not installed
    errors: dict[str, str] = field(default_factory=dict)
    sections: dict[str, Section] = field(default_factory=dict)
    complete: bool = False  # the end marker was seen

    @property
    def gpu_tool_missing(self) -> bool:
        return "gpus" in self.missing

    def apply_to(self, node: NodeState) -> NodeState:
        """Copy what was read into `node` (Ray and vLLM are cluster-wide: not copied)."""
        node.reachable = True
        node.interfaces = self.interfaces
        node.containers = self.containers
        node.gpus = self.gpus
        node.gpu_processes = self.gpu_processes
        node.env = self.env
        node.mem_total_mib = self.mem.total_mib
        node.mem_available_mib = self.mem.available_mib
        if not self.complete:
            node.error = "probe output was cut short"
        return node


_SECTION = re.compile(
    r"^@@sparktui:(?P<name>[\w.-]+)@@\n(?P<body>.*?)\n@@sparktui:/(?P=name) (?P<status>[^@\n]*)@@$",
    re.S | re.M,
)


def split_sections(stdout: str) -> dict[str, Section]:
    """The framed sections of a probe's stdout (stderr sections folded into their owner)."""
    found: dict[str, Section] = {}
    errs: dict[str, str] = {}
    for m in _SECTION.finditer(stdout):
        name, body, status = m["name"], m["body"], m["status"].strip()
        if name.endswith(".err"):
            errs[name[:-4]] = body
        else:
            found[name] = Section(name, body, status)
    for name, text in errs.items():
        if name in found:
            found[name].stderr = text
    return found


def _parse_env(sec: Section, res: ProbeResult) -> None:
    first, _, rest = sec.body.partition("\n")
    m = re.match(r"pid=(\d+) source=(\S+)", first)
    if m:
        res.env_pid, res.env_source = int(m[1]), m[2]
    else:
        rest = sec.body
    res.env = parse_environ(rest)


def _parse_vllm(secs: dict[str, Section], res: ProbeResult) -> None:
    health = secs.get("health")
    if health is None:
        return
    st = VllmStatus()
    res.vllm = st
    if health.missing or health.status == "unavailable":
        st.detail = "no HTTP client (curl or python3) on the head"
        return
    body = health.body.strip()
    code = int(body) if body.isdigit() and int(body) > 0 else None
    res.vllm_http_code = code
    st.healthy, st.detail = health_from_code(code)
    if code is None:
        res.errors.pop("health", None)  # not serving is a state, not a probe error
        if health.rc == 28:
            st.detail = "timed out"
    metrics = secs.get("metrics")
    if metrics is not None and metrics.body.strip():
        parse_vllm_metrics(metrics.body, st)
    version = secs.get("version")
    if version is not None and version.ok:
        m = re.search(r'"version"\s*:\s*"([^"]+)"', version.body)
        if m:
            st.version = m[1]


def parse_probe(stdout: str) -> ProbeResult:
    """A probe's stdout -> ProbeResult. Never raises; unreadable parts become errors."""
    res = ProbeResult()
    secs = split_sections(stdout)
    res.sections = secs
    res.complete = stdout.rstrip().endswith("@@sparktui:end@@")
    if not secs:
        res.errors["probe"] = "no probe output" + (f": {stdout.strip()[:300]}" if stdout.strip()
                                                    else "")
        return res
    for name, sec in secs.items():
        if sec.missing:
            res.missing.append(name)
        elif (err := sec.error()) is not None:
            res.errors[name] = err

    if (s := secs.get("hostname")) and s.ok:
        res.hostname = s.body.strip() or None

    if (s := secs.get("addr")) and s.ok:
        res.interfaces = parse_ip_json(s.body)
    elif (a4 := secs.get("addr4")) is not None:
        link = secs.get("link")
        res.interfaces = parse_ip_text(a4.body, link.body if link else "")
        if a4.ok:
            res.errors.pop("addr", None)  # `ip -j` unsupported, the text fallback worked

    if (s := secs.get("containers")) and s.ok:
        res.containers = parse_docker_ps(s.body)

    if (s := secs.get("meminfo")) and s.ok:
        res.mem = parse_meminfo(s.body)

    if (s := secs.get("gpus")) and s.ok:
        res.gpus = parse_gpu_query(s.body, meminfo=res.mem)
    if (s := secs.get("gpu_apps")) and s.ok:
        res.gpu_processes = parse_compute_apps(s.body)

    if (s := secs.get("env")) and s.ok:
        _parse_env(s, res)

    if (s := secs.get("ray_dashboard")) is not None:
        res.ray_source = "dashboard"
        res.ray_nodes, res.ray_error = parse_ray_nodes(s.body)
    elif (ray := secs.get("ray")) is not None:
        if ray.status == "unavailable":
            res.ray_nodes, res.ray_error = [], "Ray dashboard not answering"
        elif ray.skipped:
            why = ray.status.partition(":")[2]
            if why:  # plain `skipped` = not asked this tick: no error
                res.ray_error = "Ray table not read: " + SKIP_REASONS.get(why, why)
        else:
            res.ray_source = "python"
            res.ray_nodes, res.ray_error = parse_ray_nodes(ray.body)
            if res.ray_error and ray.rc not in (0, None):
                res.ray_error = f"{res.ray_error} ({ray.error()})"

    _parse_vllm(secs, res)
    return res
