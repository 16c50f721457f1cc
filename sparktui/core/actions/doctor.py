"""Preflight (`sparktui doctor`, and the first step of serve): the live checks of
`core.checks` on a fresh snapshot (reachability, Ray nodes and their IPs, VLLM_HOST_IP,
*_IFNAME interfaces, GPUs >= TP x PP), plus checks of its own from one more read-only
probe per node: same image on every node, the model path, free memory, stale containers
and busy ports. Everything comes back as Findings."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sparktui.config import Config
from sparktui.core.actions.plan import Plan, Stage, Step
from sparktui.core.command import Command, sh
from sparktui.core.model import ClusterSnapshot, Finding, sort_findings
from sparktui.core.probes.fabric import (
    IbLink,
    IbPort,
    Listener,
    NetDev,
    parse_clock,
    parse_gpu_list,
    parse_ib,
    parse_ibdev2netdev,
    parse_json,
    parse_listeners,
    parse_meminfo_kib,
    parse_netdev,
    parse_runtimes,
)
from sparktui.core.transport import Transport, TransportError
from sparktui.remote import script

log = logging.getLogger(__name__)

# $1 container, $2 configured image ('' = none), $3 model path ('' = not a local path),
# $4 the peers' ips, $5 the GCS <ip>:<port>, $6 doctor_container.py, $7 doctor_net.py.
DOCTOR_SCRIPT = script("doctor.sh")
DOCTOR_CONTAINER_PY = script("doctor_container.py")
DOCTOR_NET_PY = script("doctor_net.py")

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass
class NodeExtras:
    """What the doctor probe saw on one node."""

    container_image: str | None = None  # image ID the configured container runs
    image_id: str | None = None  # ID of the configured image on this node
    repo_digests: list[str] = field(default_factory=list)
    model: str | None = None  # container | host | missing | None (not checked)
    listening: set[int] = field(default_factory=set)
    error: str | None = None
    # The fabric sections (core/actions/fabric.py checks them).
    listeners: list[Listener] = field(default_factory=list)
    hostconfig: dict[str, Any] | None = None  # `docker inspect` .HostConfig
    runtimes: list[str] = field(default_factory=list)  # `docker info` .Runtimes
    default_runtime: str | None = None
    host_gpus: list[str] = field(default_factory=list)  # `nvidia-smi -L` on the host
    netdev: dict[str, NetDev] = field(default_factory=dict)
    ib: list[IbPort] = field(default_factory=list)
    ibdev2netdev: list[IbLink] = field(default_factory=list)
    meminfo_kib: dict[str, int] = field(default_factory=dict)
    incontainer: dict[str, Any] | None = None  # doctor_container.py's JSON
    net: dict[str, Any] | None = None  # doctor_net.py's JSON
    clock: float | None = None  # the node's clock at the start / end of the probe
    clock_end: float | None = None
    sent_at: float | None = None  # this machine's clock when the probe left / came back
    received_at: float | None = None


@dataclass
class DoctorReport:
    findings: list[Finding]
    snapshot: ClusterSnapshot | None = None
    extras: dict[str, NodeExtras] = field(default_factory=dict)
    matrix: dict[str, Any] | None = None  # checks x nodes (core/actions/fabric.py)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


def local_model_path(model: str | None) -> str | None:
    """The model as a path to check on the nodes, or None for a hub id like `org/name`."""
    if model and model.startswith(("/", "./", "../", "~")):
        return model
    return None


def doctor_command(cfg: Config, node_name: str) -> Command:
    n = cfg.node(node_name)
    assert n is not None
    peers = " ".join(m.ip for m in cfg.nodes if m.name != n.name and m.ip)
    native = cfg.backend_configured and cfg.backend == "native"  # no Ray GCS to reach
    gcs = f"{cfg.head.ip}:{cfg.ray.port}" if cfg.head.ip and not native else ""
    return sh(
        DOCTOR_SCRIPT,
        n.container.name,
        n.container.image or "",
        local_model_path(cfg.vllm.model) or "",
        peers,
        gcs,
        DOCTOR_CONTAINER_PY,
        DOCTOR_NET_PY,
        timeout=20,
        description="doctor: image, model, ports, container limits, GPUs, RDMA, "
        "interconnect, versions, clock",
    )


def parse_listening(text: str) -> set[int]:
    """/proc/net/tcp{,6} -> local ports in LISTEN state (st 0A)."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A" or ":" not in parts[1]:
            continue
        try:
            ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except ValueError:
            continue
    return ports


