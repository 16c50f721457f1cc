"""`sparktui doctor` on the lab with real faults injected, one at a time: each is reported
with the right check id, node and values within one doctor run, and is gone when the fault
is undone; a healthy lab gives none of them, and a run over 2 nodes takes <= 10 s.

Real faults: an MTU of 1500 on one end of a jumbo interconnect, the interconnect cable
pulled while management stays, a container with --shm-size 64m, a different
NCCL_SOCKET_IFNAME in the worker's container, a model shard truncated on the worker, a
port bound on 0.0.0.0, a container started without --gpus. RDMA cannot exist here: the
RoCE devices, GIDs and ibdev2netdev are stand-ins printing a DGX Spark's real formats
(tests/lab/rdma.py says from where), and the container's /dev/infiniband holds character
devices with the real numbers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparktui.core.actions.fabric import CHECK_IDS
from tests.lab import faults, rdma
from tests.lab import ray as raymod
from tests.lab.state import IC_IF, Lab

pytestmark = pytest.mark.lab

MODEL = "/models/tiny"
SHARDS = {"model-00001-of-00002.safetensors": 300_000, "model-00002-of-00002.safetensors": 200_000}


def _doctor(cfg: Path) -> tuple[dict, float]:
    t0 = time.monotonic()
    cp = subprocess.run(
        [sys.executable, "-m", "sparktui", "doctor", "--json", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    assert cp.returncode in (0, 1), cp.stderr
    return json.loads(cp.stdout), took


def _fabric(report: dict, severities=("error", "warning")) -> list[dict]:
    return [f for f in report["findings"] if f["id"] in CHECK_IDS and f["severity"] in severities]


def _of(report: dict, check: str) -> list[dict]:
    return [f for f in _fabric(report) if f["id"] == check]


def _row(report: dict, check: str) -> dict:
    return next(r for r in report["matrix"]["rows"] if r["check"] == check)


def _hard_nofile(lab: Lab) -> int:
    out = lab.sh(lab.head, "ulimit -Hn").stdout.strip()
    return 1 << 30 if out == "unlimited" else int(out)


def _expected_noise(lab: Lab, report: dict) -> list[dict]:
    """ulimit-low for open files, where this machine cannot give a container 65536 (the
    lab's dockerd inherits its hard limit): checked to say the real value, then ignored."""
    hard = _hard_nofile(lab)
    noise = [f for f in _of(report, "ulimit-low") if "ulimit -n" in f["message"]]
    if hard < 65536:
        for f in noise:
            assert f"ulimit -n is {hard} " in f["message"] and f["severity"] == "warning"
        return noise
    return []


def _problems(lab: Lab, report: dict) -> list[tuple[str, str | None, str]]:
    noise = _expected_noise(lab, report)
    return [(f["id"], f["node"], f["message"]) for f in _fabric(report) if f not in noise]


def _container(
    lab: Lab, node: str, run_args: list[str] | None = None, env: dict[str, str] | None = None
) -> None:
    """Recreate the node's Ray container with other run args / extra env (as an operator's
    own launch script would)."""
    n = lab.node(node)
    full_env = {**raymod.container_env(n), **(env or {})}
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        lab.container,
        *(raymod.RUN_ARGS if run_args is None else run_args),
        *[a for k, v in full_env.items() for a in ("-e", f"{k}={v}")],
        lab.image,
        *raymod.ray_start_args(lab, n),
    ]
    lab.docker(n, "rm", "-f", lab.container, check=False)
    lab.exec(n, argv)


def _make_model(lab: Lab, node: str, truncate: str | None = None) -> None:
    index = {
        "metadata": {"total_size": sum(SHARDS.values())},
        "weight_map": {f"layer.{i}.weight": name for i, name in enumerate(SHARDS)},
    }
    script = [
        f"mkdir -p {MODEL}",
        f"printf '%s' '{json.dumps(index)}' > {MODEL}/model.safetensors.index.json",
    ]
    for name, size in SHARDS.items():
        script.append(f"head -c {size} /dev/zero > {MODEL}/{name}")
    if truncate:
        script.append(f"truncate -s 1000 {MODEL}/{truncate}")
    lab.docker(node, "exec", lab.container, "sh", "-c", " && ".join(script))


