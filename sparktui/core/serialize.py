"""The documented JSON shape of a snapshot (`sparktui status --json`)."""

from __future__ import annotations

from typing import Any

from sparktui.core.model import ClusterSnapshot, NodeState
from sparktui.core.secrets import mask_secrets


def node_to_dict(n: NodeState) -> dict[str, Any]:
    return {
        "name": n.name,
        "host": n.host,
        "role": n.role,
        "reachable": n.reachable,
        "error": n.error,
        "configured_ip": n.configured_ip,
        "ips": [ip for ip in n.ips if not ip.startswith("127.")],
        "interfaces": [{"name": i.name, "state": i.state, "ipv4": i.ipv4}
                       for i in n.interfaces if i.name != "lo"],
        "ray": {"registered_ip": n.ray.registered_ip, "alive": n.ray.alive,
                "gpus": n.ray.gpus, "node_id": n.ray.node_id,
                "death_reason": n.ray.death_reason or None},
        "containers": [{"name": c.name, "image": c.image, "state": c.state,
                        "status": c.status} for c in n.containers],
        "gpus": [{"index": g.index, "name": g.name, "memory_used_mib": g.memory_used_mib,
                  "memory_total_mib": g.memory_total_mib, "unified": g.unified,
                  "utilization_pct": g.utilization_pct} for g in n.gpus],
        "gpu_processes": [{"pid": p.pid, "process_name": p.process_name,
                           "used_memory_mib": p.used_memory_mib} for p in n.gpu_processes],
        "memory": {"total_mib": n.mem_total_mib, "available_mib": n.mem_available_mib},
        "env": mask_secrets(n.env),
        "probe_seconds": None if n.probe_seconds is None else round(n.probe_seconds, 3),
    }


def snapshot_to_dict(s: ClusterSnapshot) -> dict[str, Any]:
    v = s.vllm
    return {
        "cluster": s.cluster,
        "nodes": [node_to_dict(n) for n in s.nodes],
        "ray": {"source": s.ray_source, "error": s.ray_error,
                "nodes": [{"node_id": r.node_id, "ip": r.ip, "alive": r.alive,
                           "is_head": r.is_head, "gpus": r.gpus} for r in s.ray_nodes]},
        "vllm": {"healthy": v.healthy, "running": v.running, "waiting": v.waiting,
                 "kv_cache_pct": v.kv_cache_pct, "tokens_per_s": v.tokens_per_s},
        "findings": [{"id": f.id, "severity": f.severity, "node": f.node,
                      "message": f.message, "fix": f.fix} for f in s.findings],
    }
