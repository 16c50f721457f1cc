"""The combined node probe: ONE shell command per node per tick, one SSH channel round trip.

`build_probe()` returns a read-only `Command` running the constant script `PROBE_SCRIPT`
(`sparktui/remote/probe.sh`) with every variable (container name, role, ports, the helper
programs) as a positional parameter. The script prints each source as a section framed by
sentinel lines::

    @@sparktui:<name>@@
    <output>
    @@sparktui:/<name> <status>@@

where `<status>` is `rc=<exit status>`, `missing` (the tool is not installed), `skipped`
or `skipped:<why>`, or `unavailable`. A section's stderr, when there is any, follows as
section `<name>.err`. The last line is `@@sparktui:end@@`; without it the output was cut.
`parse_probe()` turns the output into a `ProbeResult`, through `SECTIONS`: the one
declaration of every section (name -> parser -> ProbeResult field). A new source is a new
line in probe.sh plus a `SectionSpec` and its parser here.

Sections: probe (script version and arguments), hostname, addr (`ip -j addr`; if that
fails, addr4 + link with `ip -o`), containers (dockerd's API `/containers/json` through its
socket with curl, else `docker ps -a ... {{json .}}`), env_key, env (the
container's vLLM-serve process environment, else its PID 1's, read *inside* the container
with `docker exec`, so no root is needed on the host; only when the container runs), gpus and
gpu_apps (nvidia-smi), meminfo; on the head only: ray_dashboard (`/api/v0/nodes` on
127.0.0.1) with ray_pgs and ray_status (its placement groups and `ray status` text), or ray
(`ray.nodes()`, the placement groups and the pending demands via `docker exec <c> python3 -c
RAY_NODES_SNIPPET pending`), and
health / metrics / version of the vLLM server on 127.0.0.1:<port> (curl, else python3).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sparktui.core.command import Command, sh
from sparktui.core.model import (
    Container,
    Gpu,
    GpuProcess,
    Interface,
    NodeState,
    PlacementGroup,
    RayDemand,
    RayNode,
    VllmStatus,
)
from sparktui.core.probes.docker import parse_docker_ps
from sparktui.core.probes.env import parse_environ
from sparktui.core.probes.gpu import parse_compute_apps, parse_gpu_query
from sparktui.core.probes.meminfo import MemInfo, parse_meminfo
from sparktui.core.probes.network import parse_ip_json, parse_ip_text
from sparktui.core.probes.ray import RAY_NODES_SNIPPET, parse_ray_nodes
from sparktui.core.probes.ray_pending import (
    parse_cluster_status,
    parse_pgs_dashboard,
    parse_snippet_pending,
)
from sparktui.core.probes.vllm_metrics import health_from_code, parse_vllm_metrics
from sparktui.remote import script

PROBE_VERSION = 1
SENTINEL = "@@sparktui:"

RayVia = Literal["auto", "dashboard", "python", "off"]
GpuQueries = Literal["gpus,apps", "gpus"]

# The programs (sparktui/remote/): the probe itself, and the three it hands on as
# positional parameters (`$7 $8 $9`): the Ray table in Python, the container-side
# environment reader, and the HTTP client for nodes without curl.
PROBE_SCRIPT = script("probe.sh")
ENV_SCRIPT = script("probe_env.sh")
HTTP_PY = script("http_get.py")

# Why the Ray table was not read, for messages.
SKIP_REASONS = {
    "container-not-running": "the Ray container is not running",
    "no-container": "no container configured",
    "no-docker": "docker is not installed on the head",
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
    gcs_port: int | None = None,
    vllm_log: str | None = None,
    vllm_log_bytes: int = 262144,
    gpu_queries: GpuQueries = "gpus,apps",
    env_key: str | None = None,
) -> Command:
    """The one read-only command that probes `node_name` this tick.

    `query_ray=False` (or `ray_via="off"`) skips the Ray table (the slow part, ~1-3 s through
    Python) so the monitor can ask for it at a slower cadence than the rest. `ray_via`:
    `auto` tries the dashboard's `/api/v0/nodes` on the head's loopback, then `ray.nodes()`
    inside the container; `dashboard` or `python` use only one. Ray and vLLM are asked only
    when `is_head`; `vllm_port=None` skips vLLM. Each step has its own limit (docker ps 8 s,
    env 5 s, nvidia-smi 5 s each, Ray `ray_timeout` + 2 s, HTTP 2 s each), so the worst case
    stays under the default overall `timeout`. `gcs_port`: on the head, list the remote
    endpoints connected to Ray's GCS on that port (section gcs_conns, from /proc/net/tcp*),
    so the monitor can ask for the Ray table only when they change. `vllm_log`: on the head,
    the end (`vllm_log_bytes`) of that file (section vllm_log), for the start-up phase.
    `gpu_queries`: `gpus` skips the compute-apps query (section gpu_apps `skipped:recent`:
    the caller keeps what it read last). `env_key`: the key (section env_key: the container's
    ID and its vLLM processes) the caller already holds the environment for; while it is
    the same, env is `skipped:unchanged` (no docker exec).
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
        "" if gcs_port is None else f"{int(gcs_port):04X}",
        vllm_log or "",
        str(int(vllm_log_bytes)),
        gpu_queries,
        env_key or "",
    )
    return sh(
        PROBE_SCRIPT, *args, mutating=False, timeout=timeout, description=f"probe {node_name}"
    )


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
    vllm_argv: list[str] | None = None  # argv of the container's vLLM process (env_source vllm*)
    env_key: str | None = None  # what the environment depends on (container ID, vLLM PIDs)
    env_unchanged: bool = False  # env skipped: the caller's copy for env_key still holds
    apps_skipped: bool = False  # gpu_apps not asked this time: the caller keeps its last list
    ray_nodes: list[RayNode] | None = None  # None: not asked (worker, or skipped this tick)
    ray_source: str | None = None  # dashboard | python
    ray_error: str | None = None
    # what Ray cannot place, read with the table (None: not read this time)
    ray_pgs: list[PlacementGroup] | None = None
    ray_demands: list[RayDemand] | None = None
    ray_pending_error: str | None = None
    gcs_peers: tuple[str, ...] | None = (
        None  # remote ip:port on Ray's GCS port (head); None: not listed
    )
    vllm: VllmStatus | None = None  # None: not asked (worker, or no port)
    vllm_http_code: int | None = None
    vllm_log_tail: str | None = None  # the end of the vLLM log (head, when asked)
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
        node.vllm_argv = self.vllm_argv
        node.vllm_pid = self.env_pid if self.vllm_argv is not None else None
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