@pytest.fixture(scope="module")
def dlab(lab: Lab, tmp_path_factory) -> Lab:
    faults.heal(lab)
    d = yaml.safe_load(lab.config_path.read_text())
    # A local model (model-incomplete) and a small share of memory, so that this machine's
    # own page cache cannot make page-cache-pressure fire on the healthy lab.
    d["vllm"] = {"model": MODEL, "args": ["--gpu-memory-utilization", "0.05"]}
    cfg = tmp_path_factory.mktemp("doctor") / "sparktui.yaml"
    cfg.write_text(yaml.safe_dump(d))
    lab.doctor_cfg = cfg  # type: ignore[attr-defined]
    for n in lab.nodes:
        _make_model(lab, n.name)
    yield lab
    for n in lab.nodes:
        rdma.remove(lab, n)
    faults.heal(lab)
    for n in lab.nodes:  # the containers this module changed, back as the lab made them
        raymod.start_node(lab, n)
    raymod.wait_alive(lab, 180)


def test_healthy_lab_gives_none_within_10s(dlab: Lab) -> None:
    report, took = _doctor(dlab.doctor_cfg)
    assert took <= 10, f"doctor took {took:.1f}s"
    assert _problems(dlab, report) == []
    m = report["matrix"]
    assert m["nodes"] == ["spark-1", "spark-2"]
    assert [r["check"] for r in m["rows"]] == list(CHECK_IDS)
    for r in m["rows"]:
        if r["check"] != "ulimit-low":
            assert {c["status"] for c in r["cells"].values()} <= {"ok", "n/a"}, r
    for check in (
        "gpu-not-in-container",
        "shm-small",
        "peer-unreachable",
        "mtu-mismatch",
        "version-mismatch",
        "nccl-env-overwritten",
        "model-incomplete",
        "clock-skew",
        "ray-memory-monitor-on",
        "port-exposed",
    ):
        assert {c["status"] for c in _row(report, check)["cells"].values()} == {"ok"}, check
    assert _row(report, "mtu-mismatch")["cells"]["spark-2"]["value"] == "1500"
    assert _row(report, "gpu-not-in-container")["cells"]["spark-1"]["value"] == "1/1"
    assert _row(report, "rdma-not-in-container")["cells"]["spark-1"]["status"] == "n/a"


def test_mtu_1500_on_one_end_of_a_jumbo_interconnect(dlab: Lab) -> None:
    try:
        for n in dlab.nodes:
            faults.set_mtu(dlab, n, 9000, ends="both")
        report, _ = _doctor(dlab.doctor_cfg)
        assert _of(report, "mtu-mismatch") == []
        assert _row(report, "mtu-mismatch")["cells"]["spark-1"]["value"] == "9000"

        faults.set_mtu(dlab, "spark-2", 1500)  # what a firmware capsule reboot did
        report, took = _doctor(dlab.doctor_cfg)
        assert took <= 10
        [f] = _of(report, "mtu-mismatch")
        assert f["node"] == "spark-2" and f["severity"] == "error"
        assert f"{IC_IF} on spark-2 has MTU 1500, spark-1 9000" in f["message"]
        assert "Don't Fragment from spark-1 gets no reply" in f["message"]
        assert "mtu 9000 on spark-2" in f["fix"]
        row = _row(report, "mtu-mismatch")
        assert row["odd_one_out"] == ["spark-2"]
        assert row["cells"]["spark-2"]["status"] == "fail"
        assert row["cells"]["spark-1"]["status"] == "ok"

        faults.set_mtu(dlab, "spark-2", 9000)
        report, _ = _doctor(dlab.doctor_cfg)
        assert _of(report, "mtu-mismatch") == []
    finally:
        for n in dlab.nodes:
            faults.set_mtu(dlab, n, 1500, ends="both")


def test_interconnect_cut_while_management_stays(dlab: Lab) -> None:
    faults.cut_link(dlab, "spark-2", "ic")
    try:
        report, took = _doctor(dlab.doctor_cfg)
        assert took <= 10
        assert all(n["id"] != "node-unreachable" for n in report["findings"])
        found = _of(report, "peer-unreachable")
        assert [(f["node"], f["severity"]) for f in found] == [("spark-2", "error")]
        assert (
            f"the interconnect {IC_IF} ({dlab.node('spark-2').ic_ip}) on spark-2 has no "
            f"link" in found[0]["message"]
        )
        assert _row(report, "peer-unreachable")["odd_one_out"] == ["spark-2"]
    finally:
        faults.restore_link(dlab, "spark-2", "ic")
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "peer-unreachable") == []


