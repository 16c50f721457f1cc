"""The doctor's fabric and per-node-difference checks, and the matrix they fill.

Each check in `CHECKS` marks every node's cell `ok`, `fail` (with a Finding naming the node,
the values and the fix) or `n/a` (with why), from the doctor probe (`doctor.sh`, parsed into
`NodeExtras`) and the node's snapshot. Cross-node checks name the odd one out: the node whose
value differs from the others' (on a tie, the one that is not the head; for an MTU, the
smaller). Pure: config, snapshot and probe results in, a `Board` out."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sparktui.config import Config, NodeConfig
from sparktui.core.checks import _interfaces_match
from sparktui.core.model import ClusterSnapshot, Finding, NodeState, Severity

if TYPE_CHECKING:
    from sparktui.core.actions.doctor import NodeExtras

Status = Literal["ok", "fail", "n/a"]
GIB = 1024**3
SHM_MIN = GIB
NOFILE_MIN = 65536
CLOCK_SKEW_MAX = 1.0
RAY_CLIENT_PORT = 10001
# vLLM's Ray executor copies the head's environment onto every worker (vllm/ray/ray_env.py,
# vllm/v1/executor/ray_env_utils.py: everything but the worker-specific names and those in
# ray_non_carry_over_env_vars.json); these prefixes decide the fabric.
CARRY_PREFIXES = ("NCCL_", "UCX_", "GLOO_")
NET_VARS = frozenset(
    {
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "UCX_NET_DEVICES",
        "NCCL_IB_DISABLE",
        "NCCL_NET",
        "NCCL_IB_ADDR_FAMILY",
    }
)
NON_CARRY_FILE = "ray_non_carry_over_env_vars.json"


@dataclass(frozen=True)
class CheckSpec:
    id: str
    scope: Literal["node", "cluster"]
    title: str
    reads: str  # what it reads, for the README and the console's detail


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec(
        "gpu-not-in-container",
        "node",
        "GPUs in the container",
        "`nvidia-smi -L` on the host and inside the container; `docker info` runtimes",
    ),
    CheckSpec(
        "shm-small",
        "node",
        "/dev/shm size",
        "`docker inspect` HostConfig.IpcMode/ShmSize; statvfs(/dev/shm) in the container",
    ),
    CheckSpec(
        "ulimit-low",
        "node",
        "open files / locked memory",
        "RLIMIT_NOFILE and RLIMIT_MEMLOCK in the container; HostConfig.Privileged/CapAdd",
    ),
    CheckSpec(
        "rdma-not-in-container",
        "node",
        "RDMA devices in the container",
        "/sys/class/infiniband on the host; /dev/infiniband in the container",
    ),
    CheckSpec(
        "roce-port-down",
        "node",
        "HCAs of NCCL_IB_HCA active",
        "NCCL_IB_HCA in the container; /sys/class/infiniband/<dev>/ports/<n>/state; `ibdev2netdev`",
    ),
    CheckSpec(
        "gid-invalid",
        "node",
        "NCCL_IB_GID_INDEX is RoCE v2 / IPv4",
        "NCCL_IB_GID_INDEX; .../ports/<n>/gids/<i> and gid_attrs/types/<i>",
    ),
    CheckSpec(
        "page-cache-pressure",
        "node",
        "free memory vs page cache (unified)",
        "/proc/meminfo MemFree/MemAvailable/Cached; --gpu-memory-utilization",
    ),
    CheckSpec(
        "ray-memory-monitor-on",
        "node",
        "Ray memory monitor off (unified)",
        "RAY_memory_monitor_refresh_ms in the container",
    ),
    CheckSpec(
        "peer-unreachable",
        "cluster",
        "peers reachable over the interconnect",
        "ICMP to every peer's ip; TCP to the Ray GCS from the container; "
        "`ip route get <peer>` against NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME; "
        "/sys/class/net/<if>/operstate",
    ),
    CheckSpec(
        "mtu-mismatch",
        "cluster",
        "interconnect MTU equal",
        "/sys/class/net/<if>/mtu of the interface holding the node's ip; an ICMP echo "
        "of that MTU with Don't Fragment to every peer",
    ),
    CheckSpec(
        "version-mismatch",
        "cluster",
        "Python/Ray/vLLM/torch/NCCL versions equal",
        "package metadata (and libnccl.so.2.*) inside the container",
    ),
    CheckSpec(
        "nccl-env-overwritten",
        "cluster",
        "head's NCCL_/UCX_/GLOO_ copied onto workers",
        "NCCL_*/UCX_*/GLOO_* of every container; $VLLM_CONFIG_ROOT/"
        "ray_non_carry_over_env_vars.json in the head's container",
    ),
    CheckSpec(
        "model-incomplete",
        "cluster",
        "model shards equal on every node",
        "model.safetensors.index.json, each shard's size and readability, *.incomplete, "
        "inside the container",
    ),
    CheckSpec(
        "clock-skew",
        "cluster",
        "clocks within 1 s",
        "`date +%s.%N` at the start and end of the probe against the SSH round trip",
    ),
    CheckSpec(
        "port-exposed",
        "cluster",
        "Ray/vLLM ports not on 0.0.0.0 or management",
        "/proc/net/tcp{,6} listeners on the Ray GCS, dashboard, client and vLLM ports; "
        "--api-key in vllm.args",
    ),
)
CHECK_IDS = tuple(c.id for c in CHECKS)


@dataclass
class Cell:
    status: Status = "n/a"
    value: str | None = None
    note: str = ""
    findings: list[Finding] = field(default_factory=list)


@dataclass
class Board:
    """Cells per (check, node), the findings, and each cross-node check's odd one out."""

    nodes: list[str]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    odd: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for c in CHECKS:
            self.cells.setdefault(c.id, {n: Cell(note="not checked") for n in self.nodes})

    def cell(self, check: str, node: str) -> Cell:
        return self.cells[check][node]

    def ok(self, check: str, node: str, value: str | None = None, note: str = "") -> None:
        c = self.cell(check, node)
        if c.status != "fail":
            c.status, c.note = "ok", note
            if value is not None:
                c.value = value
        elif value is not None and c.value is None:
            c.value = value

    def na(self, check: str, node: str, why: str) -> None:
        c = self.cell(check, node)
        if c.status == "n/a":
            c.note = why

    def value(self, check: str, node: str, value: str) -> None:
        self.cell(check, node).value = value

    def fail(
        self,
        check: str,
        node: str | None,
        severity: Severity,
        message: str,
        fix: str,
        value: str | None = None,
        captures: dict[str, str] | None = None,
    ) -> Finding:
        f = Finding(check, severity, node, message, fix=fix, captures=dict(captures or {}))
        self.findings.append(f)
        targets = [node] if node else self.nodes
        for n in targets:
            c = self.cell(check, n)
            if severity != "info":
                c.status, c.note = "fail", ""
            c.findings.append(f)
            if value is not None:
                c.value = value
        return f

    def matrix(self, findings: list[Finding] | None = None) -> dict[str, Any]:
        """JSON-ready: checks x nodes; each cell's finding indexes point into `findings`
        (the report's list) when given."""
        index = {id(f): i for i, f in enumerate(findings or [])}
        rows = []
        for spec in CHECKS:
            cells = {}
            for n in self.nodes:
                c = self.cells[spec.id][n]
                cells[n] = {
                    "status": c.status,
                    "value": c.value,
                    "note": c.note,
                    "findings": [index[id(f)] for f in c.findings if id(f) in index],
                }
            rows.append(
                {
                    "check": spec.id,
                    "scope": spec.scope,
                    "title": spec.title,
                    "odd_one_out": self.odd.get(spec.id) or None,
                    "cells": cells,
                }
            )
        return {"nodes": list(self.nodes), "rows": rows}


