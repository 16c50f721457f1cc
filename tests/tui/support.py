"""A console backend for tests: the real LiveBackend (knowledge base, plans, actions layer)
over a fixed seed-story snapshot, recording transports and a log fed by the test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
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
        self.transports = {
            n.name: RecordingTransport(n.name, read_only=read_only) for n in cfg.nodes
        }

    async def refresh(
        self, wait: float | None = None, with_ray: bool | None = None
    ) -> ClusterSnapshot:
        self.refreshes += 1
        return self.snap

    async def close(self) -> None:
        pass


class TestBackend(LiveBackend):
    __test__ = False

    def __init__(self, cfg, snapshot: ClusterSnapshot, *, read_only: bool = False) -> None:
        super().__init__(
            cfg,
            read_only=read_only,
            monitor=FixedMonitor(cfg, snapshot, read_only or cfg.read_only),
        )
        self.queue: asyncio.Queue[tuple[str, list[str], list[str]]] = asyncio.Queue()

    def feed(
        self, lines: list[str], node: str = "spark-1", events: list[str] | None = None
    ) -> None:
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


async def wait_until(
    pilot, predicate: Callable[[], object], timeout: float = 5.0, what: str = ""
) -> float:
    """Let the app run, a frame at a time, until `predicate()` holds; fail after `timeout`
    seconds. Returns the seconds waited. The tests wait on what they are about to check
    (a message handled, a worker's result shown), never for a fixed time."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for "
                f"{what or getattr(predicate, '__name__', 'a condition')}"
            )
        await pilot.pause()
    return time.monotonic() - t0


async def started(pilot, timeout: float = 10.0) -> None:
    """The console is up: the main screen composed and the first snapshot applied."""
    main = pilot.app.main
    await wait_until(pilot, lambda: main.snapshot is not None, timeout, "the first snapshot")


async def shown(pilot, view, count: int, timeout: float = 10.0) -> None:
    """`count` log lines have reached the pane and been put on screen (the pane syncs at
    most every SYNC_INTERVAL; its status line follows the sync)."""
    status = view.parent.query_one("#log-status")

    def synced() -> bool:
        return (
            view.received >= count
            and view._sync_timer is None
            and f"{len(view.entries)} lines" in str(status.render())
        )

    await wait_until(pilot, synced, timeout, f"{count} log lines in the pane")


async def detail_follows(pilot, timeout: float = 5.0) -> None:
    """The detail panel shows the finding selected in the list (FindingsList.Selected was
    routed by the screen)."""
    from sparktui.tui.widgets.findings import FindingDetail, FindingsList

    screen = pilot.app.main
    flist, detail = screen.query_one(FindingsList), screen.query_one(FindingDetail)
    await wait_until(
        pilot,
        lambda: detail.finding is flist.selected,
        timeout,
        "the detail panel to show the selected finding",
    )


async def log_applied(pilot, backend: TestBackend, timeout: float = 5.0) -> None:
    """Every batch fed so far has been handled by the screen (lines and stream events): the
    follower took it from the queue and the screen set `_log_applied` after applying it."""
    main = pilot.app.main
    await wait_until(
        pilot,
        lambda: backend.queue.empty() and main._log_applied.is_set(),
        timeout,
        "the fed log batches applied",
    )
