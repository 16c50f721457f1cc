"""Ray's placement groups and pending demands: the parsers on real Ray 2.60 captures (both
sources: the dashboard's answers and the snippet's lines, plus whole probes of the head), and
the checks that turn them into findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparktui.core import checks
from sparktui.core.model import ClusterSnapshot, PlacementGroup
from sparktui.core.probes import ray_pending
from sparktui.core.probes.ray import parse_ray_nodes
from sparktui.core.probes.ray_pending import (
    demands_from_status,
    parse_cluster_status,
    parse_pgs_dashboard,
    parse_snippet_pending,
    pgs_from_data,
)
from sparktui.core.probes.script import parse_probe
from sparktui.core.serialize import snapshot_to_dict
from sparktui.remote import script
from tests.unit.test_checks import CFG, _snapshot

FIX = Path(__file__).parent.parent / "fixtures"
RAY = FIX / "ray"
MISSING = "sparktui-lab-missing-node"
THREE = "sparktui-lab-three-gpus"


def text(name: str) -> str:
    return (RAY / name).read_text()


def by_name(pgs: list[PlacementGroup]) -> dict[str, PlacementGroup]:
    return {p.name: p for p in pgs}


# --- parsers ------------------------------------------------------------------------------


def test_dashboard_placement_groups() -> None:
    body = text("ray2.60_dashboard_placement_groups_pending.json")
    pgs, err = parse_pgs_dashboard("now=1796154870\n" + body)
    assert err is None
    got = by_name(pgs)
    assert set(got) == {MISSING, THREE, "sparktui-lab-fits"}
    miss = got[MISSING]
    assert miss.state == "PENDING" and miss.pending and miss.detached is True
    assert miss.scheduling_state == "INFEASIBLE"
    assert miss.bundles == [{"CPU": 1.0, "node:198.19.254.99": 0.001}]
    assert miss.pg_id == "c70c67975cf9069d2a1cd249988303000000"
    assert 30 < (miss.age_s or 0) < 40  # creation_request_received_ns against the head's now
    three = got[THREE]
    assert three.gpus() == 3.0 and three.scheduling_state == "NO_RESOURCES"
    assert got["sparktui-lab-fits"].state == "CREATED" and not got["sparktui-lab-fits"].pending
    # without the head's clock there is no age
    assert parse_pgs_dashboard(body)[0][0].age_s is None


def test_removed_groups_are_dropped() -> None:
    pgs, err = parse_pgs_dashboard(text("ray2.60_dashboard_placement_groups_removed.json"))
    assert err is None and pgs == []
    pgs, demands, err = parse_snippet_pending(
        text("snippet_pending_stdout_ray2.60_pgs_removed.txt")
    )
    assert err is None and pgs == [] and demands == []


def test_dashboard_cluster_status() -> None:
    demands, err = parse_cluster_status(text("ray2.60_dashboard_cluster_status_pending.json"))
    assert err is None
    assert [(d.kind, d.strategy, d.count) for d in demands] == [("placement_group", "PACK", 1)] * 2
    assert demands[0].shapes == [({"GPU": 1.0}, 3)]
    assert demands[1].shapes == [({"node:198.19.254.99": 0.001, "CPU": 1.0}, 1)]
    assert demands[1].text.endswith("1+ pending placement groups")
    assert parse_cluster_status(text("ray2.60_dashboard_cluster_status_idle.json")) == ([], None)


def test_ray_status_text_of_the_seed_failure() -> None:
    (d,) = demands_from_status(text("ray_status_during_vllm_ip_mismatch.txt"))
    assert d.shapes == [({"GPU": 1.0, "node:198.19.200.101": 0.001}, 1), ({"GPU": 1.0}, 1)]
    assert d.strategy == "PACK"
    assert demands_from_status(text("ray2node_case2_interconnect_ip_ray_status.txt")) == []


def test_ray_status_task_demand_line() -> None:
    # the line format of ray/autoscaler/_private/util.py::format_resource_demand_summary
    (d,) = demands_from_status(
        "Pending Demands:\n {'CPU': 1.0, 'node:10.0.0.9': 0.001}: 2+ pending tasks/actors\n"
    )
    assert (d.kind, d.count, d.shapes) == ("task", 2, [({"CPU": 1.0, "node:10.0.0.9": 0.001}, 1)])


def test_ray_list_placement_groups_rows() -> None:
    pgs, err = pgs_from_data(json.loads(text("ray_list_placement_groups_during_ip_mismatch.json")))
    assert err is None
    (pg,) = pgs
    assert pg.bundles == [{"GPU": 1.0, "node:198.19.200.101": 0.001}, {"GPU": 1.0}]
    assert pg.pending and pg.detached is False


def test_snippet_lines() -> None:
    pgs, demands, err = parse_snippet_pending(
        text("snippet_pending_stdout_ray2.60_pgs_pending.txt")
    )
    assert err is None and pgs is not None and demands is not None
    got = by_name(pgs)
    assert got[MISSING].bundles == [{"CPU": 1.0, "node:198.19.254.99": 0.001}]
    assert got[MISSING].strategy == "PACK" and got[MISSING].scheduling_state == "INFEASIBLE"
    assert got[THREE].bundles == [{"GPU": 1.0}] * 3
    assert got["sparktui-lab-fits"].state == "CREATED"
    assert len(demands) == 2


def test_snippet_errors_and_old_output() -> None:
    out = '@@NODES@@[]\n@@PGS_ERROR@@"AttributeError: x"\n@@STATUS@@"Pending Demands:\\n (no resource demands)"\n'
    pgs, demands, err = parse_snippet_pending(out)
    assert pgs == [] and demands == []
    assert err == "placement groups: Ray: AttributeError: x"
    # an older snippet (nodes only): nothing known, no error
    assert parse_snippet_pending(text("snippet_stdout_ray2.60_one_head.txt")) == (None, None, None)


def test_bad_answers() -> None:
    assert parse_pgs_dashboard("now=1\n")[1] is not None
    assert parse_pgs_dashboard("now=1\n{not json")[1].startswith("bad placement group JSON")
    assert parse_pgs_dashboard('{"result": false, "msg": "boom", "data": {}}')[1] == (
        "dashboard: boom"
    )
    assert parse_cluster_status("")[1] is not None
    assert parse_cluster_status('{"result": true, "data": {}}')[1] is not None


@pytest.mark.parametrize("route", ["dashboard", "python"])
def test_whole_head_probe(route: str) -> None:
    out = (FIX / "probe" / f"lab_head_probe_{route}_pgs_pending.txt").read_text(errors="replace")
    res = parse_probe(out)
    assert res.complete and res.ray_source == route and res.ray_error is None
    assert res.ray_pending_error is None
    assert res.ray_pgs is not None and res.ray_demands is not None
    assert {p.name for p in res.ray_pgs if p.pending} == {MISSING, THREE}
    assert len(res.ray_demands) == 2


def test_probe_asks_the_snippet_for_pending() -> None:
    probe = script("probe.sh")
    assert 'python3 -c "$2" pending' in probe
    assert "/api/v0/placement_groups?detail=true" in probe
    assert "/api/cluster_status?format=1" in probe
    snippet = script("ray_nodes.py")
    for tag in (ray_pending.PGS_SENTINEL, ray_pending.STATUS_SENTINEL):
        assert tag[:-2] in snippet  # the snippet builds `<tag>@@` and `<tag>_ERROR@@`


# --- checks -------------------------------------------------------------------------------


def _with_pending(snap: ClusterSnapshot, probe_fixture: str) -> ClusterSnapshot:
    res = parse_probe((FIX / "probe" / probe_fixture).read_text(errors="replace"))
    snap.ray_pgs, snap.ray_demands = res.ray_pgs or [], res.ray_demands or []
    return snap


def test_seed_failure_names_the_ip_its_owner_and_the_fix() -> None:
    # vLLM on spark-1 asked node:198.19.200.101 (VLLM_HOST_IP = its interconnect IP) while Ray
    # registered spark-1 under its external 198.18.1.101 (case 1: nobody pinned)
    snap = _snapshot("ray2node_case1_autodetect_ray_nodes.json")
    snap.ray_pgs, _ = pgs_from_data(
        json.loads(text("ray_list_placement_groups_during_ip_mismatch.json"))
    )
    snap.ray_demands = demands_from_status(text("ray_status_during_vllm_ip_mismatch.txt"))
    found = [f for f in checks.check(snap, CFG) if f.id == "pg-node-missing"]
    assert len(found) == 1  # the PG and its demand line are one finding
    f = found[0]
    assert f.severity == "error" and f.node == "spark-1"
    assert "node:198.19.200.101" in f.message
    assert "an address of spark-1, which Ray knows as 198.18.1.101" in f.message
    assert "198.18.1.101 (spark-1)" in f.message and "198.19.200.102 (spark-2)" in f.message
    assert "VLLM_HOST_IP=198.18.1.101" in f.fix and "--node-ip-address 198.19.200.101" in f.fix


def test_unknown_ip_and_too_many_gpus() -> None:
    snap = _with_pending(
        _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json"),
        "lab_head_probe_python_pgs_pending.txt",
    )
    found = {f.id: f for f in checks.check(snap, CFG) if f.id.startswith("pg-")}
    assert set(found) == {"pg-node-missing", "pg-not-enough-gpus"}
    miss = found["pg-node-missing"]
    assert f"'{MISSING}'" in miss.message and "node:198.19.254.99" in miss.message
    assert "belongs to no configured node" in miss.message and miss.node is None
    assert "VLLM_HOST_IP" in miss.fix and "198.19.200.101" in miss.fix
    gpus = found["pg-not-enough-gpus"]
    assert f"'{THREE}' asks 3 GPUs" in gpus.message and "Ray has 2 on 2 alive" in gpus.message
    assert gpus.severity == "error" and "--tensor-parallel-size" in gpus.fix


def test_demand_alone_is_a_finding() -> None:
    snap = _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json")
    snap.ray_demands, _ = parse_cluster_status(
        text("ray2.60_dashboard_cluster_status_pending.json")
    )
    (f,) = [f for f in checks.check(snap, CFG) if f.id.startswith("pg-")]
    assert f.id == "pg-node-missing" and f.message.startswith("A pending placement group asks")


def test_long_wait_is_a_warning_and_created_is_nothing() -> None:
    snap = _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json")
    snap.ray_pgs = [
        PlacementGroup("aa" * 18, "slow", "PENDING", [{"GPU": 1.0}], "PACK", "QUEUED", age_s=61),
        PlacementGroup("bb" * 18, "young", "PENDING", [{"GPU": 1.0}], age_s=5),
        PlacementGroup("cc" * 18, "done", "CREATED", [{"GPU": 1.0}], age_s=600),
    ]
    (f,) = [f for f in checks.check(snap, CFG) if f.id.startswith("pg-")]
    assert (f.id, f.severity) == ("pg-pending", "warning")
    assert "'slow' has waited 61s (QUEUED)" in f.message and "{'GPU': 1.0}" in f.message
    snap.ray_pgs = snap.ray_pgs[2:]
    assert not [f for f in checks.check(snap, CFG) if f.id.startswith("pg-")]


def test_status_json_carries_the_pending() -> None:
    snap = _with_pending(
        _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json"),
        "lab_head_probe_dashboard_pgs_pending.txt",
    )
    snap.ray_via = "dashboard"
    d = snapshot_to_dict(snap)["ray"]
    assert d["via"] == "dashboard"
    pending = d["pending"]
    assert pending["error"] is None
    assert {p["name"] for p in pending["placement_groups"]} == {MISSING, THREE}
    miss = next(p for p in pending["placement_groups"] if p["name"] == MISSING)
    assert miss["bundles"] == [{"CPU": 1.0, "node:198.19.254.99": 0.001}]
    assert miss["state"] == "PENDING" and miss["scheduling_state"] == "INFEASIBLE"
    assert [x["count"] for x in pending["demands"][0]["bundles"]] == [3]
    json.dumps(d)


def test_no_ray_reading_no_pending_check() -> None:
    snap = _with_pending(
        _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json"),
        "lab_head_probe_python_pgs_pending.txt",
    )
    snap.ray_error, snap.ray_source = "head spark-1 unreachable", None
    assert not [f for f in checks.check(snap, CFG) if f.id.startswith("pg-")]


def test_parsers_are_exported_for_the_json_helpers() -> None:
    # a minimal ray.nodes() list still parses next to the pending lines
    nodes, err = parse_ray_nodes(text("snippet_pending_stdout_ray2.60_pgs_pending.txt"))
    assert err is None and len(nodes) == 2


def test_a_failed_dashboard_part_is_said_and_the_rest_kept() -> None:
    out = (FIX / "probe" / "lab_head_probe_dashboard_pgs_pending.txt").read_text(errors="replace")
    res = parse_probe(
        out.replace("@@sparktui:/ray_status rc=0@@", "@@sparktui:/ray_status rc=28@@")
    )
    assert res.ray_demands == [] and res.ray_error is None
    assert res.ray_pending_error == "dashboard cluster status: timed out" or (
        res.ray_pending_error or ""
    ).startswith("dashboard cluster status: exit 28")
    assert {p.name for p in res.ray_pgs or []} >= {MISSING, THREE}