def test_container_with_64m_shm(dlab: Lab) -> None:
    _container(
        dlab, "spark-2", run_args=["--gpus", "all", "--network", "host", "--shm-size", "64m"]
    )
    try:
        report, _ = _doctor(dlab.doctor_cfg)
        [f] = _of(report, "shm-small")
        assert f["node"] == "spark-2" and f["severity"] == "error"
        assert "/dev/shm in container" in f["message"] and "is 64 MiB (IpcMode " in f["message"]
        assert "--ipc host" in f["fix"]
        assert _row(report, "shm-small")["cells"]["spark-1"]["value"] == "1 GiB"
    finally:
        raymod.start_node(dlab, dlab.node("spark-2"))
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "shm-small") == []


def test_different_nccl_socket_ifname_on_the_worker(dlab: Lab) -> None:
    _container(dlab, "spark-2", env={"NCCL_SOCKET_IFNAME": "enp1s0"})
    nco = "/root/.config/vllm/ray_non_carry_over_env_vars.json"
    try:
        report, _ = _doctor(dlab.doctor_cfg)
        [f] = _of(report, "nccl-env-overwritten")
        assert f["node"] == "spark-2" and f["severity"] == "error"
        assert (f"NCCL_SOCKET_IFNAME: head '{IC_IF}', spark-2 'enp1s0'") in f["message"]
        assert "ray_non_carry_over_env_vars.json" in f["fix"]
        assert _row(report, "nccl-env-overwritten")["odd_one_out"] == ["spark-2"]
        # The remedy: the head's vLLM keeps the name out of what it copies.
        dlab.docker(
            "spark-1",
            "exec",
            dlab.container,
            "sh",
            "-c",
            f"mkdir -p /root/.config/vllm && echo '[\"NCCL_SOCKET_IFNAME\"]' > {nco}",
        )
        report, _ = _doctor(dlab.doctor_cfg)
        assert _of(report, "nccl-env-overwritten") == []
    finally:
        dlab.docker("spark-1", "exec", dlab.container, "rm", "-f", nco, check=False)
        raymod.start_node(dlab, dlab.node("spark-2"))
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "nccl-env-overwritten") == []


def test_shard_truncated_on_the_worker(dlab: Lab) -> None:
    for n in dlab.nodes:
        _make_model(dlab, n.name)
    short = "model-00002-of-00002.safetensors"
    _make_model(dlab, "spark-2", truncate=short)
    try:
        report, _ = _doctor(dlab.doctor_cfg)
        [f] = _of(report, "model-incomplete")
        assert f["node"] == "spark-2" and f["severity"] == "error"
        assert f"{short} is 1,000 bytes (200,000 elsewhere)" in f["message"]
        assert _row(report, "model-incomplete")["odd_one_out"] == ["spark-2"]
    finally:
        _make_model(dlab, "spark-2")
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "model-incomplete") == []
    assert _row(report, "model-incomplete")["cells"]["spark-2"]["value"] == "2 file(s)"


def test_port_bound_on_all_addresses(dlab: Lab) -> None:
    port = 8265  # the Ray dashboard's
    pid = dlab.sh(
        "spark-1",
        (
            "nohup python3 -c 'import socket,time; s=socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f's.bind(("0.0.0.0", {port})); s.listen(); time.sleep(120)\' '
            ">/dev/null 2>&1 & echo $!"
        ),
    ).stdout.strip()
    try:
        time.sleep(0.5)
        report, _ = _doctor(dlab.doctor_cfg)
        found = [f for f in _of(report, "port-exposed")]
        assert [(f["node"], f["severity"]) for f in found] == [("spark-1", "warning")]
        assert f"Ray dashboard port {port} listens on every address" in found[0]["message"]
        assert _row(report, "port-exposed")["cells"]["spark-1"]["status"] == "fail"
    finally:
        dlab.sh("spark-1", f"kill {int(pid)}", check=False)
    time.sleep(0.5)
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "port-exposed") == []


def test_container_without_gpus(dlab: Lab) -> None:
    _container(dlab, "spark-2", run_args=["--network", "host", "--shm-size", "1g"])
    try:
        report, _ = _doctor(dlab.doctor_cfg)
        [f] = _of(report, "gpu-not-in-container")
        assert f["node"] == "spark-2" and f["severity"] == "error"
        assert "sees 0 of the host's 1 GPU(s) (nvidia-smi is not in the container)" in f["message"]
        # the lab's dockerd has only runc: GPUs come through the prestart hook
        assert "has no nvidia runtime (runtimes: io.containerd.runc.v2" in f["message"]
    finally:
        raymod.start_node(dlab, dlab.node("spark-2"))
    report, _ = _doctor(dlab.doctor_cfg)
    assert _of(report, "gpu-not-in-container") == []


