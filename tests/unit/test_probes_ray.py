"""Ray node tables from the lab's real Ray 2.60 captures (three sources)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from sparktui.core.probes.ray import (
    RAY_NODES_SNIPPET,
    dedupe_by_ip,
    nodes_from_data,
    parse_ray_nodes,
    ray_view,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ray"
HEAD1, WORKER1 = (
    "49eeda55dcf5eb834da87e82d606a4847a188ffa9179370e33dc2107",
    "8703b37135e0cbd4e84191bfaf048a072fac4325d694cf970458608a",
)


def read(name: str) -> str:
    return (FIX / name).read_text()


def summary(nodes):
    return sorted((n.node_id, n.ip, n.alive, n.is_head) for n in nodes)


def test_case1_all_three_sources_agree() -> None:
    expected = [(HEAD1, "198.18.1.101", True, True), (WORKER1, "198.19.200.102", True, False)]
    for name in (
        "ray2node_case1_autodetect_ray_nodes.json",
        "ray2node_case1_autodetect_dashboard_api_v0_nodes.json",
        "ray2node_case1_autodetect_ray_list_nodes.json",
    ):
        nodes, err = parse_ray_nodes(read(name))
        assert err is None, name
        assert summary(nodes) == sorted(expected), name
        assert all(n.cpus == 1.0 and n.gpus == 0.0 for n in nodes)


def test_ray_nodes_record_details() -> None:
    nodes, _ = parse_ray_nodes(read("ray2node_case2_interconnect_ip_ray_nodes.json"))
    assert [(n.ip, n.is_head, n.gpus, n.hostname) for n in nodes] == [
        ("198.19.200.101", True, 1.0, "vm"),
        ("198.19.200.102", False, 1.0, "vm"),
    ]


def test_snippet_sentinel_among_noise() -> None:
    table = read("ray2node_after_worker_raylet_sigkill_ray_nodes.json")
    out = (
        "2026-11-29 22:39:50,123\tINFO worker.py:1 -- Connecting to existing Ray cluster\n"
        "@@NODES@@" + json.dumps(json.loads(table)) + "\n"
    )
    nodes, err = parse_ray_nodes(out)
    assert err is None and {n.ip for n in nodes} == {"198.18.1.101", "198.19.200.102"}


def test_errors() -> None:
    assert parse_ray_nodes("")[1] == "no output from Ray"
    nodes, err = parse_ray_nodes(
        '@@RAY_ERROR@@"ConnectionError: Could not find any running Ray instance."\n'
    )
    assert nodes == [] and err and "Could not find any running Ray" in err
    assert parse_ray_nodes("Traceback...\nModuleNotFoundError: No module named 'ray'")[1]
    assert nodes_from_data({"result": False, "msg": "boom", "data": {}}) == ([], "dashboard: boom")


def test_dedupe_prefers_alive() -> None:
    # a restarted worker: the old row (from the case1 capture) dead, the new one alive
    old, _ = parse_ray_nodes(read("ray2node_case1_autodetect_ray_nodes.json"))
    new, _ = parse_ray_nodes(read("ray2node_after_worker_raylet_sigkill_ray_nodes.json"))
    dead_worker = dataclasses.replace(
        next(n for n in old if not n.is_head), alive=False, death_reason="received SIGTERM"
    )
    rows = [dead_worker, *new]
    out = dedupe_by_ip(rows)
    assert len(out) == 2
    w = next(n for n in out if n.ip == "198.19.200.102")
    assert w.alive and w.node_id.startswith("5214557b")
    # only dead rows for an IP: the dead row stays
    assert dedupe_by_ip([dead_worker]) == [dead_worker]
    v = ray_view(rows, ["198.19.200.102"])
    assert v.alive and v.registered_ip == "198.19.200.102" and v.gpus == 1.0
    assert ray_view(rows, ["10.0.0.1"]).registered_ip is None


def test_snippet_runs_without_ray_and_reports_cleanly() -> None:
    # real run of the snippet: here `import ray` fails, which must come back as one error line
    proc = subprocess.run(
        [sys.executable, "-c", RAY_NODES_SNIPPET],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
    )
    assert proc.returncode == 0
    nodes, err = parse_ray_nodes(proc.stdout)
    try:
        import ray  # noqa: F401
    except ImportError:
        assert nodes == [] and err and "ModuleNotFoundError" in err
    else:  # pragma: no cover - ray installed but no cluster
        assert err is not None or nodes
    compile(RAY_NODES_SNIPPET, "<snippet>", "exec")
    assert 'address="auto"' in RAY_NODES_SNIPPET


def test_snippet_real_output_one_head() -> None:
    nodes, err = parse_ray_nodes(read("snippet_stdout_ray2.60_one_head.txt"))
    assert err is None and len(nodes) == 1
    (n,) = nodes
    assert (n.ip, n.alive, n.is_head, n.gpus, n.cpus) == ("192.0.2.2", True, True, 1.0, 1.0)


def test_snippet_real_output_with_dead_row() -> None:
    nodes, err = parse_ray_nodes(read("snippet_stdout_ray2.60_worker_raylet_killed.txt"))
    assert err is None and len(nodes) == 2
    dead = next(n for n in nodes if not n.alive)
    assert dead.gpus == 0.0 and not dead.is_head  # Resources is {} for dead rows
    assert dead.death_reason == "health check failed due to missing too many heartbeats"
    (kept,) = dedupe_by_ip(nodes)  # both rows registered 192.0.2.2: the alive one stays
    assert kept.alive and kept.is_head
    assert ray_view(nodes, ["192.0.2.2"]).alive is True


def test_snippet_real_output_no_cluster() -> None:
    nodes, err = parse_ray_nodes(read("snippet_stdout_ray2.60_no_cluster.txt"))
    assert nodes == [] and err is not None
    assert err.startswith("Ray: ConnectionError: Could not find any running Ray instance")
