"""Plain data the whole program shares: node state, the cluster snapshot, findings."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing), from a live check or a log line.

    `id` names the kind (`ray-ip-mismatch`, or a knowledge-base pattern id); `node` is the
    node it concerns (None for the whole cluster); `fix` is what to do, with live names
    and IPs filled in where known.
    """

    id: str
    severity: Severity
    node: str | None
    message: str
    fix: str = ""
    source: Literal["check", "log"] = "check"
    category: str | None = None
    title: str | None = None
    explanation: str = ""
    links: tuple[str, ...] = ()
    line: int | None = None
    text: str | None = None
    captures: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["links"] = list(self.links)
        return d


@dataclass
class Container:
    name: str
    image: str
    state: str  # created, running, paused, restarting, removing, exited, dead
    status: str  # "Up 3 minutes", "Exited (0) 8 days ago"
    id: str = ""
    created_at: str = ""
    running_for: str = ""
    command: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass
class Gpu:
    index: int
    name: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    unified: bool = False
    utilization_pct: int | None = None
    uuid: str = ""
    power_w: float | None = None  # power.draw (GB10 gives it; memory it does not)
    temperature_c: int | None = None  # temperature.gpu
    sm_clock_mhz: int | None = None  # clocks.sm


@dataclass
class GpuProcess:
    pid: int
    process_name: str
    used_memory_mib: int | None


@dataclass
class RayNode:
    """One row of Ray's node table (dead rows included)."""

    node_id: str
    ip: str  # NodeManagerAddress: the IP Ray registered the node under
    alive: bool
    is_head: bool = False
    hostname: str = ""
    gpus: float = 0.0
    cpus: float = 0.0
    death_reason: str = ""


@dataclass
class RayView:
    """What Ray says about one configured node."""

    registered_ip: str | None = None
    alive: bool | None = None
    gpus: float | None = None
    node_id: str | None = None
    death_reason: str = ""


PG_PENDING_STATES = ("PENDING", "PREPARED", "RESCHEDULING")  # not placed (yet, or again)


@dataclass
class PlacementGroup:
    """One of Ray's placement groups (the GCS's table, or the dashboard's
    `/api/v0/placement_groups`). REMOVED ones stay in Ray's table a while; the parsers drop
    them."""

    pg_id: str
    name: str
    state: str  # PENDING | PREPARED | CREATED | RESCHEDULING
    bundles: list[dict[str, float]] = field(default_factory=list)  # unit resources, in order
    strategy: str = ""  # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD ('' = not given)
    scheduling_state: str = ""  # INFEASIBLE | NO_RESOURCES | QUEUED | FINISHED | ...
    detached: bool | None = None
    age_s: float | None = None  # how long it has existed (the head's clock), when known

    @property
    def pending(self) -> bool:
        return self.state in PG_PENDING_STATES

    @property
    def label(self) -> str:
        return f"'{self.name}'" if self.name else self.pg_id[:12]

    def gpus(self) -> float:
        return sum(float(b.get("GPU", 0.0)) for b in self.bundles)


@dataclass
class RayDemand:
    """One line of `ray status`'s Pending Demands: resource shapes Ray cannot place now."""

    kind: Literal["placement_group", "task"]
    shapes: list[tuple[dict[str, float], int]]  # (bundle, how many of it)
    count: int  # the N of `N+ pending ...`
    strategy: str = ""  # placement groups only
    text: str = ""  # the line as Ray printed it


def node_resources(resources: dict[str, float]) -> list[str]:
    """The addresses a bundle pins with `node:<ip>` (Ray's own `node:__internal_head__`
    left out)."""
    return [k[5:] for k in resources if k.startswith("node:") and not k.startswith("node:__")]


@dataclass
class Interface:
    name: str
    state: str  # UP, DOWN, UNKNOWN
    ipv4: list[str] = field(default_factory=list)


