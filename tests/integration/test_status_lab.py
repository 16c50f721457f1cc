"""`sparktui status` and the monitor against the real lab: real sshd, dockerd, Ray."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparktui import config
from sparktui.core.monitor import Monitor
from tests.lab import faults

pytestmark = pytest.mark.lab


def status_json(cfg_path) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sparktui", "status", "--json", "-c", str(cfg_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - t0
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), took


def test_worker_only_reports_the_head_mismatch_only(lab_worker_only):
    lab = lab_worker_only
    rc, data, _ = status_json(lab.config_path)
    assert rc == 1
    assert [n["name"] for n in data["nodes"]] == ["spark-1", "spark-2"]
    head, worker = data["nodes"]
    for node, lab_node in zip(data["nodes"], lab.nodes, strict=True):
        assert node["reachable"] is True
        assert lab_node.ext_ip in node["ips"] and lab_node.ic_ip in node["ips"]
        assert node["configured_ip"] == lab_node.ic_ip
        assert [c["name"] for c in node["containers"]] == [lab.container]
        assert node["containers"][0]["state"] == "running"
        gpu = node["gpus"][0]
        assert gpu["name"] == "NVIDIA GB10" and gpu["unified"] is True
        assert 0 < gpu["memory_used_mib"] < gpu["memory_total_mib"]
        assert node["ray"]["alive"] is True
    assert head["ray"]["registered_ip"] == lab.nodes[0].ext_ip
    assert worker["ray"]["registered_ip"] == lab.nodes[1].ic_ip
    mismatches = [f for f in data["findings"] if f["id"] == "ray-ip-mismatch"]
    assert [f["node"] for f in mismatches] == ["spark-1"]
    assert lab.nodes[0].ext_ip in mismatches[0]["message"]
    assert lab.nodes[0].ic_ip in mismatches[0]["fix"]


def test_pinned_lab_reports_no_finding(healthy_lab):
    rc, data, _ = status_json(healthy_lab.config_path)
    assert data["findings"] == [] and rc == 0
    for node, lab_node in zip(data["nodes"], healthy_lab.nodes, strict=True):
        assert node["ray"]["registered_ip"] == lab_node.ic_ip
        assert node["env"]["VLLM_HOST_IP"] == lab_node.ic_ip


def test_stopped_sshd_answers_promptly_and_leaves_the_other_node_complete(healthy_lab):
    lab = healthy_lab
    faults.stop_sshd(lab, "spark-2")
    try:
        rc, data, took = status_json(lab.config_path)
    finally:
        faults.start_sshd(lab, "spark-2")
    assert rc == 1
    assert took < 10, f"status took {took:.1f}s with one sshd down"
    head, worker = data["nodes"]
    assert worker["reachable"] is False and "refused" in worker["error"]
    assert head["reachable"] is True and head["containers"] and head["gpus"]
    assert [f["id"] for f in data["findings"] if f["node"] == "spark-2"] == ["node-unreachable"]


def test_one_round_trip_per_node_per_refresh_and_reconnect(healthy_lab):
    """Two refreshes = 2 commands per node over 1 SSH connection; a cut link makes the node
    unreachable within its connect timeout, and it comes back when the link returns."""
    lab = healthy_lab
    cfg = config.load(str(lab.config_path))
    for n in cfg.nodes:
        n.ssh.connect_timeout = 2.0

    async def go():
        m = Monitor(cfg)
        try:
            s1 = await m.refresh(with_ray=True)
            s2 = await m.refresh(with_ray=False)
            sent = {name: len(t.sent) for name, t in m.transports.items()}
            connects = {name: t.connects for name, t in m.transports.items()}
            assert all(n.reachable for n in s1.nodes + s2.nodes)
            faults.cut_link(lab, "spark-2", "ext")
            await m.transports["spark-2"].close()  # a dropped connection, as after a cut
            try:
                t0 = time.monotonic()
                s3 = await m.refresh(with_ray=False)
                cut_took = time.monotonic() - t0
            finally:
                faults.restore_link(lab, "spark-2", "ext")
            m.transports["spark-2"]._next_attempt = 0  # don't wait out the backoff in a test
            s4 = await m.refresh(with_ray=False)
            return sent, connects, s3, cut_took, s4
        finally:
            await m.close()

    sent, connects, s3, cut_took, s4 = asyncio.run(go())
    assert sent == {"spark-1": 2, "spark-2": 2}
    assert connects == {"spark-1": 1, "spark-2": 1}
    assert s3.node("spark-2").reachable is False and s3.node("spark-1").reachable is True
    assert "timed out" in (s3.node("spark-2").error or "")
    assert cut_took < 5
    assert s4.node("spark-2").reachable is True


def test_the_environment_is_read_again_only_when_what_it_depends_on_changes(healthy_lab):
    """The second refresh skips the container's `docker exec` (env skipped:unchanged) and the
    compute-apps query, and shows what the first read; a new vLLM serve process in the
    container changes the env key, so the next probe reads the environment again."""
    lab = healthy_lab
    cfg = config.load(str(lab.config_path))

    async def go():
        m = Monitor(cfg)
        pid = ""
        try:
            s1 = await m.refresh(with_ray=False)
            env1 = dict(s1.node("spark-2").env)
            s2 = await m.refresh(with_ray=False)
            st2 = {k: v.status for k, v in m.last_probe["spark-2"].sections.items()}
            started = lab.docker(
                "spark-2",
                "exec",
                lab.container,
                "sh",
                "-c",
                "python3 -c 'import time; time.sleep(120)' vllm serve >/dev/null 2>&1 & echo $!",
            )
            pid = started.stdout.strip()
            s3 = await m.refresh(with_ray=False)
            st3 = {k: v.status for k, v in m.last_probe["spark-2"].sections.items()}
            return env1, s2, st2, s3, st3
        finally:
            if pid:
                lab.docker("spark-2", "exec", lab.container, "kill", pid)
            await m.close()

    env1, s2, st2, s3, st3 = asyncio.run(go())
    assert env1.get("VLLM_HOST_IP") == lab.node("spark-2").ic_ip
    assert st2["env"] == "skipped:unchanged" and st2["gpu_apps"] == "skipped:recent"
    assert s2.node("spark-2").env == env1  # kept from the first read
    assert len(s2.node("spark-2").gpus) == 1
    assert st3["env"] == "rc=0"  # a vLLM process appeared: read again
    assert s3.node("spark-2").vllm_pid is not None  # and it is the one the env is read from


def _resident_bashes() -> set[int]:
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if b"probe_once() {" in Path(f"/proc/{d}/cmdline").read_bytes():
                    out.add(int(d))
            except OSError:
                pass
    return out


def test_the_resident_probe_sees_what_the_one_off_sees_and_changes_at_once(healthy_lab):
    """The console's probe (one bash per node that stays, core/resident.py) over real SSH:
    the same containers, environment, GPUs and interfaces as the one-off probe; a container
    stopped between two ticks is seen stopped at the next one (dockerd's events); closing
    the monitor ends every resident bash on the nodes."""
    lab = healthy_lab
    cfg = config.load(str(lab.config_path))
    before = _resident_bashes()

    async def go():
        one, res = Monitor(cfg), Monitor(cfg, resident=True)
        try:
            a = await one.refresh(with_ray=True)
            b = [await res.refresh(with_ray=i == 0) for i in range(3)]
            mine = _resident_bashes() - before
            faults.stop_container(lab, "spark-2")
            try:
                await asyncio.sleep(0.5)
                stopped = await res.refresh(with_ray=False)
            finally:
                faults.start_container(lab, "spark-2")
            starts = dict(res.resident.starts)
        finally:
            await one.close()
            await res.close()
        return a, b, mine, stopped, starts

    a, b, mine, stopped, starts = asyncio.run(go())
    assert starts == {"spark-1": 1, "spark-2": 1} and len(mine) == 2
    for snap in b:
        for x, y in zip(a.nodes, snap.nodes, strict=True):
            assert y.reachable and x.ips == y.ips
            assert [(c.name, c.state) for c in x.containers] == [
                (c.name, c.state) for c in y.containers
            ]
            assert x.env == y.env and x.vllm_pid == y.vllm_pid
            assert [(g.name, g.uuid) for g in x.gpus] == [(g.name, g.uuid) for g in y.gpus]
    assert [r.node_id for r in a.ray_nodes] == [r.node_id for r in b[0].ray_nodes]
    node = stopped.node("spark-2")
    assert node is not None and [c.state for c in node.containers] == ["exited"]
    deadline = time.monotonic() + 10
    while mine & _resident_bashes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not mine & _resident_bashes(), "a resident probe outlived the monitor"
