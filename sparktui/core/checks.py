"""Live checks: compare node state across the cluster and say what is wrong, as Findings."""

from __future__ import annotations

from sparktui.config import Config
from sparktui.core.model import (
    ClusterSnapshot,
    Finding,
    NodeState,
    RayNode,
    ip_mismatch,
    sort_findings,
)

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


def _iface_of(node: NodeState, ip: str | None) -> str:
    for iface in node.interfaces:
        if ip and ip in iface.ipv4:
            return iface.name
    return ""


def _ip_label(node: NodeState, ip: str | None) -> str:
    name = _iface_of(node, ip)
    return f"{ip} ({name})" if name else str(ip)


def ray_entry_for(node: NodeState, ray_nodes: list[RayNode]) -> RayNode | None:
    """The Ray table row that belongs to this node: alive rows first, then dead ones."""
    own = {ip for ip in (node.configured_ip, *node.ips) if ip}
    matches = [r for r in ray_nodes if r.ip in own]
    if not matches:
        return None
    alive = [r for r in matches if r.alive]
    if alive:
        exact = [r for r in alive if r.ip == node.configured_ip]
        return (exact or alive)[0]
    return matches[-1]


def _interfaces_match(spec: str, names: list[str]) -> tuple[bool, list[str]]:
    """NCCL-style interface list: comma-separated prefixes; a leading `^` makes the whole
    list exclusions, a leading `=` makes it exact names. True when some interface fits."""
    spec = spec.strip()
    if spec.startswith("^"):  # only exclusions: anything else will do
        return True, []
    exact = spec.startswith("=")
    wanted = [s.strip() for s in spec.lstrip("=").split(",") if s.strip()]
    if not wanted:
        return True, []
    missing = [w for w in wanted if not any((n == w) if exact else n.startswith(w) for n in names)]
    return len(missing) < len(wanted), missing


def check(snapshot: ClusterSnapshot, cfg: Config) -> list[Finding]:
    """Every live finding for a snapshot, errors first."""
    out: list[Finding] = []
    native_mode = snapshot.backend == "native"  # no Ray: no Ray checks (core/native.py's)
    ray_known = not native_mode and snapshot.ray_error is None and snapshot.ray_source is not None
    for node in snapshot.nodes:
        ncfg = cfg.node(node.name)
        if not node.reachable:
            out.append(
                Finding(
                    "node-unreachable",
                    "error",
                    node.name,
                    f"{node.name} is unreachable: {node.error or 'no answer'}",
                    fix=f"Check that {node.host} is up and sshd runs there "
                    f"(try: ssh {node.host} true).",
                )
            )
            continue
        cname = ncfg.container.name if ncfg else cfg.container.name
        container = node.container(cname)
        if cfg.path is not None or container is not None:
            if container is None:
                out.append(
                    Finding(
                        "container-not-running",
                        "error",
                        node.name,
                        f"{node.name}: no container named '{cname}'",
                        fix="Start the cluster: sparktui restart (or key r in the console).",
                    )
                )
            elif not container.running:
                out.append(
                    Finding(
                        "container-not-running",
                        "error",
                        node.name,
                        f"{node.name}: container '{cname}' is {container.state} ({container.status})",
                        fix=f"See why: docker logs {cname} on {node.name}; then sparktui restart.",
                    )
                )
        out.extend(_ifname_findings(node, cfg))
        if not ray_known:
            continue
        entry = ray_entry_for(node, snapshot.ray_nodes)
        if entry is None:
            known = ", ".join(r.ip for r in snapshot.ray_nodes if r.alive) or "none"
            out.append(
                Finding(
                    "node-not-in-ray",
                    "error",
                    node.name,
                    f"{node.name} is not in the Ray cluster (Ray's alive nodes: {known})",
                    fix=f"Start the Ray worker on {node.name} with --address "
                    f"{cfg.head.ip or cfg.head.host}:{cfg.ray.port} --node-ip-address "
                    f"{node.configured_ip or '<its interconnect ip>'} (sparktui restart does it).",
                )
            )
            continue
        if not entry.alive:
            reason = f": {entry.death_reason}" if entry.death_reason else ""
            out.append(
                Finding(
                    "ray-node-dead",
                    "error",
                    node.name,
                    f"Ray marks {node.name} ({entry.ip}) DEAD{reason}",
                    fix=f"Its raylet is gone. Check the container on {node.name} "
                    f"(docker logs {cname}), then sparktui restart.",
                )
            )
        ray_differs, host_differs = ip_mismatch(
            node.configured_ip, entry.ip, node.env.get("VLLM_HOST_IP")
        )
        if ray_differs:
            out.append(
                Finding(
                    "ray-ip-mismatch",
                    "error",
                    node.name,
                    f"Ray registered {node.name} under {_ip_label(node, entry.ip)}, not its "
                    f"configured {_ip_label(node, node.configured_ip)}",
                    fix=f"Restart Ray on {node.name} with --node-ip-address {node.configured_ip} "
                    f"(sparktui restart pins every node to its configured ip).",
                    captures={"registered_ip": entry.ip, "configured_ip": node.configured_ip or ""},
                )
            )
        host_ip = node.env.get("VLLM_HOST_IP")
        if host_ip and entry.alive and host_differs:
            owner = snapshot.node_by_ip(host_ip)
            where = f" (an address of {owner.name})" if owner and owner.name != node.name else ""
            out.append(
                Finding(
                    "vllm-host-ip-mismatch",
                    "error",
                    node.name,
                    f"VLLM_HOST_IP on {node.name} is {host_ip}{where}, but Ray knows {node.name} "
                    f"as {entry.ip}: vLLM's placement group will wait for node:{host_ip} forever",
                    fix=f"Set VLLM_HOST_IP={entry.ip} in the container on {node.name}, or restart "
                    f"Ray on {node.name} with --node-ip-address {host_ip} so both agree "
                    f"(sparktui restart sets both to the configured ip).",
                    captures={"vllm_host_ip": host_ip, "registered_ip": entry.ip},
                )
            )
    if ray_known:
        out.extend(_cluster_ray_findings(snapshot, cfg))
    from sparktui.core import native

    if native_mode:
        out.extend(native.check(snapshot, cfg))
    out.extend(native.backend_findings(snapshot, cfg))
    return sort_findings(out)


