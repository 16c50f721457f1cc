"""Deterministic console scenes (fixed seed-story snapshot, the real log fixture, a fixed
memory history): shared by the snapshot tests and the README screenshots.

    python -m tests.tui.scenes docs/screenshots    # writes console-<theme>.svg
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from pathlib import Path

from sparktui.tui.app import SparkApp
from tests.tui.support import (
    TestBackend,
    detail_follows,
    seed_config,
    seed_log_lines,
    seed_snapshot,
    shown,
    wait_until,
)

THEMES = ("sparktui-dark", "sparktui-light", "sparktui-ansi", "sparktui-high-contrast")
SIZE = (160, 50)
HISTORY = {  # % of unified memory used, one sample per refresh
    "spark-1": [52, 55, 61, 64, 66, 66, 70, 74, 78, 79, 81, 80, 79, 81, 82, 81, 80, 81],
    "spark-2": [50, 53, 58, 62, 65, 66, 68, 71, 73, 75, 77, 78, 77, 78, 79, 78, 78, 78],
}


def main_screen_app(theme: str, *, read_only: bool = False) -> tuple[SparkApp, TestBackend]:
    """The main screen after the placement-group failure streamed in (no clock shown;
    one refresh only: the interval is an hour)."""
    cfg = seed_config(refresh_interval=3600.0)
    backend = TestBackend(cfg, asyncio.run(seed_snapshot(cfg)), read_only=read_only)
    app = SparkApp(backend, theme=theme)
    for name, values in HISTORY.items():
        app.main.history[name] = deque(values, maxlen=60)
    return app, backend


def feeder(backend: TestBackend):
    """run_before: stream the real log in, wait until it is shown and diagnosed."""

    async def run_before(pilot) -> None:
        lines = seed_log_lines()
        backend.feed(lines)
        main = pilot.app.main
        await wait_until(
            pilot, lambda: main.log_findings and backend.queue.empty(), 10, "the log diagnosed"
        )
        await shown(pilot, main.log_view, len(lines))
        await detail_follows(pilot)
        await pilot.wait_for_scheduled_animations()
        assert pilot.app.main.log_findings, "the scene did not render (no log findings)"

    return run_before


async def _save(app: SparkApp, backend: TestBackend, theme: str, out: Path) -> Path:
    async with app.run_test(size=SIZE) as pilot:
        await feeder(backend)(pilot)
        path = out / f"console-{theme.removeprefix('sparktui-')}.svg"
        app.save_screenshot(filename=path.name, path=str(out))
    return path


def save_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for theme in THEMES:
        app, backend = main_screen_app(theme)
        paths.append(asyncio.run(_save(app, backend, theme, out)))
    return paths


if __name__ == "__main__":
    for p in save_all(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshots")):
        print(p)
