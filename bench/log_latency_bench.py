"""Log latency: a line appended on the head until it is in the console's log pane.

On a 2-node lab, the real console (`SparkApp` + `LiveBackend` on the lab's config, headless
`run_test()`, monitor polling as usual) follows the head's vLLM log (config `vllm.log`)
while, side by side, the reference follows a sibling file in the same directory: a real
OpenSSH client running `tail -n0 -F <file>.bench-ref` on the head with the lab's key.

For each of N rounds (50; --quick: 25) the bench writes one uniquely numbered line to each
file, one at a time in random order, straight into the node's file (through
/proc/<node init>/root, no process in between), recording `t0 = CLOCK_MONOTONIC` just
before each write(2), and waits until that line's observer has it. Every line wakes only its
own observer, so the two pipelines never compete for the 2 cores over the same line:

* the app: a wrapper around this LogView's `add_lines` stamps CLOCK_MONOTONIC when the batch
  holding the line has been applied (the pane holds it); the next compositor refresh after
  it is stamped too (`call_after_refresh`) and reported in the note;
* a stage, reported on its own row: the SSH channel's data with the line reaches the
  follower inside the app (node-side reader, network, asyncssh), before any app work;
* the reference: a separate small Python process (so the app's event loop and GIL cannot
  delay it) reads the ssh client's stdout and stamps CLOCK_MONOTONIC when the chunk with
  the line arrives.

Same lines, same node and sshd, one clock, interleaved in time: noise hits both. Between
writes the bench waits a random 50-250 ms (no phase lock with any poll interval). Figure: median app latency;
reference: median `ssh tail -F` latency. A stage, reported without a target (issue 19): the
user sees the terminal, and `console_bench` holds the line-until-on-the-terminal targets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import signal
import statistics
import sys
import time

from bench.common import Row

MARK = "sparktui-bench-latency"

# The reference observer: runs the ssh argv, stamps each marked line when its chunk arrives,
# prints "<n> <ns>" per line and "ready" once the ssh client has started.
READER = r"""
import os, subprocess, sys, time
mark = sys.argv[1].encode()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
fd = p.stdout.fileno()
buf = b""
while True:
    chunk = os.read(fd, 65536)
    t = time.monotonic_ns()
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for ln in lines:
        i = ln.find(mark)
        if i >= 0:
            sys.stdout.write(f"{ln[i + len(mark):].split()[0].decode()} {t}\n")
            sys.stdout.flush()
"""


class _Seen:
    """Stamps per line number, with an event per line."""

    def __init__(self) -> None:
        self.at: dict[int, int] = {}
        self._events: dict[int, asyncio.Event] = {}

    def event(self, n: int) -> asyncio.Event:
        return self._events.setdefault(n, asyncio.Event())

    def set(self, n: int, t: int) -> None:
        if n not in self.at:
            self.at[n] = t
            self.event(n).set()


def _numbers(lines, nonce: str):
    key = f"{MARK} {nonce} "
    for ln in lines:
        i = ln.find(key)
        if i >= 0:
            yield int(ln[i + len(key) :].split()[0])


async def _measure(lab, cfg, n_lines: int) -> dict:
    from sparktui.tui.app import SparkApp
    from sparktui.tui.live import LiveBackend

    head = cfg.head.name
    path = cfg.vllm.log
    host_file = lab.host_path(head, path)
    host_file.parent.mkdir(parents=True, exist_ok=True)
    host_file.write_text("INFO bench: log latency run starts\n")
    ref_path = f"{path}.bench-ref"  # the reference's own file (see the module doc)
    ref_file = lab.host_path(head, ref_path)
    ref_file.write_text("")
    nonce = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    app_seen, app_drawn, ref_seen, chunk_seen = _Seen(), _Seen(), _Seen(), _Seen()

    ref = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        READER,
        f"{MARK} {nonce}",
        *lab.ssh_argv(head, "tail", "-n0", "-F", shlex.quote(ref_path)),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )  # its own process group: the ssh client goes with it

    async def read_ref() -> None:
        assert ref.stdout is not None
        async for raw in ref.stdout:
            num, t = raw.decode().split()
            ref_seen.set(int(num), int(t))

    ref_task = asyncio.ensure_future(read_ref())
    # a stage on the way: the SSH channel's data reaches the follower (asyncssh, in the app)
    from sparktui.core import logs

    handle = logs.FileFollower._handle

    async def stamped(self, chunk: bytes) -> None:
        t = time.monotonic_ns()
        for num in _numbers([chunk.decode("utf-8", "replace")], nonce):
            chunk_seen.set(num, t)
        await handle(self, chunk)

    logs.FileFollower._handle = stamped
    app = SparkApp(LiveBackend(cfg))
    fd = os.open(host_file, os.O_WRONLY | os.O_APPEND)
    ref_fd = os.open(ref_file, os.O_WRONLY | os.O_APPEND)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            while True:  # the main screen and its LogView exist once main_ready ran
                try:
                    view = app.log_view
                    break
                except Exception:
                    await pilot.pause(0.05)
            original = view.add_lines

            def add_lines(node, lines):
                new = original(node, lines)
                t = time.monotonic_ns()
                for num in _numbers(lines, nonce):
                    app_seen.set(num, t)
                    view.call_after_refresh(lambda num=num: app_drawn.set(num, time.monotonic_ns()))
                return new

            view.add_lines = add_lines

            def write(to, num: int) -> int:
                line = f"INFO 01-01 00:00:00 [bench.py:1] {MARK} {nonce} {num} end\n"
                t0 = time.monotonic_ns()
                os.write(to, line.encode())
                return t0

            async def seen(num: int, side: str, timeout: float) -> bool:
                events = (
                    [app_seen.event(num), app_drawn.event(num)]
                    if side == "app"
                    else [ref_seen.event(num)]
                )
                try:
                    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), timeout)
                    return True
                except asyncio.TimeoutError:
                    return False

            async def line(num: int, timeout: float) -> dict[str, int]:
                """Line `num` to each observer, one at a time, in random order: t0 per side
                (empty when a side did not see it in time)."""
                t0s = {}
                for side in random.sample(["app", "ref"], 2):
                    await asyncio.sleep(random.uniform(0.05, 0.25))
                    t0s[side] = write(fd if side == "app" else ref_fd, num)
                    if not await seen(num, side, timeout):
                        return {}
                return t0s

            # warm-up: both followers are running and have delivered a line
            for num in range(-3, 0):
                if not await line(num, 60):
                    raise RuntimeError(
                        f"warm-up line {num} not seen "
                        f"(app {num in app_seen.at}, ssh tail {num in ref_seen.at})"
                    )
            t0s: dict[int, dict[str, int]] = {}
            lost = 0
            for num in range(n_lines):
                t0s[num] = await line(num, 10)
                if not t0s[num]:
                    lost += 1
            await pilot.pause(0.1)
    finally:
        logs.FileFollower._handle = handle
        os.close(fd)
        os.close(ref_fd)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ref.pid, signal.SIGTERM)
        await ref.wait()
        ref_task.cancel()
    ok = [n for n in t0s if t0s[n] and n in app_seen.at and n in ref_seen.at]

    def lat(stamps: _Seen, side: str) -> list[float]:
        return [(stamps.at[n] - t0s[n][side]) / 1e9 for n in ok if n in stamps.at]

    return {
        "app": lat(app_seen, "app"),
        "drawn": lat(app_drawn, "app"),
        "ref": lat(ref_seen, "ref"),
        "chunk": lat(chunk_seen, "app"),
        "lost": lost,
    }


def figures(lab, n_lines: int) -> dict:
    from sparktui import config

    cfg = config.load(str(lab.config_path))
    return asyncio.run(_measure(lab, cfg, n_lines))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(quick: bool) -> list[Row]:
    from tests.lab import lab as labmod

    n_lines = 25 if quick else 50
    lab = labmod.up(nodes=2, pin="all", owner_pid=os.getpid())
    try:
        f = figures(lab, n_lines)
    finally:
        labmod.down(lab)
    app, ref, drawn = f["app"], f["ref"], f["drawn"]
    value = statistics.median(app)
    note = (
        f"median of {len(app)}/{n_lines}, lost {f['lost']}; p90 app "
        f"{_pct(app, 0.9) * 1000:.1f} ms, ssh {_pct(ref, 0.9) * 1000:.1f} ms; "
        f"next refresh after: median {statistics.median(drawn) * 1000:.1f} ms"
    )
    # reported only: the target is on the terminal (bench/console_bench.py); a lost line
    # still fails
    row = Row(
        f"vLLM log line until in the log pane (median of {n_lines})",
        value,
        "s",
        "ssh head tail -F (same lines, own file)",
        statistics.median(ref),
        ok=False if f["lost"] else None,
        note=note,
    )
    # where the time goes, reported only: the line as the SSH channel hands it to the
    # follower inside the app (node-side reader + network + asyncssh), before any app work
    stage = Row(
        "  of which: at the follower (asyncssh channel data)",
        statistics.median(f["chunk"]),
        "s",
        "ssh head tail -F (same lines, own file)",
        statistics.median(ref),
        note=f"median of {len(f['chunk'])}",
    )
    return [row, stage]


if __name__ == "__main__":
    # python -m bench.log_latency_bench [--quick] [--lab ID]: raw samples
    from tests.lab import lab as labmod
    from tests.lab.state import Lab

    own = "--lab" not in sys.argv
    x = (
        labmod.up(nodes=2, pin="all", owner_pid=os.getpid())
        if own
        else Lab.load(sys.argv[sys.argv.index("--lab") + 1])
    )
    try:
        res = figures(x, 25 if "--quick" in sys.argv else 50)
    finally:
        if own:
            labmod.down(x)
    for k in ("chunk", "app", "drawn", "ref"):
        v = sorted(res[k])
        print(
            k,
            f"median {statistics.median(v) * 1000:.2f} ms",
            " ".join(f"{s * 1000:.1f}" for s in v),
        )
    print("lost", res["lost"])