@dataclass
class _Node:
    cfg: NodeConfig
    st: NodeState | None
    x: NodeExtras | None

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def container(self) -> str:
        return self.cfg.container.name

    @property
    def probed(self) -> bool:
        return (
            self.st is not None
            and self.st.reachable
            and self.x is not None
            and self.x.error is None
        )

    @property
    def running(self) -> bool:
        if self.st is None:
            return False
        c = self.st.container(self.container)
        return c is not None and c.running

    @property
    def env(self) -> dict[str, str]:
        return self.st.env if self.st is not None else {}

    @property
    def ic(self) -> dict[str, Any] | None:
        """doctor_container.py's answer (None: container not running or no answer)."""
        if self.x is None or not self.running:
            return None
        ic = self.x.incontainer
        return ic if ic and "error" not in ic else None

    @property
    def unified(self) -> bool:
        return self.st is not None and any(g.unified for g in self.st.gpus)

    def iface_of_ip(self) -> str | None:
        if self.st is None or not self.cfg.ip:
            return None
        for i in self.st.interfaces:
            if self.cfg.ip in i.ipv4:
                return i.name
        return None

    def why_not(self) -> str:
        if self.st is None or not self.st.reachable:
            return "unreachable"
        if self.x is None or self.x.error:
            return f"doctor probe failed: {self.x.error if self.x else 'no answer'}"
        if not self.running:
            return f"container {self.container} not running"
        ie = (self.x.incontainer or {}).get("error")
        return f"no answer from the container: {ie}" if ie else "no answer from the container"


def _size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= div:
            v = n / div
            return f"{v:.0f} {unit}" if v >= 10 or v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def _limit(v: int) -> str:
    return "unlimited" if v < 0 else str(v)


def _odd_by_majority(values: dict[str, Any], head: str, prefer_low: bool = False) -> list[str]:
    """The nodes whose value is not the reference: the most common value; on a tie the
    head's (or, with prefer_low, the largest: a node reset to a smaller value is odd)."""
    if len(set(map(repr, values.values()))) <= 1:
        return []
    counts = Counter(repr(v) for v in values.values())
    top = max(counts.values())
    tied = [k for k, c in counts.items() if c == top]
    if len(tied) == 1:
        ref = tied[0]
    elif prefer_low:
        ref = max(tied, key=lambda r: next(v for v in values.values() if repr(v) == r) or 0)
    elif head in values and repr(values[head]) in tied:
        ref = repr(values[head])
    else:
        ref = sorted(tied)[0]
    return [n for n, v in values.items() if repr(v) != ref]


def _gpu_util(args: list[str]) -> float:
    from sparktui.core.actions.doctor import _gpu_memory_utilization

    return _gpu_memory_utilization(args)