def _ifname_findings(node: NodeState, cfg: Config) -> list[Finding]:
    ncfg = cfg.node(node.name)
    configured = ncfg.container.env if ncfg else cfg.container.env
    names = [i.name for i in node.interfaces]
    if not names:
        return []
    out = []
    for var in IFNAME_VARS:
        spec = node.env.get(var) or configured.get(var)
        if not spec:
            continue
        ok, missing = _interfaces_match(spec, names)
        if not ok:
            out.append(
                Finding(
                    "interface-missing",
                    "error",
                    node.name,
                    f"{var}={spec} on {node.name}, but it has no interface {', '.join(missing)} "
                    f"(it has: {', '.join(n for n in names if n != 'lo')})",
                    fix=f"Set {var} to the interconnect interface of {node.name} "
                    f"(e.g. {_iface_of(node, node.configured_ip) or 'see ip addr'}).",
                )
            )
    return out


def _cluster_ray_findings(snapshot: ClusterSnapshot, cfg: Config) -> list[Finding]:
    out = []
    alive = [r for r in snapshot.ray_nodes if r.alive]
    need = cfg.vllm.parallel_size()
    have = sum(r.gpus for r in alive)
    if need > 1 and have < need:
        out.append(
            Finding(
                "gpu-shortfall",
                "error",
                None,
                f"vLLM needs {need} GPUs (TP x PP), Ray has {have:g} on {len(alive)} alive node(s)",
                fix="Bring every node into Ray (sparktui restart), or lower "
                "--tensor-parallel-size / --pipeline-parallel-size in vllm.args.",
            )
        )
    for r in alive:
        if not any(ray_entry_for(n, [r]) for n in snapshot.nodes):
            out.append(
                Finding(
                    "ray-unknown-node",
                    "warning",
                    None,
                    f"Ray has a node at {r.ip} that matches no configured node",
                    fix="Add it to nodes: in the config, or stop Ray on that machine.",
                )
            )
    return out
