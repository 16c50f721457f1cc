"""Issue 17: the monitor's fan-out at scale. Every node here is `host: local` (the real
probe script run by LocalTransport on this machine, the real parser and checks): at
most `probe_concurrency` probes are in flight at once, every node is still answered in
one tick, and `probe_now` probes one node at once outside the tick."""

from __future__ import annotations

import asyncio

import pytest

from sparktui import config
from sparktui.core.monitor import Monitor


def _cfg(nodes: int, cap: int) -> config.Config:
    rows = "\n".join(
        f"  - {{name: n{i}, host: local, ip: 127.0.0.{i}" + (", role: head}" if i == 1 else "}")
        for i in range(1, nodes + 1)
    )
    return config.parse(
        f"cluster: {{name: scale}}\nprobe_concurrency: {cap}\n"
        f"refresh_interval: 5\nnodes:\n{rows}\n",
        "scale.yaml",
    )


async def _tick(cfg: config.Config) -> tuple[Monitor, list]:
    m = Monitor(cfg)
    snap = await m.refresh(wait=None, with_ray=False)
    return m, snap.nodes


def test_probes_in_flight_never_exceed_the_cap():
    async def go():
        m, nodes = await _tick(_cfg(8, 3))
        try:
            assert m.max_in_flight == 3, m.max_in_flight  # the cap was reached, not passed
            assert all(n.reachable for n in nodes), [(n.name, n.error) for n in nodes]
            assert m.in_flight == 0
        finally:
            await m.close()

    asyncio.run(go())


def test_without_a_cap_below_the_node_count_all_run_at_once():
    async def go():
        m, nodes = await _tick(_cfg(6, 32))
        try:
            assert m.max_in_flight == 6
            assert all(n.reachable for n in nodes)
        finally:
            await m.close()

    asyncio.run(go())


def test_probe_now_answers_one_node():
    async def go():
        m = Monitor(_cfg(3, 2))
        try:
            snap = await m.probe_now("n2")
            by = {n.name: n for n in snap.nodes}
            assert by["n2"].reachable and by["n2"].probe_seconds is not None
            assert by["n1"].probe_seconds is None and by["n3"].probe_seconds is None
            assert (await m.probe_now("nope")).nodes == snap.nodes  # unknown: as it was
        finally:
            await m.close()

    asyncio.run(go())


@pytest.mark.parametrize("bad", ["0", "-1", "x"])
def test_probe_concurrency_is_validated(bad):
    with pytest.raises(config.ConfigError):
        config.parse(
            f"probe_concurrency: {bad}\nnodes:\n  - {{name: a, host: local}}\n", "bad.yaml"
        )
