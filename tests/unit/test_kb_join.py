"""Live join: log findings + the cluster snapshot -> fixes that name nodes, variables, IPs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.core.model import ClusterSnapshot, Interface, NodeState, RayNode, RayView
from sparktui.core.probes.ray import parse_ray_nodes
from sparktui.knowledge import Matcher, diagnose_bytes, diagnose_file, join, load_builtin

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_builtin())


def node(name, configured, ips, registered, env=None, alive=True, death=""):
    return NodeState(
        name=name,
        host=name,
        role="head" if name.endswith("1") else "worker",
        configured_ip=configured,
        interfaces=[Interface("enp1s0f1np1", "UP", list(ips))],
        ray=RayView(registered_ip=registered, alive=alive, death_reason=death),
        env=env or {},
    )


def issue_example() -> ClusterSnapshot:
    """spark-1 joined Ray on its Ethernet IP; vLLM asked for its interconnect IP."""
    s1 = node(
        "spark-1",
        "192.168.200.12",
        ["10.1.230.180", "192.168.200.12"],
        "10.1.230.180",
        env={"PATH": "/usr/bin"},
    )
    s2 = node(
        "spark-2",
        "192.168.200.13",
        ["10.1.230.181", "192.168.200.13"],
        "192.168.200.13",
        env={"PATH": "/usr/bin"},
    )
    ray = [
        RayNode("a", "10.1.230.180", True, is_head=True, gpus=1.0),
        RayNode("b", "192.168.200.13", True, gpus=1.0),
    ]
    return ClusterSnapshot("lab", [s1, s2], ray_nodes=ray)


def test_ip_mismatch_fix_names_node_variable_and_both_ips(matcher):
    log = (
        b"\x1b[33m(autoscaler +5s)\x1b[0m Error: No available node types can fulfill resource "
        b"request {'GPU': 1.0, 'node:192.168.200.12': 0.001}. Add suitable node types.\n"
    )
    [f] = join(diagnose_bytes(log, matcher), issue_example())
    assert f.node == "spark-1"
    live = f.fix.splitlines()[0]
    assert live.startswith(
        "On this cluster: vLLM asked for node:192.168.200.12, Ray knows "
        "10.1.230.180 (spark-1) and 192.168.200.13 (spark-2)."
    )
    assert "VLLM_HOST_IP is not set on spark-1" in live
    assert "Set VLLM_HOST_IP=10.1.230.180 on spark-1 (the IP Ray uses)" in live
    assert (
        "restart Ray pinned to the interconnect IPs (spark-1: 192.168.200.12, "
        "spark-2: 192.168.200.13)"
    ) in live
    assert "1. Make vLLM and Ray agree" in f.fix  # the generic steps follow


def test_real_log_joined_with_real_ray_table(matcher):
    """The lab capture: head registered on 198.18.1.101, vLLM pinned node:198.19.200.101."""
    ray_nodes, err = parse_ray_nodes(
        (FIXTURES / "ray" / "ray2node_case1_autodetect_ray_nodes.json").read_text()
    )
    assert err is None
    s1 = node(
        "spark-1",
        "198.19.200.101",
        ["198.18.1.101", "198.19.200.101"],
        "198.18.1.101",
        env={"VLLM_HOST_IP": "198.19.200.101"},
    )
    s2 = node(
        "spark-2",
        "198.19.200.102",
        ["198.18.1.102", "198.19.200.102"],
        "198.19.200.102",
        env={"VLLM_HOST_IP": "198.19.200.102"},
    )
    snap = ClusterSnapshot("lab", [s1, s2], ray_nodes=ray_nodes)
    findings = join(diagnose_file(FIXTURES / "vllm" / "vllm_ray_ip_mismatch.log", matcher), snap)
    first = findings[0]
    assert (first.category, first.node) == ("placement_group_ip_mismatch", "spark-1")
    live = first.fix.splitlines()[0]
    assert "vLLM asked for node:198.19.200.101" in live
    assert "198.18.1.101 (spark-1)" in live and "198.19.200.102 (spark-2)" in live
    assert "spark-1's container environment has VLLM_HOST_IP=198.19.200.101" in live
    assert "Set VLLM_HOST_IP=198.18.1.101 on spark-1" in live


def test_ip_that_ray_now_knows_is_not_called_a_mismatch(matcher):
    log = (
        b"Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:"
        b"192.168.200.13': 0.001, 'GPU': 1.0}, {'GPU': 1.0}].\n"
    )
    [f] = join(diagnose_bytes(log, matcher), issue_example())
    assert "Ray now has a node registered as 192.168.200.13 (spark-2)" in f.fix
    assert f.node == "spark-2"


def test_dead_worker_fix_points_at_its_node_and_log(matcher):
    log = (
        b"(raylet) A worker died or was killed while executing a task by an unexpected "
        b"system error. Worker IP address: 192.168.200.13 Worker port: 10002 Worker PID: 442"
        b" Worker exit type: SYSTEM_ERROR\n"
    )
    snap = issue_example()
    snap.nodes[1].ray.alive = False
    snap.nodes[1].ray.death_reason = "health check failed due to missing too many heartbeats"
    [f] = join(diagnose_bytes(log, matcher), snap)
    assert f.node == "spark-2"
    live = f.fix.splitlines()[0]
    assert "ran on spark-2 (192.168.200.13)" in live
    assert "Ray reports spark-2 as dead: health check failed" in live
    assert "worker-*-442.err" in live


def test_gloo_fix_says_where_the_variable_is_missing(matcher):
    log = (
        b"(RayWorkerWrapper pid=1890, ip=192.168.200.13) [rank1]:[E ProcessGroupGloo.cpp:144]"
        b" Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:144] no error\n"
    )
    snap = issue_example()
    snap.nodes[0].env["GLOO_SOCKET_IFNAME"] = "enp1s0f1np1"
    [f] = join(diagnose_bytes(log, matcher), snap)
    assert f.node == "spark-2"
    assert "GLOO_SOCKET_IFNAME is not set in spark-2's container environment" in f.fix
    assert "Not set on: spark-2." in f.fix


def test_without_snapshot_or_usable_ip_nothing_changes(matcher):
    log = (
        b"(autoscaler +7s) Error: No available node types can fulfill resource request "
        b"{'node:<IP>': 0.001, 'GPU': 1.0}.\n"
    )
    findings = diagnose_bytes(log, matcher)
    assert join(findings, None) == findings
    assert join(findings, issue_example()) == findings  # '<IP>' is not an address


def test_worker_death_without_ip_points_at_the_one_dead_node():
    from sparktui.core.model import ClusterSnapshot, Finding, NodeState, RayView
    from sparktui.knowledge import join

    alive = NodeState(
        "spark-1",
        "h1",
        "head",
        "198.19.1.11",
        reachable=True,
        ray=RayView(registered_ip="198.19.1.11", alive=True),
    )
    dead = NodeState(
        "spark-2",
        "h2",
        "worker",
        "198.19.1.12",
        reachable=True,
        ray=RayView(
            registered_ip="198.19.1.12",
            alive=False,
            death_reason="health check failed due to missing too many heartbeats",
        ),
    )
    f = Finding(
        "ray.worker_proc_died",
        "error",
        None,
        "A vLLM worker process died",
        fix="generic",
        source="log",
        category="ray_worker_died_segfault",
    )
    [j] = join([f], ClusterSnapshot("lab", [alive, dead]))
    assert j.node == "spark-2"
    assert "spark-2 (198.19.1.12) as dead: health check failed" in j.fix
    # two dead nodes: no guess
    alive.ray.alive = False
    [j] = join([f], ClusterSnapshot("lab", [alive, dead]))
    assert j.node is None


# ------------------------------------------------------------------ live state decides


def test_pg_wait_with_too_few_gpus_in_ray_is_not_enough_gpus(matcher):
    """The IPs agree; Ray has 1 GPU where the group needs 2: not an IP mismatch."""
    log = (
        b"(EngineCore_DP0 pid=84) INFO 06-07 18:13:55 [ray_utils.py:464] Waiting for creating"
        b" a placement group of specs for 150 seconds. specs=[{'node:192.168.200.13': 0.001,"
        b" 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status`\n"
    )
    snap = issue_example()
    snap.ray_nodes[0].gpus = 0.0  # spark-1's GPU is not visible to Ray
    [f] = join(diagnose_bytes(log, matcher), snap)
    assert f.category == "not_enough_gpus"
    assert "needs 2 GPU(s); Ray has 1 (spark-1: 0, spark-2: 1)" in f.fix.splitlines()[0]


def test_pg_wait_for_an_ip_ray_does_not_know_stays_the_ip_mismatch(matcher):
    log = (
        b"Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:"
        b"192.168.200.12': 0.001, 'GPU': 1.0}, {'GPU': 1.0}].\n"
    )
    [f] = join(diagnose_bytes(log, matcher), issue_example())
    assert f.category == "placement_group_ip_mismatch" and f.node == "spark-1"
    assert "Set VLLM_HOST_IP=10.1.230.180 on spark-1" in f.fix


def test_pg_wait_without_bundles_uses_tp_times_pp(matcher):
    log = b"Waiting for creating a placement group of specs for 30 seconds.\n"
    snap = issue_example()
    findings = join(diagnose_bytes(log, matcher), snap, want_gpus=4)
    assert findings[0].category == "not_enough_gpus"
    assert "needs 4 GPU(s); Ray has 2" in findings[0].fix
    assert join(diagnose_bytes(log, matcher), snap, want_gpus=2)[0].category != "not_enough_gpus"
