"""The lab itself: real sshd, dockerd and Ray across network namespaces on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sparktui import config as sconfig
from tests.lab import faults, network, proc
from tests.lab import lab as labmod
from tests.lab import node as nodemod
from tests.lab.state import EXT_IF, IC_IF, STATE_ROOT, Lab

pytestmark = pytest.mark.lab

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
PROBE_GPU = (
    "nvidia-smi --query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu "
    "--format=csv,noheader,nounits"
)
PROBE_APPS = (
    "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
)


def _tcp(lab: Lab, node: str, host: str, port: int, timeout: float = 2.0) -> str:
    """Connect from inside `node` to host:port; 'ok' or the error text."""
    code = (
        f"import socket\ns=socket.socket();s.settimeout({timeout!r})\n"
        f"try:\n s.connect(({host!r},{port}));print('ok')\n"
        "except Exception as e:\n print(e)\n"
    )
    return lab.exec(node, ["python3", "-c", code]).stdout.strip()


def _node_processes(lab: Lab) -> list[int]:
    pids = []
    for n in lab.nodes:
        if n.init_pid and proc.alive(n.init_pid):
            pids += [n.init_pid, *proc.descendants(n.init_pid)]
    return pids


# ---------------------------------------------------------------------------------- shape


def test_config_is_valid_sparktui_config(lab: Lab) -> None:
    cfg = sconfig.load(str(lab.config_path))
    assert cfg.cluster_name == "lab"
    assert [(n.name, n.host, n.ip, n.role) for n in cfg.nodes] == [
        (n.name, n.ext_ip, n.ic_ip, n.role) for n in lab.nodes
    ]
    assert cfg.head.name == "spark-1"
    assert cfg.ssh.user == "root"
    assert Path(cfg.ssh.identity_file) == lab.key_path
    assert Path(cfg.ssh.known_hosts) == lab.known_hosts
    assert cfg.container.name == lab.container and cfg.container.image == lab.image
    assert cfg.container.run_args == ["--gpus", "all", "--network", "host", "--shm-size", "1g"]
    assert cfg.ray.port == 6379 and cfg.ray.extra_args == ["--num-cpus", "1"]


def test_nodes_have_spark_nics_and_default_route_external(lab: Lab) -> None:
    for n in lab.nodes:
        out = lab.exec(n, ["ip", "-4", "-o", "addr"]).stdout
        assert f"{EXT_IF}    inet {n.ext_ip}/24" in out
        assert f"{IC_IF}    inet {n.ic_ip}/24" in out
        route = lab.exec(n, ["ip", "route", "get", "8.8.8.8"]).stdout
        assert f"dev {EXT_IF} src {n.ext_ip}" in route


def test_egress_guard_keeps_traffic_in_the_lab(lab: Lab) -> None:
    a, b = lab.nodes[0], lab.nodes[1]
    assert _tcp(lab, a.name, b.ic_ip, 22) == "ok"
    assert _tcp(lab, a.name, b.ext_ip, 22) == "ok"
    assert "ok" != _tcp(lab, a.name, "8.8.8.8", 53)
    rules = lab.exec(a, ["iptables", "-S", "OUTPUT"]).stdout
    assert "-A OUTPUT -d 198.18.0.0/15 -j ACCEPT" in rules
    assert "-A OUTPUT -j REJECT" in rules


def test_ssh_with_generated_key_and_known_hosts(lab: Lab) -> None:
    for n in lab.nodes:
        t0 = time.monotonic()
        cp = lab.ssh(n, "hostname; echo $HOME; docker ps --format '{{.Names}}'")
        assert cp.stdout.split() == [n.name, "/root", lab.container]
        assert time.monotonic() - t0 < 20
    # a host key the known_hosts file does not vouch for is refused
    bad = lab.path / "known_hosts.empty"
    bad.write_text("")
    argv = lab.ssh_argv(lab.head, "true")
    argv[argv.index(f"UserKnownHostsFile={lab.known_hosts}")] = f"UserKnownHostsFile={bad}"
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode != 0


def test_docker_ps_lists_only_the_nodes_own_container(lab: Lab) -> None:
    ids = set()
    for n in lab.nodes:
        rows = [
            json.loads(line)
            for line in lab.docker(
                n, "ps", "-a", "--no-trunc", "--size=false", "--format", "{{json .}}"
            ).stdout.splitlines()
        ]
        assert [r["Names"] for r in rows] == [lab.container]
        assert rows[0]["State"] == "running" and rows[0]["Image"] == lab.image
        ids.add(rows[0]["ID"])
        env = json.loads(
            lab.docker(n, "inspect", "-f", "{{json .Config.Env}}", lab.container).stdout
        )
        assert f"VLLM_HOST_IP={n.ic_ip}" in env
        assert f"NCCL_SOCKET_IFNAME={IC_IF}" in env and f"GLOO_SOCKET_IFNAME={IC_IF}" in env
    assert len(ids) == len(lab.nodes)


# ---------------------------------------------------------------------------------- ray


def test_pin_all_registers_every_node_on_the_interconnect(lab: Lab) -> None:
    table = [r for r in lab.ray_nodes() if r["Alive"]]
    by_ip = {r["NodeManagerAddress"]: r for r in table}
    assert sorted(by_ip) == sorted(n.ic_ip for n in lab.nodes)
    assert "node:__internal_head__" in by_ip[lab.head.ic_ip]["Resources"]
    for r in table:
        assert r["Resources"]["GPU"] == 1.0 and r["Resources"]["CPU"] == 1.0
        assert r["Resources"][f"node:{r['NodeManagerAddress']}"] == 1.0


def test_worker_only_registers_head_external_and_worker_interconnect(lab_worker_only: Lab) -> None:
    lab = lab_worker_only
    table = [r for r in lab.ray_nodes() if r["Alive"]]
    by_ip = {r["NodeManagerAddress"]: r for r in table}
    head, worker = lab.head, lab.workers[0]
    assert sorted(by_ip) == sorted([head.ext_ip, worker.ic_ip])
    assert "node:__internal_head__" in by_ip[head.ext_ip]["Resources"]
    assert "node:__internal_head__" not in by_ip[worker.ic_ip]["Resources"]
    # the containers still say VLLM_HOST_IP = interconnect: the real mismatch
    env = json.loads(
        lab.docker(head, "inspect", "-f", "{{json .Config.Env}}", lab.container).stdout
    )
    assert f"VLLM_HOST_IP={head.ic_ip}" in env


# ---------------------------------------------------------------------------------- gpu


def test_nvidia_smi_gb10_default(lab: Lab) -> None:
    n = lab.head
    out = lab.ssh(n, PROBE_GPU).stdout
    assert out.startswith("0, NVIDIA GB10, GPU-") and out.rstrip().endswith(", [N/A], [N/A], 0")
    assert lab.ssh(n, PROBE_APPS).stdout == ""
    assert "Not Supported" in lab.ssh(n, "nvidia-smi").stdout
    # inside the container too (the hook stand-in put it there at `docker run --gpus all`)
    inner = lab.docker(n, "exec", lab.container, "nvidia-smi", "-L").stdout
    assert inner.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


def test_nvidia_smi_h200_mode_prints_the_real_formats(lab: Lab) -> None:
    n = lab.workers[0]
    try:
        lab.set_gpu_mode(n, "h200")
        table = lab.ssh(n, "nvidia-smi").stdout.splitlines()
        assert table[1:] == (FIX / "h200_idle.txt").read_text().splitlines()[1:]
        assert lab.ssh(n, PROBE_GPU).stdout.startswith("0, NVIDIA H200, GPU-")
        lab.set_gpu_mode(n, "h200", apps=[(501, "python3", 19684)])
        busy = (FIX / "h200_busy_queries.txt").read_text().splitlines()
        assert lab.ssh(n, "nvidia-smi").stdout.splitlines()[1:] == busy[2:21]
        gpu = lab.ssh(n, PROBE_GPU).stdout.strip().split(", ")
        assert gpu[1:] == ["NVIDIA H200", gpu[2], "19693", "143771", "0"]
        assert lab.ssh(n, PROBE_APPS).stdout == "501, python3, 19684\n"
        hdr = lab.ssh(
            n, "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
        ).stdout
        assert hdr.splitlines() == busy[-2:]
        q = lab.ssh(
            n, "nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv"
        ).stdout.splitlines()
        assert q[0] == (FIX / "h200_query_header.csv").read_text().splitlines()[0]
        assert "<product_name>NVIDIA H200</product_name>" in lab.ssh(n, "nvidia-smi -q -x").stdout
    finally:
        lab.set_gpu_mode(n, "gb10")
    assert "NVIDIA GB10" in lab.ssh(n, "nvidia-smi -L").stdout


def test_files_on_nodes_and_in_containers(lab: Lab) -> None:
    n = lab.workers[0]
    lab.append_line(n, "/tmp/lab-test/a.log", "first")
    lab.append_line(n, "/tmp/lab-test/a.log", "second")
    assert lab.ssh(n, "cat /tmp/lab-test/a.log").stdout == "first\nsecond\n"
    assert (
        not Path("/tmp/lab-test/a.log").exists()
        or Path("/tmp/lab-test/a.log").read_text() != "first\nsecond\n"
    )
    lab.append_line(n, "/tmp/x/c.log", "in the container", container=lab.container)
    assert (
        lab.docker(n, "exec", lab.container, "cat", "/tmp/x/c.log").stdout == "in the container\n"
    )


# ---------------------------------------------------------------------------------- faults


def test_fault_sshd_stop_start(healthy_lab: Lab) -> None:
    lab, n = healthy_lab, healthy_lab.workers[0]
    pids = faults.stop_sshd(lab, n)
    assert pids and not any(proc.alive(p) for p in pids)
    assert lab.ssh(n, "true", check=False).returncode == 255
    assert _tcp(lab, lab.head.name, n.ext_ip, 22) != "ok"
    faults.start_sshd(lab, n)
    assert lab.ssh(n, "hostname").stdout.strip() == n.name


def test_fault_cut_restore_link(healthy_lab: Lab) -> None:
    lab, n = healthy_lab, healthy_lab.workers[0]
    faults.cut_link(lab, n, "ic")
    try:
        assert _tcp(lab, lab.head.name, n.ic_ip, 22, timeout=1.0) != "ok"
        assert _tcp(lab, lab.head.name, n.ext_ip, 22) == "ok"
        assert "NO-CARRIER" in lab.exec(n, ["ip", "link", "show", IC_IF]).stdout
    finally:
        faults.restore_link(lab, n, "ic")
    proc.wait_for(lambda: _tcp(lab, lab.head.name, n.ic_ip, 22) == "ok", 30, 0.2, "link back")
    faults.cut_link(lab, n, "ext")
    try:
        assert lab.ssh(n, "true", check=False, timeout=20).returncode == 255
    finally:
        faults.restore_link(lab, n, "ext")
    proc.wait_for(lambda: lab.ssh(n, "true", check=False).returncode == 0, 30, 0.2, "ssh back")


def test_fault_kill_raylet(healthy_lab: Lab) -> None:
    lab, n = healthy_lab, healthy_lab.workers[0]
    killed = faults.kill_raylet(lab, n)
    assert killed and not any(proc.alive(p) for p in killed)
    assert not faults.raylet_pids(lab, n) or set(faults.raylet_pids(lab, n)).isdisjoint(killed)
    # `ray start --block` notices and exits, so does the container
    proc.wait_for(
        lambda: (
            lab.docker(n, "inspect", "-f", "{{.State.Status}}", lab.container).stdout.strip()
            == "exited"
        ),
        120,
        0.5,
        "container exit after raylet death",
    )
    faults.start_container(lab, n)
    proc.wait_for(
        lambda: (
            n.ic_ip in {r["NodeManagerAddress"] for r in lab.ray_nodes() if r["Alive"]}
            and faults.raylet_pids(lab, n)
        ),
        240,
        1,
        "worker back in Ray",
    )


def test_fault_restart_dockerd(healthy_lab: Lab) -> None:
    lab, n = healthy_lab, healthy_lab.workers[0]
    before = nodemod.daemon_pids(n, "dockerd")
    faults.restart_dockerd(lab, n)
    after = nodemod.daemon_pids(n, "dockerd")
    assert before and after and set(before).isdisjoint(after)
    status = lab.docker(n, "inspect", "-f", "{{.State.Status}}", lab.container).stdout.strip()
    assert status == "exited"
    assert lab.ssh(n, "docker ps -q").stdout == ""
    faults.start_container(lab, n)
    assert (
        lab.docker(n, "inspect", "-f", "{{.State.Status}}", lab.container).stdout.strip()
        == "running"
    )


def test_fault_stop_start_container(healthy_lab: Lab) -> None:
    lab, n = healthy_lab, healthy_lab.workers[0]
    faults.stop_container(lab, n, timeout=2)
    assert lab.ssh(n, "docker ps -q").stdout == ""
    faults.start_container(lab, n)
    assert lab.ssh(n, "docker ps --format '{{.Names}}'").stdout.split() == [lab.container]


def test_heal_restores_a_whole_cluster(healthy_lab: Lab) -> None:
    lab = healthy_lab
    alive = {r["NodeManagerAddress"] for r in lab.ray_nodes() if r["Alive"]}
    assert alive == {n.ic_ip for n in lab.nodes}
    for n in lab.nodes:
        assert nodemod.daemon_pids(n, "sshd") and nodemod.daemon_pids(n, "dockerd")


# ---------------------------------------------------------------------------------- lifecycle


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.lab", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_two_labs_side_by_side_and_down_leaves_nothing(lab: Lab) -> None:
    labmod_preflight = labmod.preflight()
    assert labmod_preflight is None
    # one lab from the CLI, one from the API, at the same time, next to the session lab
    with ThreadPoolExecutor(2) as pool:
        cli_future = pool.submit(_cli, "up", "--no-ray", "--nodes", "2")
        api = labmod.up(nodes=2, ray=False, owner_pid=os.getpid())
        cli = cli_future.result()
    try:
        assert cli.returncode == 0, cli.stderr
        config_path = cli.stdout.strip().splitlines()[-1]
        other = Lab.load(Path(config_path).parent.name)
        assert Path(config_path) == other.config_path and other.config_path.exists()
        labs = [lab, api, other]
        assert len({x.id for x in labs}) == 3 and len({x.k for x in labs}) == 3
        netns = [n.netns for x in labs for n in x.nodes]
        assert len(set(netns)) == len(netns)
        for x in (api, other):
            for n in x.nodes:
                assert x.ssh(n, "hostname").stdout.strip() == n.name
                assert x.docker(n, "ps", "-q").stdout == ""  # none of the session lab's
        status = _cli("status", other.id)
        assert status.returncode == 0 and "spark-2" in status.stdout
    finally:
        api_pids = _node_processes(api)
        other_pids = _node_processes(other) if "other" in locals() else []
        labmod.down(api)
        if "other" in locals():
            down = _cli("down", other.id)
            assert down.returncode == 0, down.stderr
    for x, pids in ((api, api_pids), (other, other_pids)):
        assert network.leftovers(x) == []
        assert pids and not any(proc.alive(p) for p in pids)
        assert not x.path.exists()
        assert x.id not in os.listdir(STATE_ROOT)
    # the session lab was not touched
    assert network.leftovers(lab) != []
    assert lab.ssh(lab.head, "hostname").stdout.strip() == lab.head.name


def test_ray_lab_down_leaves_nothing(lab_factory) -> None:
    x = lab_factory(nodes=2, pin="none")
    table = [r for r in x.ray_nodes() if r["Alive"]]
    # pin none: head on its default-route (external) IP, worker on the IP towards the head
    assert sorted(r["NodeManagerAddress"] for r in table) == sorted(
        [x.head.ext_ip, x.workers[0].ic_ip]
    )
    pids = _node_processes(x)
    assert any(proc.comm(p) == "raylet" for p in pids)
    t0 = time.monotonic()
    labmod.down(x)
    assert time.monotonic() - t0 < 60
    assert network.leftovers(x) == []
    assert not any(proc.alive(p) for p in pids)
    assert not x.path.exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert x.dir not in mounts