def _hca_entries(spec: str) -> tuple[str, list[tuple[str, int | None]]]:
    """NCCL_IB_HCA -> (mode, [(device, port|None)]): mode '' (prefixes), '=' (exact) or
    '^' (exclude)."""
    spec = spec.strip()
    mode = ""
    if spec[:1] in ("^", "="):
        mode, spec = spec[0], spec[1:]
        if spec[:1] == "=" and mode == "^":
            spec = spec[1:]
    out: list[tuple[str, int | None]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        dev, _, port = part.partition(":")
        out.append((dev, int(port) if port.isdigit() else None))
    return mode, out


def fabric_checks(cfg: Config, snap: ClusterSnapshot, extras: dict[str, NodeExtras]) -> Board:
    """Every check of `CHECKS` on every node."""
    nodes = [_Node(n, snap.node(n.name), extras.get(n.name)) for n in cfg.nodes]
    board = Board([n.name for n in nodes])
    for n in nodes:
        if not n.probed:
            for c in CHECKS:
                board.na(c.id, n.name, n.why_not())
    probed = [n for n in nodes if n.probed]
    serving = bool(snap.vllm.healthy)
    for n in probed:
        _gpu(board, n)
        _shm(board, n)
        _ulimit(board, n)
        _rdma(board, n)
        _roce(board, n)
        _gid(board, n)
        _page_cache(board, n, cfg, serving)
        _memory_monitor(board, n)
    _peers(board, cfg, probed, ray=getattr(snap, "backend", "ray") != "native")
    _mtu(board, cfg, probed)
    _versions(board, cfg, probed)
    _carry_over(board, cfg, probed)
    _model(board, cfg, probed)
    _clock(board, cfg, probed)
    _ports(board, cfg, probed)
    return board


# --- per node ---------------------------------------------------------------------------


def _gpu(board: Board, n: _Node) -> None:
    k = "gpu-not-in-container"
    assert n.x is not None
    host = len(n.x.host_gpus)
    if not host:
        return board.na(k, n.name, "no GPU on the host (nvidia-smi -L lists none)")
    ic = n.ic
    if ic is None:
        return board.na(k, n.name, n.why_not())
    g = ic.get("gpus") or {}
    seen = len(g.get("lines") or [])
    value = f"{seen}/{host}"
    if seen >= host:
        return board.ok(k, n.name, value)
    why = f" ({g['error']})" if g.get("error") else ""
    rt = n.x.runtimes
    runtime = (
        ""
        if "nvidia" in rt or not rt
        else f"; docker on {n.name} has no nvidia runtime (runtimes: {', '.join(rt)})"
    )
    board.fail(
        k,
        n.name,
        "error",
        f"container {n.container} on {n.name} sees {seen} of the host's {host} "
        f"GPU(s){why}{runtime}",
        fix="Start the container with --gpus all in container.run_args (with "
        "nvidia-container-toolkit installed: nvidia-ctk runtime configure "
        "--runtime=docker, then restart docker), then sparktui restart.",
        value=value,
        captures={"host_gpus": str(host), "container_gpus": str(seen)},
    )


def _shm(board: Board, n: _Node) -> None:
    k = "shm-small"
    assert n.x is not None
    hc = n.x.hostconfig or {}
    ic = n.ic
    if ic is None or not hc:
        return board.na(k, n.name, n.why_not())
    ipc = str(hc.get("IpcMode") or "")
    if ipc == "host":
        return board.ok(k, n.name, "ipc host")
    size = ic.get("shm_bytes") or hc.get("ShmSize")
    if isinstance(size, int) and size < SHM_MIN:
        board.fail(
            k,
            n.name,
            "error",
            f"/dev/shm in container {n.container} on {n.name} is {_size(size)} (IpcMode "
            f"{ipc or '?'}): NCCL and vLLM's shared-memory buffers need more (SIGBUS)",
            fix="Add --ipc host (or --shm-size 16g) to container.run_args, then sparktui restart.",
            value=_size(size),
            captures={"shm_bytes": str(size)},
        )
        return
    board.ok(k, n.name, _size(size) if isinstance(size, int) else None)


def _rdma_used(n: _Node) -> bool:
    assert n.x is not None
    return bool(n.x.ib) and n.env.get("NCCL_IB_DISABLE", "0") != "1"


def _ulimit(board: Board, n: _Node) -> None:
    k = "ulimit-low"
    ic = n.ic
    if ic is None:
        return board.na(k, n.name, n.why_not())
    nofile = (ic.get("nofile") or [None])[0]
    memlock = (ic.get("memlock") or [None])[0]
    n_txt = _limit(nofile) if isinstance(nofile, int) else "?"
    l_txt = (
        "?"
        if not isinstance(memlock, int)
        else _limit(memlock)
        if memlock < 0
        else f"{memlock // 1024}K"
    )
    value = f"-n {n_txt} -l {l_txt}"
    bad = False
    if isinstance(nofile, int) and 0 <= nofile < NOFILE_MIN:
        bad = True
        board.fail(
            k,
            n.name,
            "warning",
            f"ulimit -n is {nofile} in container {n.container} on {n.name} (below "
            f"{NOFILE_MIN}): loading a sharded model can fail with 'Too many open files'",
            fix="Add --ulimit nofile=1048576:1048576 to container.run_args, then "
            "sparktui restart (docker cannot go above its own hard limit: "
            "LimitNOFILE in docker.service).",
            value=value,
            captures={"nofile": str(nofile)},
        )
    assert n.x is not None
    hc = n.x.hostconfig or {}
    caps = hc.get("CapAdd") or []
    locked_ok = bool(hc.get("Privileged")) or any(str(c).upper().endswith("IPC_LOCK") for c in caps)
    if _rdma_used(n) and isinstance(memlock, int) and memlock >= 0 and not locked_ok:
        bad = True
        board.fail(
            k,
            n.name,
            "error",
            f"ulimit -l is {memlock // 1024} KiB in container {n.container} on "
            f"{n.name}, which uses RDMA: registering NCCL's buffers needs unlimited "
            f"locked memory",
            fix="Add --ulimit memlock=-1:-1 (or --cap-add IPC_LOCK) to "
            "container.run_args, then sparktui restart.",
            value=value,
            captures={"memlock_kib": str(memlock // 1024)},
        )
    if not bad:
        board.ok(k, n.name, value)


def _rdma(board: Board, n: _Node) -> None:
    k = "rdma-not-in-container"
    assert n.x is not None
    if not n.x.ib:
        return board.na(k, n.name, "no RDMA devices on the host (/sys/class/infiniband)")
    if n.env.get("NCCL_IB_DISABLE") == "1":
        return board.na(k, n.name, "NCCL_IB_DISABLE=1 (RDMA deliberately off)")
    ic = n.ic
    if ic is None:
        return board.na(k, n.name, n.why_not())
    devs = sorted({p.device for p in n.x.ib})
    inside = ic.get("dev_infiniband")
    if inside and any(str(d).startswith("uverbs") for d in inside):
        return board.ok(k, n.name, f"{len(inside)} in /dev/infiniband")
    sev: Severity = "error" if n.env.get("NCCL_IB_HCA") else "warning"
    board.fail(
        k,
        n.name,
        sev,
        f"{n.name} has RDMA devices ({', '.join(devs)}) but container {n.container} "
        f"has {'no /dev/infiniband' if inside is None else 'no uverbs device in /dev/infiniband'}"
        f": NCCL falls back to TCP sockets (NET/Socket)",
        fix="Add --device /dev/infiniband (or --privileged) and --ulimit memlock=-1:-1 "
        "to container.run_args, then sparktui restart.",
        value="missing",
        captures={"devices": ",".join(devs)},
    )


def _roce(board: Board, n: _Node) -> None:
    k = "roce-port-down"
    assert n.x is not None
    ports = n.x.ib
    if not ports:
        return board.na(k, n.name, "no RDMA devices on the host")
    spec = n.env.get("NCCL_IB_HCA")
    up_netdevs = {(link.device, link.port) for link in n.x.ibdev2netdev if link.up}
    active = [
        p for p in ports if p.active and (not n.x.ibdev2netdev or (p.device, p.port) in up_netdevs)
    ]
    if not spec:
        return board.na(k, n.name, "NCCL_IB_HCA not set (NCCL uses every active HCA)")
    mode, entries = _hca_entries(spec)
    if mode == "^":
        return board.ok(k, n.name, f"excludes {spec[1:]}")
    listed = []
    bad = False
    for dev, port in entries:
        match = [
            p
            for p in ports
            if (p.device == dev if mode == "=" else p.device.startswith(dev))
            and (port is None or p.port == port)
        ]
        if not match:
            bad = True
            board.fail(
                k,
                n.name,
                "error",
                f"NCCL_IB_HCA={spec} on {n.name} names {dev}{f':{port}' if port else ''}, "
                f"which {n.name} does not have (it has: "
                f"{', '.join(sorted({p.device for p in ports}))})",
                fix=f"Set NCCL_IB_HCA to {n.name}'s active HCAs (ibdev2netdev lists "
                f"them) in the container's env, then sparktui restart.",
                value=f"{dev} missing",
                captures={"hca": dev},
            )
            continue
        listed += match
        down = [p for p in match if not p.active]
        if len(down) == len(match):
            bad = True
            p = down[0]
            board.fail(
                k,
                n.name,
                "error",
                f"{p.device} port {p.port} (in NCCL_IB_HCA on {n.name}) is "
                f"{p.state or 'not ACTIVE'}",
                fix=f"Check the cable and link of {p.device} on {n.name} (ibdev2netdev, "
                f"ip link); NCCL hangs or falls back to sockets while it is down.",
                value=f"{p.device} {p.state}",
                captures={"hca": p.device, "state": p.state},
            )
    unused = [p for p in active if p not in listed and p.link_layer.lower() == "ethernet"]
    if not bad and unused and mode != "^":
        bad = True
        names = ", ".join(f"{p.device}:{p.port}" for p in unused)
        board.fail(
            k,
            n.name,
            "warning",
            f"{n.name}: {names} also Up but not in NCCL_IB_HCA={spec}: only "
            f"{len(listed)} of {len(listed) + len(unused)} active RoCE port(s) carry "
            f"NCCL traffic (half the bandwidth of a dual-port link)",
            fix=f"List every active half: NCCL_IB_HCA="
            f"{','.join(sorted({p.device for p in listed + unused}))} in the "
            f"container's env, then sparktui restart.",
            value=f"{len(listed)}/{len(listed) + len(unused)} used",
        )
    if not bad:
        board.ok(k, n.name, ",".join(f"{p.device}:{p.port}" for p in listed) or None)


def _gid(board: Board, n: _Node) -> None:
    k = "gid-invalid"
    assert n.x is not None
    ports = [p for p in n.x.ib if p.link_layer.lower() == "ethernet"]
    if not ports:
        return board.na(k, n.name, "no RoCE ports on the host")
    if "NCCL_IB_GID_INDEX" not in n.env:
        return board.na(k, n.name, "NCCL_IB_GID_INDEX not set (NCCL picks the GID)")
    raw = n.env["NCCL_IB_GID_INDEX"].strip()
    try:
        idx = int(raw or "0")
    except ValueError:
        board.fail(
            k,
            n.name,
            "error",
            f"NCCL_IB_GID_INDEX={raw!r} on {n.name} is not a number",
            fix="Set NCCL_IB_GID_INDEX to the index of the RoCE v2 IPv4 GID "
            "(see fix of gid-invalid), or unset it.",
            value=raw,
        )
        return
    spec = n.env.get("NCCL_IB_HCA", "")
    used = ports
    if spec and not spec.startswith("^"):
        mode, entries = _hca_entries(spec)
        used = [
            p
            for p in ports
            if any(
                (p.device == d if mode == "=" else p.device.startswith(d))
                and (pt is None or p.port == pt)
                for d, pt in entries
            )
        ]
    used = [p for p in used if p.active] or used
    bad = False
    for p in used:
        g = p.gids.get(idx)
        good = sorted(i for i, x in p.gids.items() if x.type == "RoCE v2" and x.ipv4)
        hint = (
            f"; the RoCE v2 IPv4 GID of {p.device} is at index {good[0]}"
            if good
            else f"; {p.device} has no RoCE v2 IPv4 GID (is an IPv4 address on its netdev?)"
        )
        shown = "empty" if g is None or g.empty else f"{g.gid} ({g.type})"
        if g is None or g.empty or g.type != "RoCE v2" or g.ipv4 is None:
            bad = True
            shown_raw = raw if raw else '"" (empty, read as 0)'
            board.fail(
                k,
                n.name,
                "error",
                f"NCCL_IB_GID_INDEX={shown_raw} on {n.name}: GID {idx} of "
                f"{p.device} port {p.port} is {shown}, not a RoCE v2 IPv4 GID{hint}",
                fix=(
                    f"Set NCCL_IB_GID_INDEX={good[0]} on {n.name} (or unset it and let "
                    f"NCCL choose), then sparktui restart."
                    if good
                    else f"Give {p.device}'s netdev its IPv4 address, or unset NCCL_IB_GID_INDEX."
                ),
                value=f"{idx}: {shown}",
                captures={"hca": p.device, "gid_index": str(idx)},
            )
    if not bad:
        board.ok(k, n.name, f"{idx}: RoCE v2")


def _page_cache(board: Board, n: _Node, cfg: Config, serving: bool) -> None:
    k = "page-cache-pressure"
    assert n.x is not None
    if not n.unified:
        return board.na(k, n.name, "not unified memory")
    if serving:
        return board.na(k, n.name, "vLLM is serving (its memory is in use)")
    m = n.x.meminfo_kib
    total, free, avail = m.get("MemTotal"), m.get("MemFree"), m.get("MemAvailable")
    if not total or free is None or avail is None:
        return board.na(k, n.name, "/proc/meminfo unreadable")
    util = _gpu_util(cfg.vllm.args)
    need = util * total
    value = f"free {_size(free * 1024)}"
    if free < need <= avail:
        cached = m.get("Cached", 0) + m.get("Buffers", 0)
        board.fail(
            k,
            n.name,
            "warning",
            f"{n.name}: MemFree {_size(free * 1024)} is below {util:g} x total = "
            f"{_size(need * 1024)} while MemAvailable is {_size(avail * 1024)}: the page cache "
            f"({_size(cached * 1024)}) holds the difference, and on unified memory vLLM counts "
            f"only free memory (weight loading dies part way)",
            fix=f"Drop the page cache on {n.name}: sudo sh -c 'sync; echo 3 > "
            f"/proc/sys/vm/drop_caches' (without root: posix_fadvise(POSIX_FADV_DONTNEED) "
            f"on the files that fill it, e.g. the model's), or lower "
            f"--gpu-memory-utilization.",
            value=value,
            captures={"memfree_kib": str(free), "memavailable_kib": str(avail)},
        )
        return
    board.ok(k, n.name, value)


def _memory_monitor(board: Board, n: _Node) -> None:
    k = "ray-memory-monitor-on"
    if not n.unified:
        return board.na(k, n.name, "not unified memory")
    if not n.running:
        return board.na(k, n.name, n.why_not())
    v = n.env.get("RAY_memory_monitor_refresh_ms")
    if v is not None and v.strip() == "0":
        return board.ok(k, n.name, "0")
    board.fail(
        k,
        n.name,
        "warning",
        f"RAY_memory_monitor_refresh_ms is {v if v is not None else 'unset (Ray default 250)'}"
        f" in container {n.container} on {n.name}: on unified memory Ray counts the "
        f"GPU's memory as its workers' and kills them at 95 %",
        fix="Set RAY_memory_monitor_refresh_ms: '0' in container.env, then sparktui restart.",
        value=v if v is not None else "unset",
    )


# --- across nodes -----------------------------------------------------------------------


def _peer_result(n: _Node, ip: str) -> dict[str, Any] | None:
    assert n.x is not None
    peers = (n.x.net or {}).get("peers") or {}
    r = peers.get(ip)
    return r if isinstance(r, dict) else None


def _peers(board: Board, cfg: Config, nodes: list[_Node], ray: bool = True) -> None:
    k = "peer-unreachable"
    by_name = {n.name: n for n in nodes}
    down: set[str] = set()
    for n in nodes:
        dev = n.iface_of_ip()
        assert n.x is not None
        nd = n.x.netdev.get(dev) if dev else None
        if nd is not None and not nd.link_up:
            down.add(n.name)
            state = nd.operstate + ("" if nd.carrier is not False else ", no carrier")
            board.fail(
                k,
                n.name,
                "error",
                f"the interconnect {dev} ({n.cfg.ip}) on {n.name} has no link "
                f"({state}): no peer can reach {n.name}",
                fix=f"Check the cable and the link of {dev} on {n.name} "
                f"(ip link show {dev}; ethtool {dev}).",
                value=f"{dev} {nd.operstate}",
                captures={"interface": str(dev)},
            )
    unreachable_to: Counter[str] = Counter()
    for n in nodes:
        if n.x is None or n.x.net is None:
            board.na(k, n.name, "no ICMP probe on the host (python3 missing?)")
            continue
        if n.name in down:
            continue
        problems = []
        routes = []
        note = ""
        for m in cfg.nodes:
            if m.name == n.name or not m.ip:
                continue
            r = _peer_result(n, m.ip)
            if r is None:
                continue
            if m.name in down:
                continue
            icmp = r.get("icmp")
            if isinstance(icmp, str) and icmp.startswith("unavailable"):
                note = f"ICMP not checked ({icmp})"
            elif icmp is not True:
                unreachable_to[m.name] += 1
                problems.append(f"{m.name} at {m.ip} ({icmp})")
            dev = (r.get("route") or {}).get("dev")
            for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                spec = n.env.get(var)
                if dev and spec and not _interfaces_match(spec, [dev])[0]:
                    routes.append((m, dev, var, spec))
                    break
        if problems:
            board.fail(
                k,
                n.name,
                "error",
                f"{n.name} cannot reach " + "; ".join(problems) + " over ICMP",
                fix=f"Check the interconnect between {n.name} and its peers (addresses, "
                f"subnet, link, firewall): ping from {n.name}.",
                value="no reply",
            )
        for m, dev, var, spec in routes:
            board.fail(
                k,
                n.name,
                "error",
                f"from {n.name}, {m.name}'s ip {m.ip} is routed through {dev}, not "
                f"{var}={spec}: NCCL/Gloo bind one interface, the kernel sends through "
                f"another",
                fix=f"Give {n.name}'s interconnect an address on {m.ip}'s subnet (or "
                f"fix {var} in container.env), then sparktui restart.",
                value=f"via {dev}",
                captures={"peer": m.name, "interface": dev},
            )
        ic = n.ic
        gcs = ic.get("gcs") if ic else None
        head_down = cfg.head.name in down
        if ray and isinstance(gcs, dict) and not gcs.get("ok") and not head_down:
            board.fail(
                k,
                n.name,
                "error",
                f"container {n.container} on {n.name} cannot connect to the Ray GCS at "
                f"{gcs.get('addr')} ({gcs.get('error')})",
                fix=f"Start Ray on {cfg.head.name} (sparktui restart) and let port "
                f"{cfg.ray.port} through any firewall on the interconnect.",
                value="GCS closed",
            )
        board.ok(k, n.name, "ok", note=note)
    odd = sorted(down) or [
        m for m, c in unreachable_to.items() if c >= max(1, len(by_name) - 1) and len(by_name) > 2
    ]
    if odd:
        board.odd[k] = odd


def _mtu(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    k = "mtu-mismatch"
    mtus: dict[str, int] = {}
    devs: dict[str, str] = {}
    for n in nodes:
        dev = n.iface_of_ip()
        assert n.x is not None
        nd = n.x.netdev.get(dev) if dev else None
        if dev is None or nd is None or nd.mtu is None:
            board.na(k, n.name, f"no interface holds {n.cfg.ip or 'the node ip'}")
            continue
        mtus[n.name], devs[n.name] = nd.mtu, dev
        board.value(k, n.name, str(nd.mtu))
    odd = _odd_by_majority(mtus, cfg.head.name, prefer_low=True)
    board.odd[k] = odd
    by_name = {n.name: n for n in nodes}
    for name in odd:
        others = {m: v for m, v in mtus.items() if m not in odd}
        ref = max(others.values()) if others else None
        df_fail = []
        for other in others:
            r = _peer_result(by_name[other], by_name[name].cfg.ip or "")
            if r is not None and r.get("icmp") is True and r.get("df") is not True:
                df_fail.append(other)
        dfs = (
            (
                f"; a {others[df_fail[0]]}-byte ping with Don't Fragment from "
                f"{', '.join(df_fail)} gets no reply"
            )
            if df_fail
            else ""
        )
        board.fail(
            k,
            name,
            "error",
            f"{devs[name]} on {name} has MTU {mtus[name]}, "
            + ", ".join(f"{m} {v}" for m, v in others.items())
            + dfs
            + ": RoCE/NCCL traffic stalls (IBV_WC_RETRY_EXC_ERR) or hangs",
            fix=f"ip link set dev {devs[name]} mtu {ref} on {name}, and make it "
            f"persistent (netplan / NetworkManager), on every node the same.",
            value=str(mtus[name]),
            captures={"mtu": str(mtus[name]), "expected_mtu": str(ref)},
        )
    # Equal MTUs, but a DF echo of that size does not pass: the path (switch) carries less.
    for n in nodes:
        if n.name in odd or n.name not in mtus:
            continue
        bad = []
        for m in cfg.nodes:
            if m.name == n.name or not m.ip or m.name in odd:
                continue
            r = _peer_result(n, m.ip)
            df = r.get("df") if r is not None else None
            if (
                r is not None
                and r.get("icmp") is True
                and df not in (True, None)
                and not str(df).startswith("unavailable")
            ):
                bad.append(f"{m.name} ({df})")
        if bad:
            board.fail(
                k,
                n.name,
                "error",
                f"from {n.name}, an ICMP echo of the full MTU {mtus[n.name]} with Don't "
                f"Fragment does not reach "
                + ", ".join(bad)
                + ": something on the path carries a smaller MTU",
                fix="Set the same MTU on every NIC and switch port of the interconnect.",
                value=str(mtus[n.name]),
            )
        else:
            board.ok(k, n.name, str(mtus[n.name]))


def _versions(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    k = "version-mismatch"
    vers: dict[str, dict[str, str | None]] = {}
    for n in nodes:
        ic = n.ic
        v = ic.get("versions") if ic else None
        if not isinstance(v, dict):
            board.na(k, n.name, n.why_not())
            continue
        vers[n.name] = {c: v.get(c) for c in ("python", "ray", "vllm", "torch", "nccl")}
        board.value(k, n.name, " ".join(f"{c} {x}" for c, x in vers[n.name].items() if x))
    bad: dict[str, list[str]] = {}
    for comp in ("python", "ray", "vllm", "torch", "nccl"):
        vals = {name: v[comp] for name, v in vers.items()}
        for name in _odd_by_majority(vals, cfg.head.name):
            ref = Counter(x for m, x in vals.items() if m != name).most_common(1)[0][0]
            bad.setdefault(name, []).append(
                f"{comp} {vals[name] or 'none'} (others {ref or 'none'})"
            )
    board.odd[k] = sorted(bad)
    for name, what in bad.items():
        board.fail(
            k,
            name,
            "error",
            f"container on {name} has "
            + ", ".join(what)
            + ": Ray and vLLM need the same versions on every node",
            fix="Run the same image on every node and do not pip-install into running "
            "containers; then sparktui restart.",
            value="; ".join(what),
        )
    for name in vers:
        if name not in bad:
            board.ok(k, name)


def _carry(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(CARRY_PREFIXES)}


def differing_env(cfg: Config, envs: dict[str, dict[str, str]]) -> list[str]:
    """The NCCL_/UCX_/GLOO_ names whose values differ between nodes (for restart's
    ray_non_carry_over_env_vars.json)."""
    names: set[str] = set()
    carried = {n: _carry(e) for n, e in envs.items()}
    for k in {k for e in carried.values() for k in e}:
        if len({e.get(k) for e in carried.values()}) > 1:
            names.add(k)
    return sorted(names)


def _carry_over(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    k = "nccl-env-overwritten"
    head = next((n for n in nodes if n.name == cfg.head.name), None)
    if head is None or not head.running:
        for n in nodes:
            board.na(k, n.name, "the head's container is not running")
        return
    hic = head.ic or {}
    nco = hic.get("non_carry_over") or {}
    keep = set(nco.get("vars") or [])
    henv = _carry(head.env)
    board.ok(k, head.name, f"{len(henv)} copied" if henv else "none set")
    odd = []
    for n in nodes:
        if n is head:
            continue
        if not n.running:
            board.na(k, n.name, n.why_not())
            continue
        wenv = _carry(n.env)
        diffs = [
            (name, v, wenv.get(name))
            for name, v in sorted(henv.items())
            if name not in keep and wenv.get(name) != v
        ]
        if not diffs:
            board.ok(k, n.name, "same as head")
            continue
        odd.append(n.name)
        net = any(name in NET_VARS for name, _, _ in diffs)
        what = "; ".join(
            f"{name}: head {hv!r}, {n.name} {wv!r}"
            if wv is not None
            else f"{name}: head {hv!r}, {n.name} unset"
            for name, hv, wv in diffs
        )
        board.fail(
            k,
            n.name,
            "error" if net else "warning",
            f"vLLM's Ray executor copies the head's values over {n.name}'s own: {what}",
            fix=f"Add {', '.join(d[0] for d in diffs)} to {NON_CARRY_FILE} in "
            f"$VLLM_CONFIG_ROOT (default ~/.config/vllm/) in the head's container "
            f"(sparktui restart writes it when per-node values differ), or give "
            f"every node the same values.",
            value=", ".join(d[0] for d in diffs),
            captures={name: f"{hv} -> {wv}" for name, hv, wv in diffs},
        )
    board.odd[k] = odd


def _model(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    from sparktui.core.actions.doctor import local_model_path

    k = "model-incomplete"
    path = local_model_path(cfg.vllm.model)
    if not path:
        for n in nodes:
            board.na(k, n.name, "vllm.model is not a local path")
        return
    info: dict[str, dict[str, Any]] = {}
    for n in nodes:
        m = (n.ic or {}).get("model")
        if not isinstance(m, dict):
            board.na(k, n.name, n.why_not())
        elif not m.get("exists"):
            board.na(k, n.name, "model path missing (see model-path-missing)")
        else:
            info[n.name] = m
    names = sorted(
        {f for m in info.values() for f in (m.get("files") or {})}
        | {f for m in info.values() for f in (m.get("missing") or [])}
    )
    sizes: dict[str, dict[str, int | None]] = {
        f: {n: (m.get("files") or {}).get(f) for n, m in info.items()} for f in names
    }
    odd: set[str] = set()
    for name, m in info.items():
        problems = []
        files = m.get("files") or {}
        for f in names:
            if f not in files:
                problems.append(f"{f} missing")
                continue
            others = [v for n2, v in sizes[f].items() if n2 != name and v is not None]
            odd_nodes = _odd_by_majority(
                {n2: v for n2, v in sizes[f].items() if v is not None}, cfg.head.name
            )
            if name in odd_nodes and others:
                ref = Counter(others).most_common(1)[0][0]
                problems.append(f"{f} is {files[f]:,} bytes ({ref:,} elsewhere)")
        problems += [
            f"{f} unreadable as uid {(nodes_ic(nodes, name) or {}).get('uid')}"
            for f in m.get("unreadable") or []
        ]
        problems += [f"{f} (an unfinished download)" for f in (m.get("incomplete") or [])[:5]]
        if m.get("index") is False:
            problems.append(f"model.safetensors.index.json unreadable: {m.get('index_error')}")
        if not files and not m.get("missing"):
            problems.append("no *.safetensors files")
        if problems:
            odd.add(name)
            board.fail(
                k,
                name,
                "error",
                f"model {path} on {name}: "
                + "; ".join(problems[:6])
                + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""),
                fix=f"Copy the model to {path} on {name} again from a complete node "
                f"(rsync -a --checksum), readable by the container's user.",
                value=f"{len(problems)} problem(s)",
            )
        else:
            board.ok(k, name, f"{len(files)} file(s)")
    board.odd[k] = sorted(odd) if len(odd) < len(info) else []


def nodes_ic(nodes: list[_Node], name: str) -> dict[str, Any] | None:
    return next((n.ic for n in nodes if n.name == name), None)


def clock_offset(x: NodeExtras) -> tuple[float, float] | None:
    """(offset of the node's clock from this machine's, uncertainty), from the node's
    clock at the start and end of the probe and this machine's when it was sent and came
    back: the network part of the round trip is split evenly."""
    if None in (x.clock, x.clock_end, x.sent_at, x.received_at):
        return None
    assert x.clock is not None and x.clock_end is not None
    assert x.sent_at is not None and x.received_at is not None
    on_node = max(0.0, x.clock_end - x.clock)
    network = max(0.0, (x.received_at - x.sent_at) - on_node)
    return x.clock - (x.sent_at + network / 2), network / 2


def _clock(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    k = "clock-skew"
    offs: dict[str, tuple[float, float]] = {}
    for n in nodes:
        assert n.x is not None
        off = clock_offset(n.x)
        if off is None:
            board.na(k, n.name, "the node's date has no +%s.%N")
        else:
            offs[n.name] = off
    if len(offs) < 2:
        for name in offs:
            board.ok(k, name, f"{offs[name][0]:+.3f} s")
        return
    if len(offs) == 2 and cfg.head.name in offs:
        ref_name: str | None = cfg.head.name
        ref, ref_unc = offs[cfg.head.name]
    else:
        ref_name = None
        ref = statistics.median(o for o, _ in offs.values())
        ref_unc = 0.0
    odd = []
    for name, (o, unc) in offs.items():
        skew = o - ref
        value = f"{skew:+.3f} s"
        if name != ref_name and abs(skew) > CLOCK_SKEW_MAX + unc + ref_unc:
            odd.append(name)
            against = f"{ref_name}'s" if ref_name else "the others'"
            board.fail(
                k,
                name,
                "warning",
                f"{name}'s clock is {skew:+.1f} s off {against} (± {unc + ref_unc:.2f} s): "
                f"PyTorch/NCCL timeouts misfire and merged logs are out of order",
                fix=f"Sync the clocks (timedatectl set-ntp true; check "
                f"`timedatectl show -p NTPSynchronized` on {name}).",
                value=value,
                captures={"skew_s": f"{skew:.3f}"},
            )
        else:
            board.ok(k, name, value)
    board.odd[k] = odd


def _ports(board: Board, cfg: Config, nodes: list[_Node]) -> None:
    import ipaddress

    k = "port-exposed"
    named = {
        cfg.ray.port: "Ray GCS",
        cfg.ray.dashboard_port: "Ray dashboard",
        RAY_CLIENT_PORT: "Ray client",
        cfg.vllm.port: "vLLM API",
    }
    api_key = any(a == "--api-key" or a.startswith("--api-key=") for a in cfg.vllm.args)
    for n in nodes:
        assert n.x is not None
        mgmt = set()
        try:
            ipaddress.ip_address(n.cfg.host)
            mgmt.add(n.cfg.host)
        except ValueError:
            pass
        if n.st is not None:
            mgmt |= {ip for ip in n.st.ips if ip != n.cfg.ip}
        key = api_key or bool(n.env.get("VLLM_API_KEY"))
        exposed = []
        for lst in n.x.listeners:
            what = named.get(lst.port)
            if what is None or lst.loopback or lst.address == n.cfg.ip:
                continue
            if not (lst.wildcard or lst.address in mgmt):
                continue
            where = "every address" if lst.wildcard else f"the management address {lst.address}"
            shown = f"{lst.port} on {'*' if lst.wildcard else lst.address}"
            exposed.append(shown)
            if lst.port == cfg.ray.port:
                board.fail(
                    k,
                    n.name,
                    "info",
                    f"{n.name}: {what} port {lst.port} listens on {where} (Ray's GCS has "
                    f"no bind address of its own); Ray has no authentication",
                    fix=f"Firewall port {lst.port} on {n.name} to the interconnect subnet "
                    f"(e.g. ufw allow from <interconnect subnet> to any port "
                    f"{lst.port}; ufw deny {lst.port}).",
                    captures={"port": str(lst.port), "address": lst.address},
                )
                continue
            if lst.port == cfg.vllm.port:
                sev: Severity = "info" if key else "warning"
                auth = "" if key else " without --api-key: anyone who can reach it can use it"
                fix = (
                    f"Serve on the interconnect or loopback (vllm serve --host {n.cfg.ip or '127.0.0.1'})"
                    + ("" if key else " and set --api-key")
                    + ", or firewall the port."
                )
            else:
                sev = "warning"
                auth = ": Ray has no authentication (jobs run code on every node, CVE-2023-48022)"
                fix = (
                    f"Bind it to the interconnect or loopback (ray start "
                    f"--dashboard-host 127.0.0.1 / --ray-client-server-port off), or "
                    f"firewall port {lst.port} on {n.name}."
                )
            board.fail(
                k,
                n.name,
                sev,
                f"{n.name}: {what} port {lst.port} listens on {where}{auth}",
                fix=fix,
                value=shown,
                captures={"port": str(lst.port), "address": lst.address},
            )
        board.ok(k, n.name, ", ".join(exposed) or "none exposed")


MARKS = {"ok": "✓", "fail": "✗", "n/a": "–"}


def render_matrix(matrix: dict[str, Any], ascii_only: bool = False) -> str:
    """The matrix as a text table: a row per check, a column per node, the odd one out."""
    marks = {"ok": "ok", "fail": "FAIL", "n/a": "-"} if ascii_only else MARKS
    nodes = list(matrix.get("nodes") or [])
    rows = matrix.get("rows") or []
    w0 = max([len("check")] + [len(r["check"]) for r in rows])
    widths = [max(len(n), 4) for n in nodes]
    lines = [
        "  ".join(
            [
                "check".ljust(w0),
                *(n.ljust(w) for n, w in zip(nodes, widths, strict=True)),
                "odd one out",
            ]
        ).rstrip()
    ]
    for r in rows:
        cells = [
            marks.get(r["cells"][n]["status"], "?").ljust(w)
            for n, w in zip(nodes, widths, strict=True)
        ]
        odd = ", ".join(r.get("odd_one_out") or [])
        lines.append("  ".join([r["check"].ljust(w0), *cells, odd]).rstrip())
    return "\n".join(lines)