def parse_doctor_probe(text: str) -> NodeExtras:
    sections: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("@@"):
            cur = line[2:].strip()
            sections[cur] = []
        elif cur is not None:
            sections[cur].append(line)
    x = NodeExtras()
    ci = [s.strip() for s in sections.get("container_image", []) if s.strip()]
    x.container_image = ci[0] if ci else None
    img = [s.strip() for s in sections.get("image", []) if s.strip()]
    if img:
        parts = img[0].split(" ", 1)
        x.image_id = parts[0]
        if len(parts) > 1 and parts[1].strip():
            x.repo_digests = sorted(d for d in parts[1].split(",") if d)
    model = [s.strip() for s in sections.get("model", []) if s.strip()]
    x.model = model[0] if model else None
    listen = "\n".join(sections.get("listen", []))
    x.listening = parse_listening(listen)
    x.listeners = parse_listeners(listen)

    def sec(name: str) -> str:
        return "\n".join(sections.get(name, []))

    x.hostconfig = parse_json(sec("hostconfig"))
    x.runtimes, x.default_runtime = parse_runtimes(sec("runtimes"))
    x.host_gpus = parse_gpu_list(sec("host_gpus"))
    x.netdev = parse_netdev(sec("netdev"))
    x.ib = parse_ib(sec("ib"))
    x.ibdev2netdev = parse_ibdev2netdev(sec("ibdev2netdev"))
    x.meminfo_kib = parse_meminfo_kib(sec("meminfo"))
    x.incontainer = parse_json(sec("incontainer"))
    x.net = parse_json(sec("net"))
    x.clock = parse_clock(sec("clock"))
    x.clock_end = parse_clock(sec("clock_end"))
    if "end" not in sections:
        x.error = "doctor probe output was cut short"
    return x


def _gpu_memory_utilization(args: list[str]) -> float:
    for i, a in enumerate(args):
        value = None
        if a == "--gpu-memory-utilization" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--gpu-memory-utilization="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return DEFAULT_GPU_MEMORY_UTILIZATION
    return DEFAULT_GPU_MEMORY_UTILIZATION


