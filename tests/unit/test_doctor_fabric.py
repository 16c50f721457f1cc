"""Doctor's fabric checks on real doctor-probe output: the parsers on captures from the lab
(tests/fixtures/doctor/lab_*.txt: `doctor.sh` over SSH on a 2-node lab, the interconnect cut,
RDMA stand-ins printing a DGX Spark's sysfs/ibdev2netdev formats) and from a real H200 host
(h200_*: no docker, no RDMA devices exposed, torch/NCCL from pip), then every check and the
matrix on those captures with one value changed at a time."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

import pytest

from sparktui import config as config_mod
from sparktui.core.actions.doctor import NodeExtras, parse_doctor_probe
from sparktui.core.actions.fabric import (
    CHECK_IDS,
    clock_offset,
    differing_env,
    fabric_checks,
    render_matrix,
)
from sparktui.core.model import ClusterSnapshot, Container, Gpu, Interface, NodeState, VllmStatus
from sparktui.core.probes.fabric import (
    parse_ib,
    parse_ibdev2netdev,
    parse_listeners,
    parse_runtimes,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
HEAD_IP, WORKER_IP = "198.19.11.11", "198.19.11.12"

CFG = textwrap.dedent("""\
    nodes:
      - {name: spark-1, host: 198.18.11.11, ip: 198.19.11.11, role: head}
      - {name: spark-2, host: 198.18.11.12, ip: 198.19.11.12}
    container: {name: ray-sl11, image: "sparklab/ray:2e7274516ed5", run_args: [--network, host],
                env: {NCCL_SOCKET_IFNAME: enp1s0f0np0, GLOO_SOCKET_IFNAME: enp1s0f0np0}}
    vllm: {model: /models/tiny, args: [--gpu-memory-utilization, "0.05"]}
