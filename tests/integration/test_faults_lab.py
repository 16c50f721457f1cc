"""Faults on the lab, seen through the monitor: each shows on the right node within two
refreshes (or as soon as Ray itself knows), the other node is unaffected, and the monitor
recovers when the fault is undone."""

from __future__ import annotations

import asyncio
import time

import pytest

from sparktui import config
from sparktui.core.model import ClusterSnapshot
from sparktui.core.monitor import Monitor
from tests.lab import faults

pytestmark = pytest.mark.lab

INTERVAL = 1.0


def _cfg(lab) -> config.Config:
    cfg = config.load(str(lab.config_path))
    cfg.refresh_interval = INTERVAL
    for n in cfg.nodes:
        n.ssh.connect_timeout = 2.0
    return cfg


async def _until(
    m: Monitor,
    pred,
    max_ticks: int,
    with_ray: bool = False,
) -> tuple[int, ClusterSnapshot]:
    """Refresh at INTERVAL until pred(snapshot); returns (ticks taken, snapshot)."""
    snap = None
    for tick in range(1, max_ticks + 1):
        t0 = time.monotonic()
        snap = await m.refresh(wait=INTERVAL, with_ray=with_ray)
        if pred(snap):
            return tick, snap
        await asyncio.sleep(max(0.0, INTERVAL - (time.monotonic() - t0)))
    raise AssertionError(
        f"not within {max_ticks} refreshes: "
        f"{[(n.name, n.reachable, n.error) for n in snap.nodes]} "
        f"{[(f.id, f.node) for f in snap.findings]}"
    )


def _ids(snap: ClusterSnapshot, node: str) -> set[str]:
    return {f.id for f in snap.findings if f.node == node}


@pytest.mark.parametrize(
    "fault,undo",
    [
        (
            lambda lab: faults.stop_sshd(lab, "spark-2"),
            lambda lab: faults.start_sshd(lab, "spark-2"),
        ),
        (
            lambda lab: faults.cut_link(lab, "spark-2", "ext"),
            lambda lab: faults.restore_link(lab, "spark-2", "ext"),
        ),
    ],
    ids=["sshd-stopped", "link-cut"],
)
def test_unreachable_within_two_refreshes_and_back(healthy_lab, fault, undo):
    lab = healthy_lab

    async def go():
        m = Monitor(_cfg(lab))
        try:
            await _until(m, lambda s: all(n.reachable for n in s.nodes), 3, with_ray=True)
            fault(lab)
            # a dropped connection is what the node's fault does to a live session
            await m.transports["spark-2"].close()
            try:
                ticks, snap = await _until(m, lambda s: not s.node("spark-2").reachable, 2)
                assert snap.node("spark-1").reachable and snap.node("spark-1").containers
                assert "node-unreachable" in _ids(snap, "spark-2")
                assert _ids(snap, "spark-1") == set()
            finally:
                undo(lab)
            m.transports["spark-2"]._next_attempt = 0.0  # don't sit out the backoff here
            back, snap = await _until(m, lambda s: s.node("spark-2").reachable, 10)
            return ticks, back
        finally:
            await m.close()

    ticks, back = asyncio.run(go())
    assert ticks <= 2 and back <= 10


def test_dockerd_restart_shows_container_down_then_heals(healthy_lab):
    lab = healthy_lab

    async def go():
        m = Monitor(_cfg(lab))
        try:
            await _until(m, lambda s: not s.findings, 5, with_ray=True)
            faults.restart_dockerd(lab, "spark-2")
            ticks, snap = await _until(
                m, lambda s: "container-not-running" in _ids(s, "spark-2"), 5
            )
            assert snap.node("spark-2").reachable
            assert _ids(snap, "spark-1") == set()
            return ticks
        finally:
            await m.close()

    try:
        assert asyncio.run(go()) <= 2
    finally:
        faults.heal(lab)


def test_killed_raylet_is_reported_dead_on_the_worker(healthy_lab):
    lab = healthy_lab

    async def go():
        m = Monitor(_cfg(lab))
        try:
            await _until(m, lambda s: not s.findings, 5, with_ray=True)
            faults.kill_raylet(lab, "spark-2")
            t0 = time.monotonic()
            # Ray needs ~15 s of missed heartbeats before it marks the node DEAD.
            _ticks, snap = await _until(
                m, lambda s: s.node("spark-2").ray.alive is False, 60, with_ray=True
            )
            took = time.monotonic() - t0
            worker_ids = _ids(snap, "spark-2")
            assert worker_ids & {"ray-node-dead", "container-not-running", "node-not-in-ray"}
            assert _ids(snap, "spark-1") == set()
            return took
        finally:
            await m.close()

    try:
        took = asyncio.run(go())
        assert took < 60
    finally:
        faults.heal(lab)