def preflight_findings(
    cfg: Config, snap: ClusterSnapshot, extras: dict[str, NodeExtras]
) -> list[Finding]:
    """Doctor's own findings (the live checks' are in `snap.findings` already)."""
    out: list[Finding] = []
    have = {(f.id, f.node) for f in snap.findings}
    head = cfg.head
    head_state = snap.node(head.name)
    serving = bool(snap.vllm.healthy)

    if (
        head_state is not None
        and head_state.reachable
        and snap.ray_error
        and snap.ray_error != "not read yet"
    ):
        out.append(
            Finding(
                "ray-unavailable",
                "error",
                head.name,
                f"the Ray node table could not be read on {head.name}: {snap.ray_error}",
                fix="Start the cluster: sparktui restart.",
            )
        )

    # Images: the same on every node.
    ids: dict[str, str] = {}
    digests: dict[str, tuple[str, ...]] = {}
    for n in cfg.nodes:
        x = extras.get(n.name)
        st = snap.node(n.name)
        if x is None or st is None or not st.reachable:
            continue
        c = st.container(n.container.name)
        running = c is not None and c.running
        if n.container.image and x.image_id is None and not running:
            out.append(
                Finding(
                    "image-missing",
                    "error",
                    n.name,
                    f"image {n.container.image} is not on {n.name}",
                    fix=f"Pull or load it there (docker pull {n.container.image} on {n.name}).",
                )
            )
        ident = (x.container_image if running else None) or x.image_id
        if ident:
            ids[n.name] = ident
        if x.repo_digests:
            digests[n.name] = tuple(x.repo_digests)
    if len(set(ids.values())) > 1:
        by_digest = len(digests) == len(ids) and len(set(digests.values())) > 1
        listing = ", ".join(f"{k}: {v.removeprefix('sha256:')[:12]}" for k, v in ids.items())
        shared = len(digests) == len(ids) and len(set(digests.values())) == 1
        if not shared:
            out.append(
                Finding(
                    "image-mismatch",
                    "error" if by_digest else "warning",
                    None,
                    f"the nodes run different images ({listing})"
                    + (
                        ""
                        if by_digest
                        else "; built or imported separately, they may still hold the same software"
                    ),
                    fix="Use one image everywhere (same tag and digest: Ray and Python versions "
                    "must match exactly), then sparktui restart.",
                )
            )

    # The model path.
    path = local_model_path(cfg.vllm.model)
    if path:
        for n in cfg.nodes:
            x = extras.get(n.name)
            if x is None or x.model is None:
                continue
            if x.model == "missing":
                out.append(
                    Finding(
                        "model-path-missing",
                        "error",
                        n.name,
                        f"the model path {path} does not exist on {n.name}",
                        fix=f"Copy the model to {path} on {n.name} (every node loads its shard "
                        f"from its own disk).",
                    )
                )
            elif x.model == "host":
                st = snap.node(n.name)
                c = st.container(n.container.name) if st else None
                if c is not None and c.running:
                    out.append(
                        Finding(
                            "model-path-not-mounted",
                            "error",
                            n.name,
                            f"{path} exists on {n.name} but not inside container "
                            f"{n.container.name}",
                            fix="Mount it: add -v <dir>:<dir> to container.run_args, then "
                            "sparktui restart.",
                        )
                    )

    # Free memory (skipped while vLLM serves: then it is in use, as it should be).
    util = _gpu_memory_utilization(cfg.vllm.args)
    for st in snap.nodes:
        if serving or not st.reachable:
            continue
        for g in st.gpus:
            if not g.memory_total_mib:
                continue
            need = util * g.memory_total_mib
            free = (
                st.mem_available_mib if g.unified else g.memory_total_mib - (g.memory_used_mib or 0)
            )
            if free is None or free >= need:
                continue
            kind = "unified memory (shared with the CPU)" if g.unified else f"GPU {g.index}"
            out.append(
                Finding(
                    "insufficient-memory",
                    "warning" if g.unified else "error",
                    st.name,
                    f"{st.name}: {free:,} MiB free of {g.memory_total_mib:,} MiB {kind}; "
                    f"vLLM asks for {util:g} x total = {need:,.0f} MiB",
                    fix=(
                        "Free memory (stop other GPU processes; on unified memory drop the page "
                        "cache: sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches') or lower "
                        "--gpu-memory-utilization in vllm.args."
                    ),
                )
            )
            break

    # Stale containers: others that run Ray or vLLM (they hold GPUs and ports).
    for n in cfg.nodes:
        st = snap.node(n.name)
        if st is None or not st.reachable:
            continue
        for c in st.containers:
            if c.name == n.container.name or not c.running:
                continue
            if (
                "ray start" in c.command
                or "vllm" in c.command
                or (n.container.image and c.image == n.container.image)
            ):
                out.append(
                    Finding(
                        "stale-container",
                        "warning",
                        n.name,
                        f"{n.name}: container {c.name} ({c.image}, {c.status}) also runs "
                        f"Ray or vLLM",
                        fix=f"Remove it if it is left over: docker rm -f {c.name} on {n.name}.",
                    )
                )

    # Busy ports on the head.
    if head_state is not None and head_state.reachable and head.name in extras:
        x = extras[head.name]
        c = head_state.container(head.container.name)
        running = c is not None and c.running
        if cfg.vllm.port in x.listening:
            if serving:
                out.append(
                    Finding(
                        "vllm-already-serving",
                        "warning",
                        head.name,
                        f"vLLM already serves on {head.name}:{cfg.vllm.port} (/health is 200)",
                        fix="Nothing to do; to serve another model, sparktui restart first.",
                    )
                )
            else:
                out.append(
                    Finding(
                        "port-busy",
                        "error",
                        head.name,
                        f"port {cfg.vllm.port} is already in use on {head.name} (not a healthy vLLM)",
                        fix=f"Find the process (ss -ltnp 'sport = :{cfg.vllm.port}' on "
                        f"{head.name}) and stop it, or set vllm.port.",
                    )
                )
        ray_ok = snap.ray_error is None
        if cfg.ray.port in x.listening and not (running and ray_ok):
            out.append(
                Finding(
                    "port-busy",
                    "error",
                    head.name,
                    f"port {cfg.ray.port} (Ray GCS) is in use on {head.name}, but not by a working "
                    f"Ray in container {head.container.name}",
                    fix=f"A stale Ray holds it: find it (ss -ltnp 'sport = :{cfg.ray.port}') and "
                    f"stop it, then sparktui restart.",
                )
            )

    # VLLM_HOST_IP equals the configured ip (checks compare it with Ray's view only).
    for n in cfg.nodes:
        st = snap.node(n.name)
        if st is None or not st.reachable or not n.ip:
            continue
        c = st.container(n.container.name)
        if c is None or not c.running:
            continue
        host_ip = st.env.get("VLLM_HOST_IP")
        if not host_ip:
            out.append(
                Finding(
                    "vllm-host-ip-unset",
                    "warning",
                    n.name,
                    f"VLLM_HOST_IP is not set in container {n.container.name} on {n.name}: vLLM "
                    f"will use the default-route address, not {n.ip}",
                    fix="sparktui restart sets VLLM_HOST_IP to each node's configured ip.",
                )
            )
        elif host_ip != n.ip and ("vllm-host-ip-mismatch", n.name) not in have:
            out.append(
                Finding(
                    "vllm-host-ip-mismatch",
                    "error",
                    n.name,
                    f"VLLM_HOST_IP on {n.name} is {host_ip}, the config says {n.ip}",
                    fix="sparktui restart sets VLLM_HOST_IP to each node's configured ip.",
                    captures={"vllm_host_ip": host_ip, "configured_ip": n.ip},
                )
            )
    return out


