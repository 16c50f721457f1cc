"""What Ray cannot place: its placement groups and the Pending Demands of `ray status`.

Two sources, read by the same probe as the node table (core/probes/script.py):

- the dashboard on the head: `/api/v0/placement_groups?detail=true` (the State API's
  envelope, rows with `bundles[].unit_resources`, `stats.creation_request_received_ns`) and
  `/api/cluster_status?format=1` (`data.clusterStatus`: the text `ray status` prints);
- without it, `ray_nodes.py pending` inside the head container: `@@PGS@@` with
  `ray.util.placement_group_table()` (bundles keyed by index) and the head's clock, and
  `@@STATUS@@` with that same `ray status` text, each or its `..._ERROR@@` line.

Pure functions, tested on captures of Ray 2.60 (tests/fixtures/ray/). REMOVED placement
groups (Ray keeps them a while) are dropped here.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from sparktui.core.model import PlacementGroup, RayDemand
from sparktui.core.probes.ray import unwrap_state_api

PGS_SENTINEL = "@@PGS@@"
PGS_ERROR_SENTINEL = "@@PGS_ERROR@@"
STATUS_SENTINEL = "@@STATUS@@"
STATUS_ERROR_SENTINEL = "@@STATUS_ERROR@@"

_SHAPE = re.compile(r"(\{[^{}]*\})(?: \* (\d+))?")
_PG_LINE = re.compile(r"^(?P<shapes>.*) \((?P<strategy>[A-Z_]+)\): (?P<n>\d+)\+ pending placement")
_TASK_LINE = re.compile(r"^(?P<shape>\{[^{}]*\}): (?P<n>\d+)\+ pending tasks")


def _resources(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    out = {}
    for k, v in value.items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def _bundles(raw: Any) -> list[dict[str, float]]:
    """State API rows (`[{"bundle_id": {"bundle_index": i}, "unit_resources": {...}}]`) or
    the GCS table's `{index: {...}}`, in bundle order."""
    if isinstance(raw, dict):
        items = sorted(raw.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0)
        return [_resources(v) for _, v in items]
    if isinstance(raw, list):
        return [_resources(b.get("unit_resources") if isinstance(b, dict) else None) for b in raw]
    return []


def _pg(row: dict[str, Any], now: float | None) -> PlacementGroup | None:
    pg_id = row.get("placement_group_id")
    state = str(row.get("state") or "").upper()
    if not pg_id or state == "REMOVED":
        return None
    raw_stats = row.get("stats")
    stats: dict[str, Any] = raw_stats if isinstance(raw_stats, dict) else {}
    age = None
    try:
        created_ns = int(stats.get("creation_request_received_ns") or 0)
    except (TypeError, ValueError):
        created_ns = 0
    if created_ns and now is not None:
        age = max(0.0, now - created_ns / 1e9)
    detached = row.get("is_detached")
    return PlacementGroup(
        pg_id=str(pg_id),
        name=str(row.get("name") or ""),
        state=state,
        bundles=_bundles(row.get("bundles")),
        strategy=str(row.get("strategy") or ""),
        scheduling_state=str(stats.get("scheduling_state") or ""),
        detached=bool(detached) if detached is not None else None,
        age_s=age,
    )


def pgs_from_data(data: Any, now: float | None = None) -> tuple[list[PlacementGroup], str | None]:
    """Any decoded placement-group table -> (placement groups, error): the dashboard
    envelope, a ListApiResponse, a list of State API rows, the snippet's
    `{"now": t, "pgs": {...}}` or `placement_group_table()`'s `{id: info}` itself.
    `now`: the head's clock (Unix s), for the age of groups that say when they were asked."""
    if isinstance(data, dict) and "pgs" in data:  # the snippet
        now = data.get("now") if isinstance(data.get("now"), (int, float)) else now
        data = data["pgs"]
    data, error = unwrap_state_api(data)
    if error:
        return [], error
    if isinstance(data, dict):  # placement_group_table(): {id: info}
        data = list(data.values())
    if not isinstance(data, list):
        return [], "unrecognised placement group table"
    out = [pg for r in data if isinstance(r, dict) and (pg := _pg(r, now)) is not None]
    return out, None


