"""Live checks: compare node state across the cluster and say what is wrong, as Findings."""

from __future__ import annotations

from sparktui.config import Config
from sparktui.core.model import (
    ClusterSnapshot,
    Finding,
    NodeState,
    PlacementGroup,
    RayNode,
    ip_mismatch,
    node_resources,
    sort_findings,
)

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
PG_PENDING_WARN_S = 60.0  # a placement group waiting longer than this is a warning


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
        out.extend(pending_findings(snapshot, cfg))
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


# --- what Ray cannot place: its pending placement groups and demands ---------------------


def _shapes(pg: PlacementGroup) -> str:
    return ", ".join(str({k: round(v, 4) for k, v in b.items()}) for b in pg.bundles)


def _known_ips(snapshot: ClusterSnapshot, alive: list[RayNode]) -> str:
    """Ray's alive node IPs, each with the configured node that owns it."""
    out = []
    for r in alive:
        owner = next((n.name for n in snapshot.nodes if ray_entry_for(n, [r])), None)
        out.append(f"{r.ip} ({owner})" if owner else r.ip)
    return ", ".join(out) or "none"


def _node_missing(
    snapshot: ClusterSnapshot, cfg: Config, ip: str, what: str, alive: list[RayNode]
) -> Finding:
    owner = snapshot.node_by_ip(ip)
    entry = ray_entry_for(owner, alive) if owner else None
    head = snapshot.node(cfg.head.name)
    head_entry = ray_entry_for(head, alive) if head else None
    if owner and entry:
        where = f"{ip} is an address of {owner.name}, which Ray knows as {entry.ip}"
        fix = (
            f"Make the two agree on {owner.name}: set VLLM_HOST_IP={entry.ip} in its container, "
            f"or restart Ray there with --node-ip-address {ip} (sparktui restart sets both to "
            f"the configured ip)."
        )
    elif owner:
        where = f"{ip} is an address of {owner.name}, which is not in Ray"
        fix = (
            f"Start Ray on {owner.name} with --node-ip-address {ip} and VLLM_HOST_IP={ip} "
            f"(sparktui restart does both)."
        )
    else:
        where = f"{ip} belongs to no configured node"
        known = head_entry.ip if head_entry else "the IP Ray knows it by"
        fix = (
            f"Set VLLM_HOST_IP on the node that runs the vLLM engine ({cfg.head.name}) to "
            f"{known}, the IP Ray knows it by ({ip} is on none of the configured nodes)."
        )
    return Finding(
        "pg-node-missing",
        "error",
        owner.name if owner else None,
        f"{what} asks node:{ip}, which no alive Ray node has ({where}; Ray's nodes: "
        f"{_known_ips(snapshot, alive)}): it will wait forever",
        fix=fix + " This is vLLM's placement-group hang (VLLM_HOST_IP vs Ray's node IP).",
        captures={"ip": ip},
    )


def pending_findings(snapshot: ClusterSnapshot, cfg: Config) -> list[Finding]:
    """Findings on what Ray cannot place: a pending placement group (or demand) pinned to a
    `node:<ip>` no alive node has (`pg-node-missing`), one asking more GPUs than the alive
    nodes have (`pg-not-enough-gpus`), else one waiting more than PG_PENDING_WARN_S
    (`pg-pending`). Created groups are no finding."""
    out: list[Finding] = []
    alive = [r for r in snapshot.ray_nodes if r.alive]
    ips = {r.ip for r in alive}
    have = sum(r.gpus for r in alive)
    per_node = max((r.gpus for r in alive), default=0.0)
    reported: set[str] = set()
    for pg in snapshot.pending_pgs:
        found = False
        for ip in dict.fromkeys(x for b in pg.bundles for x in node_resources(b)):
            if ip not in ips:
                out.append(_node_missing(snapshot, cfg, ip, f"Placement group {pg.label}", alive))
                reported.add(ip)
                found = True
        need = pg.gpus()
        biggest = max((float(b.get("GPU", 0.0)) for b in pg.bundles), default=0.0)
        one_node = pg.strategy == "STRICT_PACK"
        if need > have or biggest > per_node or (one_node and need > per_node):
            limit = (
                f"{per_node:g} on the biggest node"
                if biggest > per_node or one_node
                else f"{have:g} on {len(alive)} alive node(s)"
            )
            out.append(
                Finding(
                    "pg-not-enough-gpus",
                    "error",
                    None,
                    f"Placement group {pg.label} asks {need:g} GPUs "
                    f"({len(pg.bundles)} bundle(s), largest {biggest:g}"
                    f"{', ' + pg.strategy if pg.strategy else ''}), Ray has {limit}: "
                    "it cannot be placed",
                    fix="Bring every node into Ray (sparktui restart), or lower "
                    "--tensor-parallel-size x --pipeline-parallel-size to the GPUs Ray has.",
                )
            )
            found = True
        if not found and (pg.age_s or 0.0) > PG_PENDING_WARN_S:
            state = pg.scheduling_state or pg.state
            out.append(
                Finding(
                    "pg-pending",
                    "warning",
                    None,
                    f"Placement group {pg.label} has waited {pg.age_s:.0f}s ({state}) for "
                    f"bundles {_shapes(pg)}",
                    fix="See what holds the resources: ray status and ray list placement-groups "
                    "in the head container; a stale detached group needs "
                    "ray.util.remove_placement_group.",
                )
            )
    for d in snapshot.ray_demands:
        for shape, _ in d.shapes:
            for ip in node_resources(shape):
                if ip not in ips and ip not in reported:
                    what = (
                        "A pending placement group"
                        if d.kind == "placement_group"
                        else ("A pending task/actor")
                    )
                    out.append(_node_missing(snapshot, cfg, ip, what, alive))
                    reported.add(ip)
    return out