def doctor_findings(
    cfg: Config, snap: ClusterSnapshot, extras: dict[str, NodeExtras]
) -> list[Finding]:
    """The live checks' findings plus doctor's own and the fabric's, errors first."""
    from sparktui.core.actions.fabric import fabric_checks

    board = fabric_checks(cfg, snap, extras)
    return sort_findings(
        list(snap.findings) + preflight_findings(cfg, snap, extras) + board.findings
    )


async def _extras(cfg: Config, transports: dict[str, Transport]) -> dict[str, NodeExtras]:
    async def one(name: str) -> tuple[str, NodeExtras]:
        sent = time.time()
        try:
            r = await transports[name].run(doctor_command(cfg, name))
        except TransportError as e:
            return name, NodeExtras(error=str(e))
        x = parse_doctor_probe(r.stdout)
        x.sent_at, x.received_at = sent, time.time()
        return name, x

    pairs = await asyncio.gather(*(one(n.name) for n in cfg.nodes))
    return dict(pairs)


async def run_doctor(cfg: Config, transports: dict[str, Transport] | None = None) -> DoctorReport:
    """A fresh snapshot (with the Ray table) and the doctor probe on every node, in parallel;
    only read-only commands. Transports passed in stay open; ones made here are closed."""
    from sparktui.core.monitor import Monitor
    from sparktui.core.ssh import transport_for

    own = transports is None
    if transports is None:
        transports = {n.name: transport_for(n, read_only=cfg.read_only) for n in cfg.nodes}
    monitor = Monitor(cfg, transports)
    try:
        snap, extras = await asyncio.gather(
            monitor.refresh(wait=None, with_ray=True), _extras(cfg, transports)
        )
        native_found: list[Finding] = []
        if snap.backend == "native":  # vLLM's own multi-node mode: its checks (no Ray)
            from sparktui.core.actions import native

            native_found = await native.doctor_findings(
                cfg, snap, transports, {k: x.listening for k, x in extras.items()}
            )
    finally:
        for t in monitor._tasks.values():
            t.cancel()
        if own:
            await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)
    findings = doctor_findings(cfg, snap, extras)
    if native_found:
        findings = sort_findings(findings + native_found)
    from sparktui.core.actions.fabric import fabric_checks

    matrix = fabric_checks(cfg, snap, extras).matrix(findings)
    return DoctorReport(findings, snap, extras, matrix=matrix)


def doctor_plan(cfg: Config) -> Plan:
    """What doctor runs (for --dry-run): read-only probes on every node."""
    steps = []
    for n in cfg.nodes:
        commands = []
        try:
            from sparktui.core.probes import script as probe_script

            commands.append(
                probe_script.build_probe(n.name, n.container.name, n.role == "head", cfg.vllm.port)
            )
        except Exception:  # the probe module's API: best effort for a dry-run listing
            log.warning("building the probe of %s for the plan failed", n.name, exc_info=True)
        commands.append(doctor_command(cfg, n.name))
        steps.append(Step(n.name, "probe the node (read-only)", tuple(commands)))
    return Plan(
        "doctor",
        [Stage("probe every node", tuple(steps))],
        source="checks",
        title="Doctor: read-only preflight checks on every node",
    )
