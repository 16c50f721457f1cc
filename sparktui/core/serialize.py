"""The documented JSON shape of a snapshot (`sparktui status --json`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sparktui.core import native
from sparktui.core.model import ClusterSnapshot, NodeState, VllmStatus
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
        "interfaces": [
            {"name": i.name, "state": i.state, "ipv4": i.ipv4}
            for i in n.interfaces
            if i.name != "lo"
        ],
        "ray": {
            "registered_ip": n.ray.registered_ip,
            "alive": n.ray.alive,
            "gpus": n.ray.gpus,
            "node_id": n.ray.node_id,
            "death_reason": n.ray.death_reason or None,
        },
        "containers": [
            {"name": c.name, "image": c.image, "state": c.state, "status": c.status}
            for c in n.containers
        ],
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib,
                "unified": g.unified,
                "utilization_pct": g.utilization_pct,
                "power_w": g.power_w,
                "temperature_c": g.temperature_c,
                "sm_clock_mhz": g.sm_clock_mhz,
            }
            for g in n.gpus
        ],
        "gpu_processes": [
            {"pid": p.pid, "process_name": p.process_name, "used_memory_mib": p.used_memory_mib}
            for p in n.gpu_processes
        ],
        "memory": {"total_mib": n.mem_total_mib, "available_mib": n.mem_available_mib},
        "env": mask_secrets(n.env),
        "vllm_process": native.process_to_dict(n),
        "probe_seconds": None if n.probe_seconds is None else round(n.probe_seconds, 3),
    }


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def vllm_lifecycle_dict(v: VllmStatus) -> dict[str, Any]:
    """The start-up phase and the last minute's latency of `status --json`'s `vllm`."""
    return {
        "phase": v.phase,
        "phase_progress": _r(v.phase_progress),
        "phase_started_at": _iso(v.phase_started_at),
        "phase_eta_s": _r(v.phase_eta_s, 1),
        "phase_ranks": v.phase_ranks,
        "ttft_p50_s": _r(v.ttft_p50_s),
        "ttft_p95_s": _r(v.ttft_p95_s),
        "itl_p50_s": _r(v.itl_p50_s),
        "itl_p95_s": _r(v.itl_p95_s),
        "ttft_mean_s": _r(v.ttft_mean_s),
        "itl_mean_s": _r(v.itl_mean_s),
        "prompt_tokens_per_s": _r(v.prompt_tokens_per_s, 2),
    }


def pending_to_dict(s: ClusterSnapshot) -> dict[str, Any]:
    """`ray.pending`: the placement groups Ray has not placed and `ray status`'s Pending
    Demands (both empty when Ray was not read)."""
    return {
        "error": s.ray_pending_error,
        "placement_groups": [
            {
                "id": p.pg_id,
                "name": p.name or None,
                "state": p.state,
                "scheduling_state": p.scheduling_state or None,
                "strategy": p.strategy or None,
                "detached": p.detached,
                "age_s": _r(p.age_s, 1),
                "bundles": p.bundles,
            }
            for p in s.pending_pgs
        ],
        "demands": [
            {
                "kind": d.kind,
                "count": d.count,
                "strategy": d.strategy or None,
                "bundles": [{"resources": b, "count": n} for b, n in d.shapes],
                "text": d.text,
            }
            for d in s.ray_demands
        ],
    }


def snapshot_to_dict(s: ClusterSnapshot) -> dict[str, Any]:
    v = s.vllm
    return {
        "cluster": s.cluster,
        "backend": {"name": s.backend, "note": s.backend_note or None},
        "nodes": [node_to_dict(n) for n in s.nodes],
        "ray": {
            "source": s.ray_source,
            "via": s.ray_via,
            "error": s.ray_error,
            "nodes": [
                {
                    "node_id": r.node_id,
                    "ip": r.ip,
                    "alive": r.alive,
                    "is_head": r.is_head,
                    "gpus": r.gpus,
                }
                for r in s.ray_nodes
            ],
            "pending": pending_to_dict(s),
        },
        "vllm": {
            "healthy": v.healthy,
            "running": v.running,
            "waiting": v.waiting,
            "kv_cache_pct": v.kv_cache_pct,
            "tokens_per_s": v.tokens_per_s,
            **vllm_lifecycle_dict(v),
        },
        "findings": [
            {"id": f.id, "severity": f.severity, "node": f.node, "message": f.message, "fix": f.fix}
            for f in s.findings
        ],
    }