# Section parsers: `(the section, every section by name, the result to fill)`. Each runs
# only when its section is in the output; a failed section is already in `res.errors`.
Parser = Callable[[Section, dict[str, Section], ProbeResult], None]


def _hostname(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.hostname = sec.body.strip() or None


def _addr(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.interfaces = parse_ip_json(sec.body)


def _addr4(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if (addr := secs.get("addr")) is not None and addr.ok:
        return
    link = secs.get("link")
    res.interfaces = parse_ip_text(sec.body, link.body if link else "")
    if sec.ok:
        res.errors.pop("addr", None)  # `ip -j` unsupported, the text fallback worked


def _containers(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.containers = parse_docker_ps(sec.body)


def _meminfo(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.mem = parse_meminfo(sec.body)


def _gpus(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.gpus = parse_gpu_query(sec.body, meminfo=res.mem)


def _gpu_apps(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if sec.ok:
        res.gpu_processes = parse_compute_apps(sec.body)
    res.apps_skipped = sec.status == "skipped:recent"


def _env_key(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    res.env_key = sec.body.strip() or None


def _env(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    res.env_unchanged = sec.status == "skipped:unchanged"
    if not sec.ok:
        return
    first, _, rest = sec.body.partition("\n")
    m = re.match(r"pid=(\d+) source=(\S+)", first)
    if m:
        res.env_pid, res.env_source = int(m[1]), m[2]
        if rest.startswith("argv="):  # the vLLM process's argv, \001 between arguments
            line, _, rest = rest.partition("\n")
            res.vllm_argv = line[len("argv=") :].rstrip("\x01").split("\x01")
    else:
        rest = sec.body
    res.env = parse_environ(rest)


def _ray_dashboard(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    res.ray_source = "dashboard"
    res.ray_nodes, res.ray_error = parse_ray_nodes(sec.body)


def _ray(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if "ray_dashboard" in secs:  # the dashboard answered: the Python route was not taken
        return
    if sec.status == "unavailable":
        res.ray_nodes, res.ray_error = [], "Ray dashboard not answering"
    elif sec.skipped:
        why = sec.status.partition(":")[2]
        if why:  # plain `skipped` = not asked this tick: no error
            res.ray_error = "Ray table not read: " + SKIP_REASONS.get(why, why)
    else:
        res.ray_source = "python"
        res.ray_nodes, res.ray_error = parse_ray_nodes(sec.body)
        if res.ray_error and sec.rc not in (0, None):
            res.ray_error = f"{res.ray_error} ({sec.error()})"
        if res.ray_error is None:
            res.ray_pgs, res.ray_demands, res.ray_pending_error = parse_snippet_pending(sec.body)


def _dashboard_part(sec: Section, res: ProbeResult, parse: Callable, what: str) -> list:
    """One of the dashboard's pending parts (placement groups, cluster status): its parsed
    list, its error (or the section's) added to `ray_pending_error`."""
    value, err = parse(sec.body) if sec.ok else ([], f"dashboard {what}: {sec.error()}")
    if err:
        res.ray_pending_error = "; ".join(x for x in (res.ray_pending_error, err) if x)
    return value


def _ray_pgs(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    res.ray_pgs = _dashboard_part(sec, res, parse_pgs_dashboard, "placement groups")


def _ray_status(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    res.ray_demands = _dashboard_part(sec, res, parse_cluster_status, "cluster status")


def _hex_ip(h: str) -> str:
    """/proc/net/tcp's address hex (little-endian words) -> dotted IPv4, or v6 hex."""
    if len(h) == 8:
        return ".".join(str(int(h[i : i + 2], 16)) for i in (6, 4, 2, 0))
    if len(h) == 32 and h[:24].upper() == "0000000000000000FFFF0000":  # v4-mapped
        return _hex_ip(h[24:])
    return h.lower()


def parse_gcs_conns(text: str, own_ips: set[str] | frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Remote endpoints (`ip:port`, sorted) of the GCS connections, from /proc/net/tcp's
    `rem_address` column. Loopback and the node's own addresses are left out: the head's
    own clients (a Ray table query among them) come and go without the table changing."""
    out = set()
    for line in text.split():
        addr, _, port = line.partition(":")
        if not port:
            continue
        try:
            ip, num = _hex_ip(addr), int(port, 16)
        except ValueError:
            continue
        if ip.startswith("127.") or ip in own_ips or ip == "0" * 31 + "1":
            continue
        out.add(f"{ip}:{num}")
    return tuple(sorted(out))


def _gcs_conns(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    own = {ip.split("/")[0] for i in res.interfaces for ip in i.ipv4}
    res.gcs_peers = parse_gcs_conns(sec.body, own) if sec.ok else None


def _health(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    st = VllmStatus()
    res.vllm = st
    if sec.missing or sec.status == "unavailable":
        st.detail = "no HTTP client (curl or python3) on the head"
        return
    body = sec.body.strip()
    code = int(body) if body.isdigit() and int(body) > 0 else None
    res.vllm_http_code = code
    st.healthy, st.detail = health_from_code(code)
    if code is None:
        res.errors.pop("health", None)  # not serving is a state, not a probe error
        if sec.rc == 28:
            st.detail = "timed out"


def _asked_vllm(secs: dict[str, Section], res: ProbeResult) -> VllmStatus | None:
    """The status `_health` made, when vLLM was actually asked (an HTTP client existed)."""
    health = secs.get("health")
    if health is None or health.missing or health.status == "unavailable":
        return None
    return res.vllm


def _metrics(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if (st := _asked_vllm(secs, res)) is not None and sec.body.strip():
        parse_vllm_metrics(sec.body, st)


def _version(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if (st := _asked_vllm(secs, res)) is not None and sec.ok:
        m = re.search(r'"version"\s*:\s*"([^"]+)"', sec.body)
        if m:
            st.version = m[1]


def _vllm_log(sec: Section, secs: dict[str, Section], res: ProbeResult) -> None:
    if not sec.skipped:  # skipped:unchanged (resident probe): what was read last still holds
        res.vllm_log_tail = sec.body


@dataclass(frozen=True)
class SectionSpec:
    """One section of the probe's output: `parse` reads it into ProbeResult's `result_field`
    (and the fields that go with it, as the parser says); `tool` is what a `missing` status
    means is not installed."""

    name: str
    result_field: str | None  # None: framing only (the `probe` header)
    parse: Parser | None = None  # None: read by another section's parser
    tool: str | None = None


# Every section probe.sh emits, declared once; parsers run in this order (meminfo before
# gpus: a unified-memory GPU's total comes from it). tests/unit/test_remote_scripts.py checks
# that the script emits exactly these names.
SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec("probe", None),  # script version and arguments, for people reading output
    SectionSpec("hostname", "hostname", _hostname),
    SectionSpec("addr", "interfaces", _addr, tool="ip"),  # `ip -j addr`
    SectionSpec("addr4", "interfaces", _addr4),  # `ip -o -4 addr show`, when `ip -j` failed
    SectionSpec("link", "interfaces"),  # `ip -o link`, read by addr4
    SectionSpec("containers", "containers", _containers, tool="docker"),
    SectionSpec("meminfo", "mem", _meminfo),
    SectionSpec("gpus", "gpus", _gpus, tool="nvidia-smi"),
    SectionSpec("gpu_apps", "gpu_processes", _gpu_apps, tool="nvidia-smi"),
    SectionSpec("env_key", "env_key", _env_key),  # container ID + its vLLM processes' PIDs
    SectionSpec("env", "env", _env),  # also env_pid, env_source, vllm_argv, env_unchanged
    SectionSpec("ray_dashboard", "ray_nodes", _ray_dashboard),  # also ray_source, ray_error
    SectionSpec("ray", "ray_nodes", _ray),  # the Python route; also ray_source, ray_error,
    # and (its @@PGS@@ / @@STATUS@@ lines) ray_pgs, ray_demands, ray_pending_error
    SectionSpec("ray_pgs", "ray_pgs", _ray_pgs),  # dashboard: /api/v0/placement_groups
    SectionSpec("ray_status", "ray_demands", _ray_status),  # dashboard: /api/cluster_status
    SectionSpec("gcs_conns", "gcs_peers", _gcs_conns, tool="awk"),  # who is on Ray's GCS
    SectionSpec("health", "vllm", _health, tool="curl or python3"),  # also vllm_http_code
    SectionSpec("metrics", "vllm", _metrics),
    SectionSpec("version", "vllm", _version),
    SectionSpec("vllm_log", "vllm_log_tail", _vllm_log),  # the end of vllm.log, while starting
)
SECTION_NAMES = frozenset(s.name for s in SECTIONS)

# What a `missing` section means, for messages.
MISSING_TOOL = {s.name: s.tool for s in SECTIONS if s.tool}


def parse_probe(stdout: str) -> ProbeResult:
    """A probe's stdout -> ProbeResult. Never raises; unreadable parts become errors."""
    res = ProbeResult()
    secs = split_sections(stdout)
    res.sections = secs
    res.complete = stdout.rstrip().endswith("@@sparktui:end@@")
    if not secs:
        res.errors["probe"] = "no probe output" + (
            f": {stdout.strip()[:300]}" if stdout.strip() else ""
        )
        return res
    for name, sec in secs.items():
        if sec.missing:
            res.missing.append(name)
        elif (err := sec.error()) is not None:
            res.errors[name] = err
    for spec in SECTIONS:
        if spec.parse is not None and (found := secs.get(spec.name)) is not None:
            spec.parse(found, secs, res)
    return res
