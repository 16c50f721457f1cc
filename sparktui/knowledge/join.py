"""Live join: rewrite log findings' fixes with what the cluster snapshot knows.

A log line names IPs (`node:<ip>` in a placement group, `ip=` of a Ray worker, `Worker IP
address:`); the snapshot says which configured node owns each IP, which IP Ray registered
for it and what its container environment holds. The fix then names the node, the variable
and both IPs instead of giving generic advice.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from sparktui.core.model import ClusterSnapshot, Finding, NodeState

IP_KEYS = ("ip", "worker_ip", "node_ip", "local_ip")
GPU_BUNDLE_RE = re.compile(r"'GPU': (\d+(?:\.\d+)?)")
PG_CATEGORIES = ("placement_group_ip_mismatch", "not_enough_gpus")


def _is_ip(value: str | None) -> bool:
    if not value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _ray_ips(snap: ClusterSnapshot) -> list[tuple[str, str | None]]:
    """(IP Ray registered, configured node name or None) for every alive Ray node."""
    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for rn in snap.ray_nodes:
        if rn.alive and rn.ip not in seen:
            seen.add(rn.ip)
            node = snap.node_by_ip(rn.ip)
            out.append((rn.ip, node.name if node else None))
    if not out:
        for n in snap.nodes:
            if n.ray.registered_ip and n.ray.alive is not False and n.ray.registered_ip not in seen:
                seen.add(n.ray.registered_ip)
                out.append((n.ray.registered_ip, n.name))
    return out


def _named(ips: list[tuple[str, str | None]]) -> str:
    parts = [f"{ip} ({name})" if name else ip for ip, name in ips]
    if len(parts) <= 1:
        return "".join(parts) or "no alive node"
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _owner(snap: ClusterSnapshot, f: Finding) -> tuple[str | None, NodeState | None]:
    for k in IP_KEYS:
        ip = f.captures.get(k)
        if _is_ip(ip):
            return ip, snap.node_by_ip(ip)  # type: ignore[arg-type]
    return None, None


def _env_note(node: NodeState, var: str) -> str:
    if not node.env:
        return ""
    value = node.env.get(var)
    if value is None:
        return f" {var} is not set in {node.name}'s container environment."
    return f" {node.name}'s container environment has {var}={value}."


def _pg_ip_mismatch(f: Finding, snap: ClusterSnapshot) -> tuple[str, str | None] | None:
    ip = f.captures.get("ip")
    if not _is_ip(ip):
        return None
    assert ip is not None
    ray = _ray_ips(snap)
    owner = snap.node_by_ip(ip)
    if any(r == ip for r, _ in ray):
        name = next(n for r, n in ray if r == ip)
        return (
            f"Ray now has a node registered as {ip}{f' ({name})' if name else ''}: the IPs "
            "agree at the moment. If vLLM still waits, compare the GPUs in `ray status` "
            "with --tensor-parallel-size x --pipeline-parallel-size.",
            name,
        )
    head = f"vLLM asked for node:{ip}, Ray knows {_named(ray)}."
    if owner is None:
        return (
            f"{head} No configured node owns {ip}: set VLLM_HOST_IP on the node running "
            "`vllm serve` to the IP Ray registered for it.",
            None,
        )
    registered = owner.ray.registered_ip or next((r for r, n in ray if n == owner.name), None)
    env = owner.env.get("VLLM_HOST_IP") if owner.env else None
    if env == ip:
        why = f" {owner.name}'s container environment has VLLM_HOST_IP={ip}."
    elif owner.env and env is None:
        why = f" VLLM_HOST_IP is not set on {owner.name}: vLLM used its default-route address."
    else:
        why = ""
    pinned = [f"{n.name}: {n.configured_ip}" for n in snap.nodes if n.configured_ip]
    pin_text = f" ({', '.join(pinned)})" if pinned else ""
    if registered:
        fix = (
            f"{head}{why} Set VLLM_HOST_IP={registered} on {owner.name} (the IP Ray uses), "
            f"or restart Ray pinned to the interconnect IPs{pin_text} with "
            "--node-ip-address on every node."
        )
    else:
        fix = (
            f"{head}{why} {owner.name} is not registered in Ray at all: restart Ray on "
            f"{owner.name} pinned to {owner.configured_ip or ip} (--node-ip-address) and "
            f"set VLLM_HOST_IP to the same IP."
        )
    return fix, owner.name


def _dead_worker(f: Finding, snap: ClusterSnapshot) -> tuple[str, str | None] | None:
    ip, node = _owner(snap, f)
    if ip is None:
        # The line names no IP (`RayWorkerProc rank=[1] died unexpectedly`): if exactly one
        # node is dead in Ray, that is where the worker was.
        dead = [n for n in snap.nodes if n.ray.alive is False]
        if len(dead) != 1:
            return None
        d = dead[0]
        reason = f": {d.ray.death_reason}" if d.ray.death_reason else ""
        return (
            f"Ray reports {d.name} ({d.ray.registered_ip or d.configured_ip}) as dead{reason}; "
            f"the worker on it went down with it. Check the container on {d.name} "
            f"(docker logs) and `dmesg` there, then sparktui restart.",
            d.name,
        )
    if node is None:
        return (
            f"The failing worker ran on {ip}, which is not a configured node: read its log "
            "there (/tmp/ray/session_latest/logs/worker-*.err).",
            None,
        )
    state = ""
    if node.ray.alive is False:
        state = f" Ray reports {node.name} as dead{': ' + node.ray.death_reason if node.ray.death_reason else ''}."
    pid = f.captures.get("worker_pid")
    which = f"worker-*-{pid}.err" if pid else "worker-*.err"
    return (
        f"The failing worker ran on {node.name} ({ip}).{state} Read its own log on "
        f"{node.name}: /tmp/ray/session_latest/logs/{which} inside the node's container; "
        f"check `dmesg` on {node.name} for the OOM killer.",
        node.name,
    )


def _iface_vars(f: Finding, snap: ClusterSnapshot, var: str) -> tuple[str, str | None] | None:
    ip, node = _owner(snap, f)
    if node is None:
        return None
    missing = [n.name for n in snap.nodes if n.env and var not in n.env]
    note = _env_note(node, var)
    extra = f" Not set on: {', '.join(missing)}." if missing else ""
    return (
        f"The failing rank ran on {node.name} ({ip}).{note}{extra} Set {var} to "
        f"{node.name}'s interconnect interface in its container environment before "
        "`ray start`.",
        node.name,
    )


def _ray_oom(f: Finding, snap: ClusterSnapshot) -> tuple[str, str | None] | None:
    ip, node = _owner(snap, f)
    lacking = [
        n.name for n in snap.nodes if n.env and n.env.get("RAY_memory_monitor_refresh_ms") != "0"
    ]
    if node is None and not lacking:
        return None
    where = f"Ray killed a worker on {node.name} ({ip}). " if node else ""
    if lacking:
        return (
            f"{where}RAY_memory_monitor_refresh_ms=0 is missing on: {', '.join(lacking)}; "
            "set it in each node's container environment and restart Ray.",
            node.name if node else None,
        )
    return (
        f"{where}Lower --gpu-memory-utilization on {node.name if node else 'that node'}.",
        node.name if node else None,
    )


def _located(f: Finding, snap: ClusterSnapshot) -> tuple[str, str | None] | None:
    ip, node = _owner(snap, f)
    if node is None:
        return None
    return (f"This concerns {node.name} ({ip}).", node.name)


def _ray_gpus(snap: ClusterSnapshot) -> tuple[float, list[str]] | None:
    """GPUs of the alive Ray nodes, and "name: N GPU" per configured node; None if unknown."""
    if snap.ray_nodes:
        alive = [rn for rn in snap.ray_nodes if rn.alive]
        total = sum(rn.gpus for rn in alive)
        parts = []
        for rn in alive:
            node = snap.node_by_ip(rn.ip)
            parts.append(f"{node.name if node else rn.ip}: {rn.gpus:g}")
        missing = [
            n.name for n in snap.nodes if not any(snap.node_by_ip(rn.ip) is n for rn in alive)
        ]
        parts += [f"{name}: not in Ray" for name in missing]
        return total, parts
    known = [n for n in snap.nodes if n.ray.gpus is not None]
    if not known:
        return None
    return (
        sum(n.ray.gpus or 0 for n in known if n.ray.alive is not False),
        [f"{n.name}: {n.ray.gpus:g}" for n in known],
    )


def _wanted_gpus(f: Finding, want: int | None) -> float | None:
    """GPUs the placement group asks for: its bundles in the log line, else TP x PP."""
    bundles = GPU_BUNDLE_RE.findall(f.text or "")
    if bundles:
        return sum(float(b) for b in bundles)
    return float(want) if want else None


def _pg_wait(f: Finding, snap: ClusterSnapshot, want: int | None) -> Finding | None:
    """Live state decides a placement-group wait: IP mismatch or too few GPUs in Ray."""
    ip = f.captures.get("ip")
    ray_ips = [r for r, _ in _ray_ips(snap)]
    if ip and ray_ips and ip not in ray_ips:
        return (
            None
            if f.category == "placement_group_ip_mismatch"
            else dataclasses.replace(
                f,
                category="placement_group_ip_mismatch",
                title="Ray placement group can never be placed (node IP mismatch)",
            )
        )
    gpus = _ray_gpus(snap)
    needed = _wanted_gpus(f, want)
    if gpus is None or needed is None or gpus[0] >= needed:
        return None
    total, parts = gpus
    live = (
        f"The placement group needs {needed:g} GPU(s); Ray has {total:g} "
        f"({', '.join(parts)}). Start Ray on every node (sparktui restart) and check that "
        "each node's GPUs are visible inside its container (--gpus all, nvidia runtime), "
        "or lower --tensor-parallel-size x --pipeline-parallel-size."
    )
    fix = f"On this cluster: {live}\n{f.fix}" if f.fix else f"On this cluster: {live}"
    return dataclasses.replace(
        f,
        category="not_enough_gpus",
        fix=fix,
        title="Ray has fewer GPUs than vLLM's placement group needs",
        message=f"Placement group needs {needed:g} GPU(s), Ray has {total:g}",
    )


_BY_CATEGORY = {
    "placement_group_ip_mismatch": _pg_ip_mismatch,
    "ray_worker_died_segfault": _dead_worker,
    "gloo_error": lambda f, s: _iface_vars(f, s, "GLOO_SOCKET_IFNAME"),
    "nccl_error": lambda f, s: _iface_vars(f, s, "NCCL_SOCKET_IFNAME"),
    "dgx_spark_gb10": _ray_oom,
}


def join_one(f: Finding, snap: ClusterSnapshot, want_gpus: int | None = None) -> Finding:
    """`f` with `node` set and a first fix step written from the snapshot (when it can).

    A placement-group wait is re-decided from live state: a `node:<ip>` Ray does not know is
    the IP mismatch; Ray holding fewer GPUs than the group needs (its bundles, else
    `want_gpus` = TP x PP) is not_enough_gpus, whatever the log alone suggested.
    """
    if f.category in PG_CATEGORIES:
        decided = _pg_wait(f, snap, want_gpus)
        if decided is not None:
            if decided.category == "not_enough_gpus":
                return decided
            f = decided
    handler = _BY_CATEGORY.get(f.category or "")
    result = handler(f, snap) if handler else None
    if result is None and f.id != "pg.no_node_type":
        result = _located(f, snap)
    if result is None:
        return f
    live, node = result
    fix = f"On this cluster: {live}\n{f.fix}" if f.fix else f"On this cluster: {live}"
    return dataclasses.replace(f, fix=fix, node=node or f.node)


def join(
    findings: list[Finding], snapshot: ClusterSnapshot | None, want_gpus: int | None = None
) -> list[Finding]:
    """Every log finding joined with the snapshot (unchanged without one).

    `want_gpus`: TP x PP of the configured serve, for placement-group waits that do not
    list their bundles.
    """
    if snapshot is None:
        return list(findings)
    return [join_one(f, snapshot, want_gpus) if f.source == "log" else f for f in findings]