@dataclass
class NodeState:
    name: str
    host: str
    role: str  # head | worker
    configured_ip: str | None
    reachable: bool = False
    error: str | None = None
    interfaces: list[Interface] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    gpu_processes: list[GpuProcess] = field(default_factory=list)
    ray: RayView = field(default_factory=RayView)
    env: dict[str, str] = field(default_factory=dict)  # as the container's processes see it
    vllm_argv: list[str] | None = None  # the container's vLLM serve process; None: none runs
    vllm_pid: int | None = None  # its PID inside the container
    mem_total_mib: int | None = None
    mem_available_mib: int | None = None
    probe_seconds: float | None = None
    probed_at: float = field(default_factory=time.time)

    @property
    def ips(self) -> list[str]:
        return [ip for iface in self.interfaces for ip in iface.ipv4]

    def container(self, name: str | None) -> Container | None:
        for c in self.containers:
            if c.name == name:
                return c
        return None


@dataclass
class VllmStatus:
    """The vLLM server as seen from /health and /metrics on the head."""

    healthy: bool | None = None  # None: not reachable / not serving
    detail: str = ""
    running: float | None = None
    waiting: float | None = None
    kv_cache_pct: float | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    tokens_per_s: float | None = None
    version: str | None = None
    # the latency histograms of this sample ("ttft", "itl" -> vllm_metrics.Histogram)
    histograms: dict[str, Any] = field(default_factory=dict)
    # start-up, from vLLM's log (core/phases.py): phase id, 0-1 or None, when it began
    phase: str | None = None
    phase_label: str | None = None
    phase_progress: float | None = None
    phase_started_at: float | None = None  # Unix time
    phase_eta_s: float | None = None
    phase_ranks: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> phase, progress
    # over the last minute, from the histograms (seconds) and the token counters
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    ttft_mean_s: float | None = None
    itl_mean_s: float | None = None
    prompt_tokens_per_s: float | None = None


@dataclass
class ClusterSnapshot:
    cluster: str
    nodes: list[NodeState]
    ray_nodes: list[RayNode] = field(default_factory=list)
    ray_source: str | None = None  # which node answered the Ray table, or None
    ray_via: str | None = None  # how it was read: dashboard | python
    ray_error: str | None = None
    ray_pgs: list[PlacementGroup] = field(default_factory=list)  # placement groups, not REMOVED
    ray_demands: list[RayDemand] = field(default_factory=list)  # `ray status` Pending Demands
    ray_pending_error: str | None = None  # why the two above could not be read
    vllm: VllmStatus = field(default_factory=VllmStatus)
    findings: list[Finding] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)
    tick: int = 0
    backend: str = "ray"  # ray | native: what the checks and the panes go by
    backend_note: str = ""  # how it was decided, when the config does not say

    def node(self, name: str) -> NodeState | None:
        for n in self.nodes:
            if n.name == name:
                return n
        return None

    @property
    def pending_pgs(self) -> list[PlacementGroup]:
        return [p for p in self.ray_pgs if p.pending]

    def node_by_ip(self, ip: str) -> NodeState | None:
        """The configured node that owns `ip` (configured, registered, or on an interface)."""
        for n in self.nodes:
            if ip in (n.configured_ip, n.ray.registered_ip) or ip in n.ips:
                return n
        return None


def ip_mismatch(
    configured: str | None, registered: str | None, host_ip: str | None
) -> tuple[bool, bool]:
    """The one rule for "the IPs disagree", used by the checks, the node pane and `status`.

    (Ray registered the node under an IP other than its configured one, VLLM_HOST_IP
    differs from the IP Ray knows the node by, or from the configured one before Ray knows).
    """
    ray_differs = bool(registered and configured and registered != configured)
    want = registered or configured
    return ray_differs, bool(host_ip and want and host_ip != want)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable otherwise."""
    return sorted(findings, key=lambda f: SEVERITY_RANK.get(f.severity, 9))
