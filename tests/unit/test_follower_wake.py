"""Both node-side engines wait for new data in inotify (python3; sh with GNU tail), not by
polling."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest

from sparktui.core.logs import FileFollower
from sparktui.core.transport import LocalTransport


def _gnu_tail() -> bool:
    if not shutil.which("timeout"):
        return False
    out = subprocess.run(["tail", "--version"], capture_output=True, text=True)
    return "GNU" in out.stdout


pytestmark = [
    pytest.mark.skipif(not _gnu_tail(), reason="needs GNU tail and timeout"),
    pytest.mark.usefixtures("reap_subprocesses"),
]


@pytest.mark.parametrize("engine", ["auto", "sh"])
async def test_a_line_arrives_long_before_the_poll_interval(tmp_path, engine):
    log = tmp_path / "vllm.log"
    log.write_text("first\n")
    # polling every 30 s could not deliver the lines below within the test's time
    f = FileFollower(
        LocalTransport("local"), str(log), poll_interval=30, event_wait=30, engine=engine
    )
    got: list[tuple[float, str]] = []

    async def follow() -> None:
        async for b in f.batches():
            got.extend((time.monotonic(), ln) for ln in b.lines)
            if any(ln == "third" for _, ln in got):
                return

    task = asyncio.ensure_future(follow())
    try:
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.05)
        assert [ln for _, ln in got] == ["first"]
        delays = []
        for line in ("second", "third"):
            await asyncio.sleep(0.3)  # the script is waiting again
            t0 = time.monotonic()
            with open(log, "a") as fh:
                fh.write(line + "\n")
            for _ in range(100):
                if got[-1][1] == line:
                    break
                await asyncio.sleep(0.01)
            delays.append(got[-1][0] - t0)
        await asyncio.wait_for(task, 5)
        assert [ln for _, ln in got] == ["first", "second", "third"]
        assert max(delays) < 1.0, delays
    finally:
        f.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