def test_rdma_stand_in_without_and_with_the_devices(dlab: Lab) -> None:
    """Stand-in RoCE devices (DGX Spark formats, tests/lab/rdma.py) on spark-2."""
    rdma.install(dlab, "spark-2")
    try:
        _container(
            dlab, "spark-2", env={"NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1", "NCCL_IB_GID_INDEX": "1"}
        )
        report, _ = _doctor(dlab.doctor_cfg)
        got = {(f["id"], f["node"]) for f in _fabric(report)}
        assert {
            ("rdma-not-in-container", "spark-2"),
            ("roce-port-down", "spark-2"),
            ("gid-invalid", "spark-2"),
        } <= got
        assert not any(node == "spark-1" for check, node in got if check != "ulimit-low")
        [down] = _of(report, "roce-port-down")
        assert "rocep1s0f1 port 1 (in NCCL_IB_HCA on spark-2) is DOWN" in down["message"]
        [gid] = _of(report, "gid-invalid")
        assert gid["message"].startswith(
            "NCCL_IB_GID_INDEX=1 on spark-2: GID 1 of rocep1s0f0 port 1 is fe80:"
        )
        assert (
            "(RoCE v2), not a RoCE v2 IPv4 GID; the RoCE v2 IPv4 GID of rocep1s0f0 is at "
            "index 3" in gid["message"]
        )
        assert "NCCL_IB_GID_INDEX=3" in gid["fix"]
        [nodev] = _of(report, "rdma-not-in-container")
        assert nodev["severity"] == "error" and "has no /dev/infiniband" in nodev["message"]
        memlock = [f for f in _of(report, "ulimit-low") if "ulimit -l" in f["message"]]
        assert [f["node"] for f in memlock] == ["spark-2"]

        # Fixed: the devices, IPC_LOCK, both halves of the cabled port, the IPv4 RoCE v2 GID.
        _container(
            dlab,
            "spark-2",
            run_args=[
                *raymod.RUN_ARGS,
                *rdma.uverbs_device_args(dlab, "spark-2"),
                "--cap-add",
                "IPC_LOCK",
            ],
            env={"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0", "NCCL_IB_GID_INDEX": "3"},
        )
        report, _ = _doctor(dlab.doctor_cfg)
        assert _problems(dlab, report) == []
        assert (
            _row(report, "roce-port-down")["cells"]["spark-2"]["value"]
            == "rocep1s0f0:1,roceP2p1s0f0:1"
        )
        assert _row(report, "gid-invalid")["cells"]["spark-2"]["value"] == "3: RoCE v2"
    finally:
        rdma.remove(dlab, "spark-2")
        raymod.start_node(dlab, dlab.node("spark-2"))


def test_restart_writes_non_carry_over_when_per_node_values_differ(
    dlab: Lab, tmp_path: Path
) -> None:
    """The remedy done by sparktui itself: a config giving the worker its own
    NCCL_SOCKET_IFNAME; `restart` writes the name to ray_non_carry_over_env_vars.json in
    the containers, and doctor then has nothing to say about it."""
    d = yaml.safe_load(dlab.doctor_cfg.read_text())
    d["nodes"][1]["container"] = {"env": {"NCCL_SOCKET_IFNAME": "enp1s0"}}
    cfg = tmp_path / "per-node.yaml"
    cfg.write_text(yaml.safe_dump(d))
    cp = subprocess.run(
        [sys.executable, "-m", "sparktui", "restart", "--yes", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert (
        "keep per-node NCCL/UCX/GLOO values" in cp.stderr
        or "ray_non_carry_over_env_vars.json" in cp.stderr
    )
    for n in ("spark-1", "spark-2"):
        text = dlab.docker(
            n, "exec", dlab.container, "cat", "/root/.config/vllm/ray_non_carry_over_env_vars.json"
        ).stdout
        assert json.loads(text) == ["NCCL_SOCKET_IFNAME"]
    report, _ = _doctor(cfg)
    assert _of(report, "nccl-env-overwritten") == []
    assert _row(report, "nccl-env-overwritten")["cells"]["spark-2"]["status"] == "ok"
    env = dlab.docker(
        "spark-2", "exec", dlab.container, "sh", "-c", "echo $NCCL_SOCKET_IFNAME"
    ).stdout.strip()
    assert env == "enp1s0"  # the fault is there; only vLLM's copy is kept off it