""")


def cfg(text: str = CFG):
    return config_mod.parse(text, "c.yaml")


def extras(name: str) -> NodeExtras:
    x = parse_doctor_probe((FIX / f"{name}.txt").read_text())
    x.sent_at, x.received_at = x.clock, x.clock_end  # no network time: offset 0
    return x


def state(
    name: str,
    ip: str,
    env: dict[str, str] | None = None,
    unified: bool = True,
    running: bool = True,
) -> NodeState:
    st = NodeState(
        name=name,
        host=ip.replace("198.19", "198.18"),
        role="head" if name == "spark-1" else "worker",
        configured_ip=ip,
        reachable=True,
    )
    st.interfaces = [
        Interface("lo", "UNKNOWN", ["127.0.0.1"]),
        Interface("enP7s7", "UP", [ip.replace("198.19", "198.18")]),
        Interface("enp1s0f0np0", "UP", [ip]),
    ]
    st.containers = [
        Container(
            "ray-sl11",
            "sparklab/ray:2e7274516ed5",
            "running" if running else "exited",
            "Up 1 minute",
            command="ray start --block",
        )
    ]
    st.env = dict(
        env
        if env is not None
        else {
            "VLLM_HOST_IP": ip,
            "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
            "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
            "RAY_memory_monitor_refresh_ms": "0",
        }
    )
    st.gpus = [Gpu(0, "NVIDIA GB10", 1000, 120000, unified=unified)]
    return st


def pair(head: str = "lab_head_healthy", worker: str = "lab_worker_healthy"):
    snap = ClusterSnapshot(
        "lab", [state("spark-1", HEAD_IP), state("spark-2", WORKER_IP)], vllm=VllmStatus()
    )
    return snap, {"spark-1": extras(head), "spark-2": extras(worker)}


def problems(board, *, ignore=("ulimit-low",)):
    return sorted(
        (f.id, f.node) for f in board.findings if f.severity != "info" and f.id not in ignore
    )


def only(board, check: str):
    return [f for f in board.findings if f.id == check and f.severity != "info"]


# --- parsers on the captures ------------------------------------------------------------


def test_lab_head_capture_parses() -> None:
    x = extras("lab_head_healthy")
    assert x.error is None
    assert x.netdev["enp1s0f0np0"].mtu == 1500 and x.netdev["enp1s0f0np0"].link_up
    assert x.hostconfig is not None and x.hostconfig["IpcMode"] == "private"
    assert x.hostconfig["ShmSize"] == 1 << 30
    assert x.runtimes == ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc"]
    assert x.default_runtime == "runc"
    assert x.host_gpus == ["GPU 0: NVIDIA GB10 (UUID: GPU-5d1e9c0a-3b27-4f68-a0c4-7e2b91d3f501)"]
    assert x.image_id and x.image_id.startswith("sha256:")  # `range`, not `join`, on docker 26+
    gcs = [ln for ln in x.listeners if ln.port == 6379]
    assert [(ln.address, ln.wildcard) for ln in gcs] == [("::", True)]
    assert (x.incontainer or {})["versions"]["ray"] == "2.60.0"
    assert (x.net or {})["peers"][WORKER_IP]["df"] is True
    assert x.meminfo_kib["MemTotal"] > x.meminfo_kib["MemFree"] > 0
    assert x.clock and x.clock_end and x.clock_end >= x.clock


def test_interconnect_cut_capture() -> None:
    x = extras("lab_worker_ic_cut")
    ic = x.netdev["enp1s0f0np0"]
    assert (ic.operstate, ic.carrier, ic.link_up) == ("down", False, False)
    peer = (x.net or {})["peers"][HEAD_IP]
    assert peer["icmp"] == "no reply in 1s" and peer["route"]["dev"] == "enp1s0f0np0"
    assert (x.incontainer or {})["gcs"] == {
        "addr": f"{HEAD_IP}:6379",
        "error": "timed out",
        "ok": False,
    }


def test_rdma_stand_in_capture() -> None:
    x = extras("lab_worker_rdma_standin")
    ports = {p.device: p for p in x.ib}
    assert sorted(ports) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    p = ports["rocep1s0f0"]
    assert (p.port, p.link_layer, p.state, p.active) == (1, "Ethernet", "ACTIVE", True)
    assert ports["rocep1s0f1"].state == "DOWN"
    assert sorted(p.gids) == [0, 1, 2, 3]  # unreadable (unpopulated) entries skipped
    assert p.gids[1].link_local and p.gids[1].type == "RoCE v2" and p.gids[1].ipv4 is None
    assert p.gids[3].ipv4 == WORKER_IP and p.gids[3].type == "RoCE v2"
    assert [(link.device, link.netdev, link.up) for link in x.ibdev2netdev][:2] == [
        ("rocep1s0f0", "enp1s0f0np0", True),
        ("roceP2p1s0f0", "enP2p1s0f0np0", True),
    ]


def test_real_h200_host_capture() -> None:
    """A real GPU host (the device machine): no docker, no container, no peers."""
    x = parse_doctor_probe((FIX / "h200_host_no_docker.txt").read_text())
    assert x.error is None and x.incontainer is None and x.hostconfig is None
    assert x.host_gpus == ["GPU 0: NVIDIA H200 (UUID: GPU-c4d8dfd1-80a0-c6c2-cbf4-c49e6d276edd)"]
    assert x.netdev["eth0"].mtu == 1400 and x.ib == [] and x.net == {"peers": {}}
    c = json.loads((FIX / "h200_host_doctor_container.json").read_text())
    assert c["versions"]["nccl"] == "2.28.9" and c["versions"]["torch"] == "2.11.0"
    assert c["memlock"] == [-1, -1] and c["dev_infiniband"] == ["rdma_cm"]


def test_parse_runtimes_and_ibdev2netdev_documented_formats() -> None:
    # `docker info --format '{{json .Runtimes}} {{.DefaultRuntime}}'` once
    # `nvidia-ctk runtime configure --runtime=docker` has added the runtime (NVIDIA
    # Container Toolkit install guide: daemon.json "runtimes": {"nvidia": {"path": ...}}).
    text = (
        '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":'
        '"nvidia-container-runtime"},"runc":{"path":"runc"}} runc'
    )
    assert parse_runtimes(text) == (["io.containerd.runc.v2", "nvidia", "runc"], "runc")
    assert parse_runtimes("") == ([], None)
    assert parse_runtimes("not json runc") == ([], None)
    # MLNX_OFED's ibdev2netdev on a ConnectX host.
    links = parse_ibdev2netdev(
        "mlx5_0 port 1 ==> ibp12s0 (Up)\nmlx5_1 port 1 ==> ibp75s0 (Down)\ngarbage\n"
    )
    assert [(link.device, link.netdev, link.up) for link in links] == [
        ("mlx5_0", "ibp12s0", True),
        ("mlx5_1", "ibp75s0", False),
    ]


def test_parse_listeners_decodes_v4_v6_and_mapped() -> None:
    text = "\n".join(
        [
            "  sl  local_address rem_address   st",
            "   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1",
            "   1: 0100007F:1FA3 0100007F:DCE6 06 00000000:00000000 03:00000F99 00000000 0 0 0",
            "   2: 0B0B13C6:A5AD 00000000:0000 0A 0",
            "   0: 00000000000000000000000000000000:18EB 00000000000000000000000000000000:0000 0A",
            "   1: 0000000000000000FFFF00000B0B13C6:1F40 00000000000000000000000000000000:0000 0A",
            "   2: 00000000000000000000000001000000:2071 00000000000000000000000000000000:0000 0A",
        ]
    )
    got = [(ln.address, ln.port) for ln in parse_listeners(text)]
    assert got == [
        ("0.0.0.0", 2024),
        ("::", 6379),
        ("198.19.11.11", 8000),
        ("::1", 8305),
        ("198.19.11.11", 42413),
    ]


def test_parse_ib_ignores_broken_lines() -> None:
    assert parse_ib("port\ngid x 1 2\nport dev x Ethernet 4: ACTIVE\n") == []


# --- the checks on the captures ----------------------------------------------------------


def test_healthy_lab_capture_gives_nothing_but_the_machines_nofile_limit() -> None:
    snap, ex = pair()
    board = fabric_checks(cfg(), snap, ex)
    assert problems(board) == []
    # this machine's containers get 20000 open files: a real, if harmless here, warning
    assert [(f.node, f.severity) for f in only(board, "ulimit-low")] == [
        ("spark-1", "warning"),
        ("spark-2", "warning"),
    ]
    assert "ulimit -n is 20000" in only(board, "ulimit-low")[0].message
    gcs = [f for f in board.findings if f.id == "port-exposed"]
    assert [(f.node, f.severity) for f in gcs] == [("spark-1", "info")]
    assert board.cell("mtu-mismatch", "spark-2").value == "1500"
    assert board.cell("gpu-not-in-container", "spark-1").value == "1/1"
    # the model exists on the head only: the worker's cell says why it was not compared
    assert board.cell("model-incomplete", "spark-1").status == "ok"
    assert board.cell("model-incomplete", "spark-2").status == "n/a"


def test_interconnect_cut_names_the_cut_node_only() -> None:
    snap, ex = pair("lab_head_peer_ic_cut", "lab_worker_ic_cut")
    board = fabric_checks(cfg(), snap, ex)
    assert problems(board) == [("peer-unreachable", "spark-2")]
    [f] = only(board, "peer-unreachable")
    assert f.message == (
        f"the interconnect enp1s0f0np0 ({WORKER_IP}) on spark-2 has no link "
        "(down, no carrier): no peer can reach spark-2"
    )
    assert board.odd["peer-unreachable"] == ["spark-2"]
    assert board.cell("peer-unreachable", "spark-1").status == "ok"


def test_unreachable_peer_without_a_down_link_and_a_route_through_management() -> None:
    snap, ex = pair()
    peers = (ex["spark-1"].net or {})["peers"]
    peers[WORKER_IP]["icmp"] = "no reply in 1s"
    peers[WORKER_IP]["route"]["dev"] = "enP7s7"
    board = fabric_checks(cfg(), snap, ex)
    msgs = [f.message for f in only(board, "peer-unreachable")]
    assert msgs == [
        f"spark-1 cannot reach spark-2 at {WORKER_IP} (no reply in 1s) over ICMP",
        f"from spark-1, spark-2's ip {WORKER_IP} is routed through enP7s7, not "
        "NCCL_SOCKET_IFNAME=enp1s0f0np0: NCCL/Gloo bind one interface, the kernel "
        "sends through another",
    ]


def _set_mtu(x: NodeExtras, mtu: int) -> None:
    nd = x.netdev["enp1s0f0np0"]
    x.netdev["enp1s0f0np0"] = type(nd)(nd.name, mtu, nd.operstate, nd.carrier)


def test_mtu_mismatch_names_the_smaller_end_and_the_df_failure() -> None:
    snap, ex = pair()
    _set_mtu(ex["spark-1"], 9000)  # head raised, worker reset to 1500 (either is 1 of 2)
    (ex["spark-1"].net or {})["peers"][WORKER_IP]["df"] = "no reply in 1s"
    board = fabric_checks(cfg(), snap, ex)
    [f] = only(board, "mtu-mismatch")
    assert f.node == "spark-2" and f.severity == "error"
    assert f.message.startswith(
        "enp1s0f0np0 on spark-2 has MTU 1500, spark-1 9000; a "
        "9000-byte ping with Don't Fragment from spark-1 gets no reply"
    )
    assert f.fix.startswith("ip link set dev enp1s0f0np0 mtu 9000 on spark-2")
    assert board.odd["mtu-mismatch"] == ["spark-2"]


def test_equal_mtu_but_df_echo_lost_on_the_path() -> None:
    snap, ex = pair()
    (ex["spark-2"].net or {})["peers"][HEAD_IP]["df"] = "no reply in 1s"
    board = fabric_checks(cfg(), snap, ex)
    [f] = only(board, "mtu-mismatch")
    assert f.node == "spark-2" and "Don't Fragment does not reach spark-1" in f.message


def test_three_nodes_majority_decides_the_odd_one() -> None:
    worker = "  - {name: spark-2, host: 198.18.11.12, ip: 198.19.11.12}\n"
    assert worker in CFG
    three = CFG.replace(worker, worker + worker.replace("2", "3"))
    snap, ex = pair()
    snap.nodes.append(state("spark-3", "198.19.11.13"))
    ex["spark-3"] = copy.deepcopy(ex["spark-2"])
    _set_mtu(ex["spark-1"], 9000)
    _set_mtu(ex["spark-2"], 9000)
    (ex["spark-3"].incontainer or {})["versions"]["ray"] = "2.59.0"
    board = fabric_checks(cfg(three), snap, ex)
    assert problems(board) == [("mtu-mismatch", "spark-3"), ("version-mismatch", "spark-3")]
    [v] = only(board, "version-mismatch")
    assert v.message.startswith("container on spark-3 has ray 2.59.0 (others 2.60.0)")


def test_version_mismatch_on_a_pair_blames_the_worker() -> None:
    snap, ex = pair()
    (ex["spark-2"].incontainer or {})["versions"].update(vllm="0.11.0", torch="2.9.0")
    (ex["spark-1"].incontainer or {})["versions"].update(vllm="0.11.1", torch="2.9.0")
    board = fabric_checks(cfg(), snap, ex)
    [f] = only(board, "version-mismatch")
    assert f.node == "spark-2" and "vllm 0.11.0 (others 0.11.1)" in f.message
    assert "torch" not in f.message


@pytest.mark.parametrize(
    "var,severity", [("NCCL_SOCKET_IFNAME", "error"), ("NCCL_DEBUG", "warning")]
)
def test_nccl_env_overwritten_and_the_non_carry_over_file(var: str, severity: str) -> None:
    snap, ex = pair()
    head, worker = snap.nodes
    head.env[var] = "enp1s0f0np0" if var.endswith("IFNAME") else "INFO"
    worker.env[var] = "enp1s0" if var.endswith("IFNAME") else "WARN"
    board = fabric_checks(cfg(), snap, ex)
    [f] = only(board, "nccl-env-overwritten")
    assert (f.node, f.severity) == ("spark-2", severity)
    assert f"{var}: head '{head.env[var]}', spark-2 '{worker.env[var]}'" in f.message
    (ex["spark-1"].incontainer or {})["non_carry_over"]["vars"] = [var]
    assert only(fabric_checks(cfg(), snap, ex), "nccl-env-overwritten") == []


def test_head_only_variable_is_copied_too() -> None:
    snap, ex = pair()
    snap.nodes[0].env["NCCL_IB_HCA"] = "rocep1s0f0"
    [f] = only(fabric_checks(cfg(), snap, ex), "nccl-env-overwritten")
    assert "NCCL_IB_HCA: head 'rocep1s0f0', spark-2 unset" in f.message
    snap.nodes[0].env.pop("NCCL_IB_HCA")
    snap.nodes[1].env["NCCL_IB_HCA"] = "rocep1s0f0"  # the worker's own stays its own
    assert only(fabric_checks(cfg(), snap, ex), "nccl-env-overwritten") == []


def test_differing_env_for_restart() -> None:
    envs = {
        "a": {"NCCL_IB_HCA": "x", "NCCL_DEBUG": "INFO", "VLLM_HOST_IP": "1"},
        "b": {
            "NCCL_IB_HCA": "y",
            "NCCL_DEBUG": "INFO",
            "VLLM_HOST_IP": "2",
            "UCX_NET_DEVICES": "z",
        },
    }
    assert differing_env(cfg(), envs) == ["NCCL_IB_HCA", "UCX_NET_DEVICES"]


def _model(x: NodeExtras) -> dict:
    return (x.incontainer or {})["model"]


def test_model_truncated_missing_and_incomplete_on_the_worker() -> None:
    snap, ex = pair()
    ex["spark-2"].incontainer = copy.deepcopy(ex["spark-1"].incontainer)
    board = fabric_checks(cfg(), snap, ex)
    assert only(board, "model-incomplete") == []
    m = _model(ex["spark-2"])
    m["files"]["model-00002-of-00002.safetensors"] = 10
    m["incomplete"] = ["blobs/abc.incomplete"]
    board = fabric_checks(cfg(), snap, ex)
    [f] = only(board, "model-incomplete")
    assert f.node == "spark-2"
    assert f.message == (
        "model /models/tiny on spark-2: model-00002-of-00002.safetensors is "
        "10 bytes (2,000 elsewhere); blobs/abc.incomplete (an unfinished "
        "download)"
    )
    del m["files"]["model-00002-of-00002.safetensors"]
    m["missing"] = ["model-00002-of-00002.safetensors"]
    m["incomplete"] = []
    [f] = only(fabric_checks(cfg(), snap, ex), "model-incomplete")
    assert "model-00002-of-00002.safetensors missing" in f.message


def test_clock_offset_uses_the_round_trip() -> None:
    x = NodeExtras(clock=1000.5, clock_end=1001.5, sent_at=1000.0, received_at=1001.6)
    off, unc = clock_offset(x)  # type: ignore[misc]
    # 1.6 s round trip, 1.0 s of it on the node: 0.3 s each way
    assert off == pytest.approx(0.2) and unc == pytest.approx(0.3)
    assert clock_offset(NodeExtras()) is None


def test_clock_skew_beyond_a_second() -> None:
    snap, ex = pair()
    w = ex["spark-2"]
    assert w.clock is not None and w.clock_end is not None
    w.clock, w.clock_end = w.clock + 2.5, w.clock_end + 2.5
    [f] = only(fabric_checks(cfg(), snap, ex), "clock-skew")
    assert f.node == "spark-2" and f.message.startswith("spark-2's clock is +2.5 s off spark-1's")
    w.clock, w.clock_end = w.clock - 2.0, w.clock_end - 2.0  # 0.5 s: fine
    assert only(fabric_checks(cfg(), snap, ex), "clock-skew") == []


def test_shm_small_and_ipc_host() -> None:
    snap, ex = pair()
    (ex["spark-2"].incontainer or {})["shm_bytes"] = 64 << 20
    [f] = only(fabric_checks(cfg(), snap, ex), "shm-small")
    assert f.node == "spark-2" and "is 64 MiB (IpcMode private)" in f.message
    (ex["spark-2"].hostconfig or {})["IpcMode"] = "host"
    assert only(fabric_checks(cfg(), snap, ex), "shm-small") == []


def test_gpu_not_in_container_names_the_missing_runtime() -> None:
    snap, ex = pair()
    (ex["spark-2"].incontainer or {})["gpus"] = {"error": "nvidia-smi is not in the container"}
    [f] = only(fabric_checks(cfg(), snap, ex), "gpu-not-in-container")
    assert f.message == (
        "container ray-sl11 on spark-2 sees 0 of the host's 1 GPU(s) "
        "(nvidia-smi is not in the container); docker on spark-2 has no nvidia "
        "runtime (runtimes: io.containerd.runc.v2, "
        "io.containerd.runtime.v1.linux, runc)"
    )


def _rdma_pair(env: dict[str, str]):
    snap, ex = pair("lab_head_healthy", "lab_worker_rdma_standin")
    snap.nodes[1].env.update(env)
    return snap, ex


def test_rdma_without_devices_gid_index_empty_and_one_half_listed() -> None:
    snap, ex = _rdma_pair({"NCCL_IB_HCA": "rocep1s0f0", "NCCL_IB_GID_INDEX": ""})
    board = fabric_checks(cfg(), snap, ex)
    assert problems(board, ignore=()) == [
        ("gid-invalid", "spark-2"),
        ("rdma-not-in-container", "spark-2"),
        ("roce-port-down", "spark-2"),
        ("ulimit-low", "spark-1"),
        ("ulimit-low", "spark-2"),
        ("ulimit-low", "spark-2"),
    ]
    [gid] = only(board, "gid-invalid")
    assert gid.message.startswith(
        'NCCL_IB_GID_INDEX="" (empty, read as 0) on spark-2: GID 0 of rocep1s0f0 port 1 is fe80:'
    )
    assert "IB/RoCE v1" in gid.message and "is at index 3" in gid.message
    [half] = only(board, "roce-port-down")
    assert (
        half.severity == "warning"
        and "roceP2p1s0f0:1 also Up but not in NCCL_IB_HCA" in half.message
    )
    assert "NCCL_IB_HCA=roceP2p1s0f0,rocep1s0f0" in half.fix
    memlock = [f for f in only(board, "ulimit-low") if "ulimit -l" in f.message]
    assert [(f.node, f.severity) for f in memlock] == [("spark-2", "error")]


def test_rdma_listed_hca_missing_or_down() -> None:
    snap, ex = _rdma_pair({"NCCL_IB_HCA": "=mlx5_0,rocep1s0f1"})
    msgs = sorted(f.message for f in only(fabric_checks(cfg(), snap, ex), "roce-port-down"))
    assert msgs == [
        "NCCL_IB_HCA==mlx5_0,rocep1s0f1 on spark-2 names mlx5_0, which spark-2 does not have "
        "(it has: roceP2p1s0f0, roceP2p1s0f1, rocep1s0f0, rocep1s0f1)",
        "rocep1s0f1 port 1 (in NCCL_IB_HCA on spark-2) is DOWN",
    ]


def test_rdma_in_container_with_ipc_lock_is_fine() -> None:
    snap, ex = _rdma_pair({"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"})
    ic = ex["spark-2"].incontainer or {}
    ic["dev_infiniband"] = ["rdma_cm", "uverbs0"]
    (ex["spark-2"].hostconfig or {})["CapAdd"] = ["CAP_IPC_LOCK"]
    board = fabric_checks(cfg(), snap, ex)
    assert problems(board) == []
    assert board.cell("gid-invalid", "spark-2").value == "3: RoCE v2"
    # rdma_cm alone (what the H200 host has) is not enough for verbs
    ic["dev_infiniband"] = ["rdma_cm"]
    assert [f.id for f in only(fabric_checks(cfg(), snap, ex), "rdma-not-in-container")] == [
        "rdma-not-in-container"
    ]


def test_page_cache_pressure_only_when_available_memory_would_do() -> None:
    snap, ex = pair()
    text = CFG.replace('"0.05"', '"0.85"')
    m = ex["spark-1"].meminfo_kib
    m.update(
        MemTotal=100_000_000,
        MemFree=50_000_000,
        MemAvailable=90_000_000,
        Cached=38_000_000,
        Buffers=1_000_000,
    )
    [f] = only(fabric_checks(cfg(text), snap, ex), "page-cache-pressure")
    assert f.node == "spark-1" and f.severity == "warning"
    assert (
        "MemFree 48 GiB is below 0.85 x total = 81 GiB while MemAvailable is 86 GiB" in f.message
        and "drop_caches" in f.fix
        and "posix_fadvise" in f.fix
    )
    m.update(MemAvailable=60_000_000)  # not the page cache: insufficient-memory's business
    assert only(fabric_checks(cfg(text), snap, ex), "page-cache-pressure") == []
    snap.vllm.healthy = True  # serving: the memory is in use, as it should be
    m.update(MemAvailable=90_000_000)
    assert only(fabric_checks(cfg(text), snap, ex), "page-cache-pressure") == []


def test_ray_memory_monitor_on_unified_only() -> None:
    snap, ex = pair()
    snap.nodes[1].env.pop("RAY_memory_monitor_refresh_ms")
    [f] = only(fabric_checks(cfg(), snap, ex), "ray-memory-monitor-on")
    assert f.node == "spark-2" and "unset (Ray default 250)" in f.message
    snap.nodes[1].gpus = [Gpu(0, "NVIDIA H200", 1000, 143771, unified=False)]
    board = fabric_checks(cfg(), snap, ex)
    assert only(board, "ray-memory-monitor-on") == []
    assert board.cell("ray-memory-monitor-on", "spark-2").status == "n/a"


def test_port_exposed_vllm_with_and_without_api_key() -> None:
    from sparktui.core.probes.fabric import Listener

    snap, ex = pair()
    ex["spark-1"].listeners.append(Listener("0.0.0.0", 8000))
    ex["spark-1"].listeners.append(Listener("198.18.11.11", 8265))
    ex["spark-1"].listeners.append(Listener(HEAD_IP, 10001))  # on the interconnect: fine
    board = fabric_checks(cfg(), snap, ex)
    msgs = sorted(f.message for f in only(board, "port-exposed"))
    assert msgs == [
        "spark-1: Ray dashboard port 8265 listens on the management address 198.18.11.11: "
        "Ray has no authentication (jobs run code on every node, CVE-2023-48022)",
        "spark-1: vLLM API port 8000 listens on every address without --api-key: anyone who "
        "can reach it can use it",
    ]
    keyed = CFG.replace(
        'args: [--gpu-memory-utilization, "0.05"]',
        'args: [--gpu-memory-utilization, "0.05", --api-key, k]',
    )
    sev = {
        f.message.split(":")[1].strip(): f.severity
        for f in fabric_checks(cfg(keyed), snap, ex).findings
        if f.id == "port-exposed"
    }
    assert sev["vLLM API port 8000 listens on every address"] == "info"


def test_unreachable_node_is_na_everywhere() -> None:
    snap, ex = pair()
    snap.nodes[1].reachable = False
    board = fabric_checks(cfg(), snap, ex)
    assert {board.cell(c, "spark-2").status for c in CHECK_IDS} == {"n/a"}
    assert board.cell("shm-small", "spark-2").note == "unreachable"


def test_matrix_json_and_text() -> None:
    snap, ex = pair("lab_head_peer_ic_cut", "lab_worker_ic_cut")
    board = fabric_checks(cfg(), snap, ex)
    findings = list(board.findings)
    m = board.matrix(findings)
    assert m["nodes"] == ["spark-1", "spark-2"]
    assert [r["check"] for r in m["rows"]] == list(CHECK_IDS)
    row = next(r for r in m["rows"] if r["check"] == "peer-unreachable")
    assert row["odd_one_out"] == ["spark-2"] and row["scope"] == "cluster"
    cell = row["cells"]["spark-2"]
    assert cell["status"] == "fail" and cell["value"] == "enp1s0f0np0 down"
    assert findings[cell["findings"][0]].id == "peer-unreachable"
    assert row["cells"]["spark-1"]["status"] == "ok"
    json.dumps(m)
    text = render_matrix(m, ascii_only=True)
    line = next(ln for ln in text.splitlines() if ln.startswith("peer-unreachable"))
    assert line.split() == ["peer-unreachable", "ok", "FAIL", "spark-2"]
    assert "✗" in render_matrix(m)


# --- restart keeps per-node values out of vLLM's copy -----------------------------------


def test_restart_writes_non_carry_over_file_only_when_values_differ() -> None:
    from sparktui.core.actions.builtin import non_carry_over_names, restart_plan

    same = cfg()
    assert non_carry_over_names(same) == []
    assert all("NCCL" not in s.name for s in restart_plan(same).stages)
    differ = cfg(
        CFG.replace(
            "  - {name: spark-2, host: 198.18.11.12, ip: 198.19.11.12}\n",
            "  - {name: spark-2, host: 198.18.11.12, ip: 198.19.11.12,\n"
            "     container: {env: {NCCL_SOCKET_IFNAME: enp1s0, UCX_NET_DEVICES: mlx5_1:1}}}\n",
        )
    )
    assert non_carry_over_names(differ) == ["NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES"]
    plan = restart_plan(differ)
    titles = [s.name for s in plan.stages]
    i = titles.index("keep per-node NCCL/UCX/GLOO values")
    assert titles.index("start the Ray head") < i < titles.index("wait for the Ray cluster")
    steps = plan.stages[i].steps
    assert [s.node for s in steps] == ["spark-1", "spark-2"]
    argv = steps[0].commands[0].argv
    assert argv[:5] == ("docker", "exec", "ray-sl11", "python3", "-c")
    assert argv[-2:] == ("NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES")
    assert steps[0].commands[0].mutating


def test_non_carry_over_program_merges(tmp_path: Path) -> None:
    import subprocess
    import sys

    from sparktui.remote import script

    root = tmp_path / "vllm"
    root.mkdir()
    (root / "ray_non_carry_over_env_vars.json").write_text('["NCCL_IB_HCA"]')
    env = {"VLLM_CONFIG_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    cp = subprocess.run(
        [sys.executable, "-c", script("non_carry_over.py"), "NCCL_SOCKET_IFNAME"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads((root / "ray_non_carry_over_env_vars.json").read_text()) == [
        "NCCL_IB_HCA",
        "NCCL_SOCKET_IFNAME",
    ]
    assert cp.stdout.startswith(str(root / "ray_non_carry_over_env_vars.json"))


def test_serve_preflight_refuses_naming_every_error(monkeypatch) -> None:
    import asyncio

    from sparktui.core import actions
    from sparktui.core.actions.doctor import DoctorReport
    from sparktui.core.model import Finding

    found = [
        Finding(
            "shm-small",
            "error",
            "spark-2",
            "/dev/shm in container c on spark-2 is 64 MiB (IpcMode private)",
        ),
        Finding("mtu-mismatch", "error", "spark-2", "enp1s0f0np0 on spark-2 has MTU 1500"),
        Finding("clock-skew", "warning", "spark-2", "skew"),
    ]

    async def fake(cfg, transports):
        return DoctorReport(found)

    monkeypatch.setattr(actions, "run_doctor", fake)
    findings, stop = asyncio.run(actions.preflight("serve", cfg(), {}, None))
    assert stop is not None and stop.state == "aborted" and findings == found
    assert stop.message.startswith(
        "preflight found 2 problem(s): shm-small (spark-2), "
        "mtu-mismatch (spark-2); first: /dev/shm in container"
    )
    _, stop = asyncio.run(actions.preflight("serve", cfg(), {}, None, force=True))
    assert stop is None


def test_readme_lists_every_check_with_what_it_reads() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## `sparktui doctor`: the fabric", 1)[1].split("\n## ", 1)[0]
    rows = {
        line.split("|")[1].strip().strip("`"): line
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert sorted(rows) == sorted(CHECK_IDS)
    for check, line in rows.items():
        assert len([c for c in line.split("|") if c.strip()]) == 4, check


def test_runtime_overwrite_line_is_a_finding_naming_the_variable_and_both_values() -> None:
    """vLLM's worker log line (the NCCL_IB_HCA values as in sparkrun issue #135); the same
    line for a device variable vLLM sets per worker on purpose is not a finding."""
    from sparktui.knowledge.kb import load_builtin
    from sparktui.knowledge.matcher import Matcher
    from sparktui.knowledge.triage import diagnose_bytes

    log = (
        b"(RayWorkerWrapper pid=4242, ip=192.168.200.13) WARNING 04-12 10:00:01 "
        b"[__init__.py:733] Overwriting environment variable NCCL_IB_HCA from "
        b"'rocep1s0f0,roceP2p1s0f0' to 'rocep1s0f1,roceP2p1s0f1'\n"
        b"(RayWorkerWrapper pid=20612) WARNING 07-11 09:57:11 [__init__.py:733] Overwriting "
        b"environment variable ASCEND_RT_VISIBLE_DEVICES from '1' to '0,1'\n"
    )
    [f] = diagnose_bytes(log, Matcher(load_builtin()))
    assert (f.id, f.severity, f.line) == ("nccl.env_overwritten", "warning", 1)
    assert f.message == (
        "NCCL_IB_HCA was 'rocep1s0f0,roceP2p1s0f0' in a Ray worker and was "
        "replaced by the head's 'rocep1s0f1,roceP2p1s0f1'"
    )
    assert f.captures["node_ip"] == "192.168.200.13"
    assert "ray_non_carry_over_env_vars.json" in f.fix


def test_no_icmp_at_all_is_not_a_down_peer() -> None:
    snap, ex = pair()
    peer = (ex["spark-1"].net or {})["peers"][WORKER_IP]
    peer["icmp"] = peer["df"] = "unavailable: no ICMP socket: [Errno 1] Operation not permitted"
    board = fabric_checks(cfg(), snap, ex)
    assert only(board, "peer-unreachable") == [] and only(board, "mtu-mismatch") == []
    cell = board.cell("peer-unreachable", "spark-1")
    assert cell.status == "ok" and cell.note.startswith("ICMP not checked (unavailable")


def test_doctor_net_falls_back_to_the_nodes_ping(tmp_path: Path) -> None:
    """Without an ICMP socket (no root, no ping_group_range) the node's own ping answers;
    here a stand-in ping that records its argv."""
    import os

    from sparktui.remote import script

    fake = tmp_path / "ping"
    fake.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' "$*" >> "$0.argv"\n'
        "case \"$*\" in *-M\\ do*) echo '1 packets transmitted, 0 received'; "
        "exit 1;; esac\nexit 0\n"
    )
    fake.chmod(0o755)
    ns: dict = {"__name__": "doctor_net"}
    exec(compile(script("doctor_net.py"), "doctor_net.py", "exec"), ns)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{tmp_path}:{old}"
    try:
        assert ns["ping_binary"]("198.19.11.12", 56, False, "why") is True
        assert ns["ping_binary"]("198.19.11.12", 8972, True, "why") == (
            "no reply in 1s (1 packets transmitted, 0 received)"
        )
    finally:
        os.environ["PATH"] = old
    argv = (tmp_path / "ping.argv").read_text().splitlines()
    assert argv == ["-n -c 1 -W 1 -s 56 198.19.11.12", "-n -c 1 -W 1 -s 8972 -M do 198.19.11.12"]
    os.environ["PATH"] = str(tmp_path / "nothing")
    try:
        assert (
            ns["ping_binary"]("198.19.11.12", 56, False, "no ICMP socket: x")
            == "unavailable: no ICMP socket: x"
        )
    finally:
        os.environ["PATH"] = old
