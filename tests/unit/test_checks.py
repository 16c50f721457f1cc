"""Live checks on real Ray node tables (fixtures captured on a 2-node lab, Ray 2.60)."""

from __future__ import annotations

from pathlib import Path

from sparktui import config
from sparktui.core import checks
from sparktui.core.model import ClusterSnapshot, Container, Interface, NodeState, RayView
from sparktui.core.probes.ray import parse_ray_nodes

RAY = Path(__file__).parent.parent / "fixtures" / "ray"

CFG = config.parse(
    "cluster: {name: lab}\n"
    "container: {name: ray_node, env: {NCCL_SOCKET_IFNAME: enp1s0f0np0}}\n"
    "vllm: {args: [--tensor-parallel-size, '2']}\n"
    "nodes:\n"
    "  - {name: spark-1, host: 198.18.1.101, ip: 198.19.200.101, role: head}\n"
    "  - {name: spark-2, host: 198.18.1.102, ip: 198.19.200.102}\n",
    "lab.yaml",
)


def _node(name: str, ext: str, ic: str, env: dict | None = None) -> NodeState:
    n = NodeState(
        name=name,
        host=ext,
        role="head" if name == "spark-1" else "worker",
        configured_ip=ic,
        reachable=True,
    )
    n.interfaces = [
        Interface("lo", "UNKNOWN", ["127.0.0.1"]),
        Interface("enP7s7", "UP", [ext]),
        Interface("enp1s0f0np0", "UP", [ic]),
    ]
    n.containers = [Container("ray_node", "lab-ray", "running", "Up 2 minutes")]
    n.env = env or {}
    return n


def _snapshot(fixture: str, env1: dict | None = None, env2: dict | None = None) -> ClusterSnapshot:
    ray_nodes, err = parse_ray_nodes((RAY / fixture).read_text())
    assert err is None and len(ray_nodes) == 2
    nodes = [
        _node("spark-1", "198.18.1.101", "198.19.200.101", env1),
        _node("spark-2", "198.18.1.102", "198.19.200.102", env2),
    ]
    snap = ClusterSnapshot("lab", nodes, ray_nodes=ray_nodes, ray_source="spark-1")
    for n in nodes:
        e = checks.ray_entry_for(n, ray_nodes)
        n.ray = RayView(registered_ip=e.ip if e else None, alive=e.alive if e else None)
    return snap


def ids(findings, node=None):
    return sorted(f.id for f in findings if node is None or f.node == node)


def test_autodetect_head_on_external_ip_is_a_mismatch_on_the_head_only():
    snap = _snapshot("ray2node_case1_autodetect_ray_nodes.json")
    found = checks.check(snap, CFG)
    assert ids(found, "spark-1") == ["ray-ip-mismatch"]
    assert ids(found, "spark-2") == []
    f = next(f for f in found if f.id == "ray-ip-mismatch")
    assert "198.18.1.101 (enP7s7)" in f.message and "198.19.200.101 (enp1s0f0np0)" in f.message
    assert "--node-ip-address 198.19.200.101" in f.fix


def test_pinned_to_interconnect_is_clean():
    snap = _snapshot(
        "ray2node_case2_interconnect_ip_ray_nodes.json",
        {"VLLM_HOST_IP": "198.19.200.101"},
        {"VLLM_HOST_IP": "198.19.200.102"},
    )
    assert checks.check(snap, CFG) == []


def test_vllm_host_ip_that_ray_does_not_know_is_flagged_with_both_ips():
    snap = _snapshot("ray2node_case1_autodetect_ray_nodes.json", {"VLLM_HOST_IP": "198.19.200.101"})
    found = checks.check(snap, CFG)
    f = next(f for f in found if f.id == "vllm-host-ip-mismatch")
    assert f.node == "spark-1"
    assert "198.19.200.101" in f.message and "198.18.1.101" in f.message
    assert "VLLM_HOST_IP=198.18.1.101" in f.fix


def test_missing_from_ray_dead_unreachable_and_container_down():
    snap = _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json")
    snap.ray_nodes = [r for r in snap.ray_nodes if r.ip != "198.19.200.102"]
    snap.nodes[1].containers[0].state = "exited"
    snap.nodes[1].containers[0].status = "Exited (137) 5 seconds ago"
    found = checks.check(snap, CFG)
    assert ids(found, "spark-2") == ["container-not-running", "node-not-in-ray"]
    assert any(f.id == "gpu-shortfall" for f in found)  # TP=2, one GPU left

    snap = _snapshot("ray2node_case2_interconnect_ip_ray_nodes.json")
    snap.ray_nodes[1].alive = False
    snap.ray_nodes[1].death_reason = "health check failed due to missing too many heartbeats"
    dead = next(r for r in snap.ray_nodes if not r.alive)
    owner = "spark-1" if dead.ip.endswith(".101") else "spark-2"
    found = checks.check(snap, CFG)
    f = next(f for f in found if f.id == "ray-node-dead")
    assert f.node == owner and "missing too many heartbeats" in f.message

    snap.nodes[0].reachable = False
    snap.nodes[0].error = "SSH connection refused (is sshd running?)"
    found = checks.check(snap, CFG)
    assert ids(found, "spark-1") == ["node-unreachable"]
    assert found[0].severity == "error"


def test_interface_missing_uses_nccl_prefix_rules():
    snap = _snapshot(
        "ray2node_case2_interconnect_ip_ray_nodes.json",
        {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "GLOO_SOCKET_IFNAME": "enp1s0f0"},
    )
    found = checks.check(snap, CFG)
    assert ids(found, "spark-1") == ["interface-missing"]
    assert "NCCL_SOCKET_IFNAME=enp1s0f1np1" in found[0].message
    # spark-2 falls back to the configured env (prefix enp1s0f0np0 exists)
    assert ids(found, "spark-2") == []
    assert checks._interfaces_match("^docker,lo", ["eth0"])[0]
    assert not checks._interfaces_match("=enp1", ["enp1s0f0np0"])[0]
    assert checks._interfaces_match("enp1", ["enp1s0f0np0"])[0]


def test_no_ray_table_means_no_ray_verdicts():
    snap = _snapshot("ray2node_case1_autodetect_ray_nodes.json")
    snap.ray_source, snap.ray_error = None, "head spark-1 unreachable"
    assert "ray-ip-mismatch" not in ids(checks.check(snap, CFG))
