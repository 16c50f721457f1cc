"""Issue 17: sparktui at cluster scale.

1. 128 nodes refreshed at 1 Hz: 128 real sshd "nodes" on loopback 127.0.1.1-128 answering
   with a lab worker's real captured probe output (the refresh bench's 64-node setup,
   twice as many nodes), the real Monitor with its probe concurrency cap; CPU of the
   jump-host process (target ≤ 25 % of one core).
2. The console over a 32-node lab without Ray (real sshd and dockerd per node): the real
   SparkApp headless at 200x50 (Textual's pilot; frames are composed, not written to a
   terminal). Time from start to the first full screen (every node's row in the table,
   each with an answer from its node), CPU while idle (a minute of refreshes at 2 s, no
   keys), and key-to-render p99 while the 32 nodes refresh: down/up posted to the app
   as key events; the time from posting to the first frame the app composed (App._display
   is handed the compositor's update; headless, nothing is written to a terminal) with
   the table's cursor on the new row (target ≤ 150 ms).
"""

from __future__ import annotations

import asyncio
import os
import resource
import time

from bench.common import Row, limit_row
from bench.refresh_bench import fanout_row
from sparktui import config


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _fanout_row(quick: bool, n_nodes: int = 128) -> Row:
    return fanout_row(n_nodes, 10 if quick else 30, 22023)


async def _console(cfg: config.Config, idle_s: float, keys: int) -> tuple[float, float, float]:
    from textual import events

    from sparktui.tui.app import SparkApp
    from sparktui.tui.live import LiveBackend
    from sparktui.tui.widgets.node_table import NodeTable

    t0 = time.monotonic()
    backend = LiveBackend(cfg, read_only=True)
    app = SparkApp(backend)
    async with app.run_test(size=(200, 50)) as pilot:
        main = app.main

        def full() -> bool:
            snap = main.snapshot
            table = main.query_one(NodeTable)
            return (
                snap is not None
                and all(n.probe_seconds is not None for n in snap.nodes)
                and len(table.order) == len(cfg.nodes)
                and table.row_count == len(cfg.nodes)
            )

        while not full():
            if time.monotonic() - t0 > 300:
                raise RuntimeError("the console did not show every node within 300 s")
            await pilot.pause(0.05)
        first = time.monotonic() - t0
        c0, w0 = _cpu(), time.monotonic()
        await asyncio.sleep(idle_s)
        idle = 100 * (_cpu() - c0) / (time.monotonic() - w0)
        table = main.query_one(NodeTable)
        table.focus()
        await pilot.pause()
        frames: list[tuple[float, int]] = []  # (when a frame was composed, the cursor row)
        display = app._display

        def _display(screen, renderable) -> None:
            if renderable is not None:
                frames.append((time.perf_counter(), table.cursor_row))
            display(screen, renderable)

        app._display = _display  # type: ignore[method-assign]
        lat = []
        for i in range(keys):
            key = "down" if i % 8 < 4 else "up"
            want = max(0, min(len(cfg.nodes) - 1, table.cursor_row + (1 if key == "down" else -1)))
            frames.clear()
            t = time.perf_counter()
            app.post_message(events.Key(key, None))
            while not any(row == want for _, row in frames):
                if time.perf_counter() - t > 10:
                    raise RuntimeError(f"no frame showed the {key} key within 10 s")
                await asyncio.sleep(0.002)
            lat.append(next(w for w, row in frames if row == want) - t)
            await asyncio.sleep(0.1)
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    await backend.close()
    return first, idle, p99


def _console_rows(quick: bool, n_nodes: int = 32) -> list[Row]:
    from tests.lab import lab as labmod

    t_up = time.monotonic()
    lab = labmod.up(nodes=n_nodes, ray=False, owner_pid=os.getpid(), nice=19)
    t_up = time.monotonic() - t_up
    try:
        cfg = config.load(str(lab.config_path))
        first, idle, p99 = asyncio.run(_console(cfg, 15 if quick else 60, 40 if quick else 150))
    finally:
        labmod.down(lab)
    note = (
        f"{n_nodes}-node lab at nice 19 and cpu weight 15 (other machines in real life), no Ray "
        f"(lab up {t_up:.0f} s), 200x50, refresh {cfg.refresh_interval:g} s"
    )
    return [
        Row(f"console, {n_nodes} lab nodes: first full screen", first, "s", note=note),
        Row(f"console, {n_nodes} lab nodes: CPU while idle", idle, "%", note="of one core"),
        limit_row(
            f"console, {n_nodes} lab nodes: key-to-render p99",
            p99 * 1000,
            "ms",
            150,
            note="node table up/down while the nodes refresh",
        ),
    ]


def run(quick: bool) -> list[Row]:
    return [_fanout_row(quick), *_console_rows(quick)]


if __name__ == "__main__":
    for r in run(quick=True):
        print(r)