def parse_pgs_dashboard(text: str) -> tuple[list[PlacementGroup], str | None]:
    """The probe's ray_pgs section: `now=<head's Unix s>` then the dashboard's JSON."""
    now = None
    first, _, rest = text.partition("\n")
    if first.startswith("now="):
        try:
            now = float(first[4:])
        except ValueError:
            now = None
        text = rest
    if not text.strip():
        return [], "no answer from the dashboard's placement groups"
    try:
        return pgs_from_data(json.loads(text), now)
    except ValueError as e:
        return [], f"bad placement group JSON from the dashboard: {e}"


def _shape(text: str) -> dict[str, float] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return _resources(value) if isinstance(value, dict) else None


def _demand(line: str) -> RayDemand | None:
    s = line.strip()
    if m := _PG_LINE.match(s):
        shapes = []
        for sm in _SHAPE.finditer(m["shapes"]):
            shape = _shape(sm[1])
            if shape is not None:
                shapes.append((shape, int(sm[2] or 1)))
        return RayDemand("placement_group", shapes, int(m["n"]), m["strategy"], s)
    if m := _TASK_LINE.match(s):
        shape = _shape(m["shape"])
        return RayDemand("task", [(shape, 1)] if shape else [], int(m["n"]), "", s)
    return None


def demands_from_status(text: str) -> list[RayDemand]:
    """The Pending Demands of `ray status` text (older Ray: `Demands:`)."""
    out: list[RayDemand] = []
    inside = False
    for line in text.splitlines():
        head = line.strip()
        if not line.startswith(" "):
            inside = head in ("Pending Demands:", "Demands:")
            continue
        if inside and (d := _demand(line)) is not None:
            out.append(d)
    return out


def parse_cluster_status(text: str) -> tuple[list[RayDemand], str | None]:
    """`/api/cluster_status?format=1` (envelope with `data.clusterStatus`), or the plain
    `ray status` text -> (demands, error)."""
    body = text.strip()
    if not body:
        return [], "no answer from the dashboard's cluster status"
    if body.startswith("{"):
        try:
            data = json.loads(body)
        except ValueError as e:
            return [], f"bad cluster status JSON: {e}"
        if not isinstance(data, dict) or data.get("result") is not True:
            msg = data.get("msg") if isinstance(data, dict) else None
            return [], f"dashboard: {msg or 'cluster status request failed'}"
        inner = data.get("data") or {}
        found = inner.get("clusterStatus") if isinstance(inner, dict) else None
        if not isinstance(found, str):
            return [], "no clusterStatus text in the dashboard's answer"
        body = found
    return demands_from_status(body), None


def _sentinel_value(text: str, ok: str, bad: str) -> tuple[Any, str | None, bool]:
    """(decoded value, error, found) of the last `ok`/`bad` sentinel line in `text`."""
    for line in reversed(text.splitlines()):
        for tag, is_error in ((ok, False), (bad, True)):
            if line.startswith(tag):
                try:
                    value = json.loads(line[len(tag) :])
                except ValueError as e:
                    return None, f"bad JSON after {tag}: {e}", True
                return (None, f"Ray: {value}", True) if is_error else (value, None, True)
    return None, None, False


def parse_snippet_pending(
    text: str,
) -> tuple[list[PlacementGroup] | None, list[RayDemand] | None, str | None]:
    """The snippet's `@@PGS@@` / `@@STATUS@@` lines -> (placement groups, demands, error).
    None for a part the output lacks (an older snippet, or Ray failed before it)."""
    errors = []
    pgs: list[PlacementGroup] | None = None
    demands: list[RayDemand] | None = None
    value, err, found = _sentinel_value(text, PGS_SENTINEL, PGS_ERROR_SENTINEL)
    if found:
        pgs = []
        if err is None:
            pgs, err = pgs_from_data(value)
        if err:
            errors.append(f"placement groups: {err}")
    value, err, found = _sentinel_value(text, STATUS_SENTINEL, STATUS_ERROR_SENTINEL)
    if found:
        demands = []
        if err is None and isinstance(value, str):
            demands = demands_from_status(value)
        elif err is None:
            err = "ray status text is not a string"
        if err:
            errors.append(f"pending demands: {err}")
    return pgs, demands, "; ".join(errors) or None
