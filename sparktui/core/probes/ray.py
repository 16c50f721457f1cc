"""Ray's node table -> list[RayNode], from any of the three sources of DOMAIN.md §1.6-1.8:
`ray.nodes()` JSON (what RAY_NODES_SNIPPET prints), the dashboard's `/api/v0/nodes`
envelope, and `ray list nodes --format json`. Dead rows are kept until `dedupe_by_ip`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sparktui.core.model import RayNode, RayView
from sparktui.remote import script

NODES_SENTINEL = "@@NODES@@"
ERROR_SENTINEL = "@@RAY_ERROR@@"
HEAD_RESOURCE = "node:__internal_head__"

# Run inside the head's Ray container (`python3 -c "$RAY_NODES_SNIPPET"`): prints one
# sentinel line, nodes JSON or an error, whatever else Ray writes (sparktui/remote/ray_nodes.py).
RAY_NODES_SNIPPET = script("ray_nodes.py")


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0  # `ray list nodes` prints memory as "22.344 GiB"; we only use GPU/CPU


def _from_ray_nodes_record(r: dict[str, Any]) -> RayNode | None:
    ip = r.get("NodeManagerAddress")
    if not ip:
        return None
    res = r.get("Resources") or {}
    if not isinstance(res, dict):
        res = {}
    alive = r.get("Alive", r.get("alive"))
    return RayNode(
        node_id=str(r.get("NodeID", "")),
        ip=str(ip),
        alive=bool(alive) if alive is not None else str(r.get("state", "")).upper() == "ALIVE",
        is_head=HEAD_RESOURCE in res,
        hostname=str(r.get("NodeManagerHostname") or ""),
        gpus=_float(res.get("GPU", 0.0)),
        cpus=_float(res.get("CPU", 0.0)),
        death_reason=str(r.get("DeathReasonMessage") or ""),
    )


def _from_state_row(r: dict[str, Any]) -> RayNode | None:
    ip = r.get("node_ip")
    if not ip:
        return None
    res = r.get("resources_total") or {}
    if not isinstance(res, dict):
        res = {}
    is_head = r.get("is_head_node")
    return RayNode(
        node_id=str(r.get("node_id", "")),
        ip=str(ip),
        alive=str(r.get("state", "")).upper() == "ALIVE",
        is_head=bool(is_head) if is_head is not None else HEAD_RESOURCE in res,
        hostname=str(r.get("hostname") or ""),
        gpus=_float(res.get("GPU", 0.0)),
        cpus=_float(res.get("CPU", 0.0)),
        death_reason=str(r.get("state_message") or ""),
    )


def unwrap_state_api(data: Any) -> tuple[Any, str | None]:
    """A State API answer -> (its rows, None), or (None, error) when the dashboard says the
    request failed: the dashboard envelope `{"result": bool, "msg": ..., "data": {"result":
    ListApiResponse}}` and a ListApiResponse `{"result": [rows], ...}` are unwrapped, anything
    else is returned as it is."""
    if isinstance(data, dict) and "data" in data and "result" in data:  # dashboard envelope
        if data.get("result") is not True:
            return None, f"dashboard: {data.get('msg') or 'request failed'}"
        inner = data.get("data") or {}
        data = inner.get("result", inner) if isinstance(inner, dict) else inner
    if isinstance(data, dict) and isinstance(data.get("result"), list):  # ListApiResponse
        data = data["result"]
    return data, None


def nodes_from_data(data: Any) -> tuple[list[RayNode], str | None]:
    """Any decoded node table -> (nodes, error). Accepts a `ray.nodes()` list, a state API
    row list (`ray list nodes --format json`), a ListApiResponse, or the dashboard envelope
    (`unwrap_state_api`)."""
    data, error = unwrap_state_api(data)
    if error:
        return [], error
    if not isinstance(data, list):
        return [], "unrecognised Ray node table"
    nodes: list[RayNode] = []
    for r in data:
        if not isinstance(r, dict):
            continue
        node = _from_ray_nodes_record(r) if "NodeManagerAddress" in r else _from_state_row(r)
        if node is not None:
            nodes.append(node)
    return nodes, None


def parse_ray_nodes(text: str) -> tuple[list[RayNode], str | None]:
    """Text of any source -> (nodes, error). Understands the snippet's sentinel lines (other
    stdout is ignored), else takes the whole text as JSON."""
    for line in reversed(text.splitlines()):
        if line.startswith(NODES_SENTINEL):
            try:
                return nodes_from_data(json.loads(line[len(NODES_SENTINEL) :]))
            except ValueError as e:
                return [], f"bad node JSON from Ray: {e}"
        if line.startswith(ERROR_SENTINEL):
            raw = line[len(ERROR_SENTINEL) :]
            try:
                msg = json.loads(raw)
            except ValueError:
                msg = raw
            return [], f"Ray: {msg}"
    if not text.strip():
        return [], "no output from Ray"
    try:
        data = json.loads(text)
    except ValueError:
        last = text.strip().splitlines()[-1][:300]
        return [], f"no node table in output: {last}"
    return nodes_from_data(data)


def dedupe_by_ip(nodes: Iterable[RayNode]) -> list[RayNode]:
    """One row per IP, keeping an alive row over dead ones (a restarted node leaves its old
    dead row behind). Order of first appearance is kept."""
    best: dict[str, RayNode] = {}
    for n in nodes:
        cur = best.get(n.ip)
        if cur is None or (n.alive and not cur.alive):
            best[n.ip] = n
    return list(best.values())


def ray_view(nodes: Iterable[RayNode], ips: Iterable[str]) -> RayView:
    """What Ray says about the node owning any of `ips` (alive rows preferred)."""
    wanted = set(ips)
    match = [n for n in nodes if n.ip in wanted]
    if not match:
        return RayView()
    n = next((m for m in match if m.alive), match[0])
    return RayView(
        registered_ip=n.ip,
        alive=n.alive,
        gpus=n.gpus,
        node_id=n.node_id,
        death_reason=n.death_reason,
    )
