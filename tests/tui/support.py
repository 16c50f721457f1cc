"""A console backend for tests: the real LiveBackend (knowledge base, plans, actions layer)
over a fixed seed-story snapshot, recording transports and a log fed by the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from sparktui.core.command import Command, Result
from sparktui.core.model import ClusterSnapshot
from sparktui.core.transport import Transport
from sparktui.tui.demo import DemoMonitor, demo_config
from sparktui.tui.live import LiveBackend

FIXTURE_LOG = Path(__file__).parent.parent / "fixtures" / "vllm" / "vllm_ray_ip_mismatch.log"
IP_MAP = {"198.19.200.101": "192.168.200.12", "198.18.1.101": "10.1.230.180"}


def seed_log_lines() -> list[str]:
    """The real placement-group failure log, lab IPs mapped to the seed story's."""
    text = FIXTURE_LOG.read_text(encoding="utf-8")
    for lab, story in IP_MAP.items():
        text = text.replace(lab, story)
    return text.splitlines()


class RecordingTransport(Transport):
    """Answers every command with exit 0 and records it (Transport.sent)."""

    kind = "recording"

    async def _run(self, command: Command) -> Result:
        await asyncio.sleep(0)
        return Result(0, "Ray runtime started\nhealthy (HTTP 200)\n", "")

    async def _stream(self, command: Command) -> AsyncIterator[bytes]:
        if False:  # pragma: no cover
            yield b""

    def mutating_sent(self) -> list[tuple[str, ...]]:
        return [r.argv for r in self.sent if r.mutating and not r.refused]


class FixedMonitor:
    """Stands in for Monitor: the same snapshot every tick, recording transports."""

    def __init__(self, cfg, snapshot: ClusterSnapshot, read_only: bool) -> None:
        self.cfg = cfg
        self.snap = snapshot
        self.refreshes = 0
        self.transports = {n.name: RecordingTransport(n.name, read_only=read_only)
                           for n in cfg.nodes}

    async def refresh(self, wait: float | None = None, with_ray: bool | None = None
                      ) -> ClusterSnapshot:
        self.refreshes += 1
        return self.snap

    async def close(self) -> None:
        pass


class TestBackend(LiveBackend):
    __test__ = False

    def __init__(self, cfg, snapshot: ClusterSnapshot, *, read_only: bool = False) -> None:
        super().__init__(cfg, read_only=read_only,
                         monitor=FixedMonitor(cfg, snapshot, read_only or cfg.read_only))
        self.queue: asyncio.Queue[tuple[str, list[str], list[str]]] = asyncio.Queue()

    def feed(self, lines: list[str], node: str = "spark-1",
             events: list[str] | None = None) -> None:
        self.queue.put_nowait((node, lines, events or []))

    async def follow_log(self) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        while True:
            yield await self.queue.get()

    def mutating_sent(self) -> list[tuple[str, ...]]:
        return [a for t in self.monitor.transports.values() for a in t.mutating_sent()]


async def seed_snapshot(cfg, tick: int = 3) -> ClusterSnapshot:
    """The seed story through the real Monitor snapshot and live checks."""
    m = DemoMonitor(cfg)
    m.tick = tick - 1
    snap = await m.refresh(wait=None, with_ray=True)
    await m.close()
    return snap


def seed_config(**overrides):
    cfg = demo_config("/tmp/sparktui-test/vllm.log")
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg
