"""Following the vLLM log on the lab head over the real SSH transport while a writer on the
node appends numbered lines at a steady rate, and the SSH connection is dropped mid-stream
in three different ways:

1. the client aborts its asyncssh connection (what a dying socket looks like from our side);
2. the node-side sshd session process of that very connection is SIGKILLed, by PID, inside
   the node (found by the connection's client port with `ss`);
3. the head's external link is cut (cable pulled) until SSH keepalive gives up, then
   restored: reconnection attempts fail while it is down, and succeed once it is back.

The received sequence must be exactly 1..N (0 lost, 0 repeated, every byte as written,
multi-byte UTF-8 included); each drop must be seen as a drop (a reconnect) and recovered.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import uuid

import pytest

from sparktui import config
from sparktui.core.logs import LogBatch, vllm_log_follower
from sparktui.core.ssh import SshTransport
from tests.lab import faults
from tests.lab import node as nodemod
from tests.lab.proc import clean_env

pytestmark = pytest.mark.lab

RATE = 200.0  # lines per second
KEEPALIVE = 1.0  # ssh.keepalive_interval for this test: a cut link is noticed in ~3 s
CUT_SECONDS = 6.0

# Runs inside the node (the node's own python3): appends line i at t0 + i/RATE until the
# stop file exists, then prints how many lines it wrote. Lines vary in length and carry
# multi-byte UTF-8, so resume offsets are byte offsets, not character counts.
WRITER = r"""
import os, sys, time
path, stop, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
def line(i):
    return f"{i:08d} seq " + "é—x" * (i * 7919 % 97) + f" end {i}\n"
t0 = time.monotonic()
i = 0
with open(path, "a", encoding="utf-8") as f:
    while not os.path.exists(stop):
        i += 1
        f.write(line(i))
        f.flush()
        d = t0 + i / rate - time.monotonic()
        if d > 0:
            time.sleep(d)
print(i)
"""


def expected_line(i: int) -> str:
    return f"{i:08d} seq " + "é—x" * (i * 7919 % 97) + f" end {i}"


def session_pids(lab, node, client_port: int) -> list[int]:
    """PIDs (in the node's PID namespace) of the sshd processes holding our connection."""
    out = lab.exec(
        node, ["ss", "-Htnp", "state", "established", f"( sport = :22 and dport = :{client_port} )"]
    ).stdout
    return sorted({int(p) for p in re.findall(r"pid=(\d+)", out)})


class Recorder:
    """Consumes the follower's batches; keeps the lines and when each event arrived."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.events: list[tuple[float, int, str]] = []  # (monotonic time, lines so far, text)
        self.first_line_errors: list[str] = []

    def take(self, b: LogBatch) -> None:
        now = time.monotonic()
        if b.lines and b.first_line != len(self.lines) + 1:
            self.first_line_errors.append(
                f"batch numbered {b.first_line} after {len(self.lines)} lines"
            )
        self.lines.extend(b.lines)
        for e in b.events:
            self.events.append((now, len(self.lines), e))

    def event_after(self, t: float, text: str) -> tuple[float, int, str] | None:
        return next((ev for ev in self.events if ev[0] >= t and text in ev[2]), None)


async def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)


def test_follow_resumes_after_drops_with_nothing_lost_or_repeated(healthy_lab, record_property):
    lab = healthy_lab
    head = lab.head
    work = f"/tmp/sparktui-follow-{uuid.uuid4().hex[:8]}"
    cfg = config.load(str(lab.config_path))
    cfg.vllm.log = f"{work}/vllm.log"
    cfg.head.ssh.keepalive_interval = KEEPALIVE
    cfg.head.ssh.connect_timeout = 2.0
    lab.write_file(head, cfg.vllm.log, "")
    stop_file = f"{work}/stop"
    writer: subprocess.Popen | None = None
    cut = False

    async def go() -> dict:
        nonlocal writer, cut
        transport = SshTransport(cfg.head)
        follower = vllm_log_follower(cfg, transport)  # the console's own settings
        rec = Recorder()

        async def consume() -> None:
            async for b in follower.batches():
                rec.take(b)

        task = asyncio.ensure_future(consume())
        drops: list[dict] = []
        try:
            await _wait(lambda: follower.inode is not None, 20, "the follower to start")
            writer = subprocess.Popen(
                nodemod.nsenter_argv(
                    head, ["/usr/bin/python3", "-c", WRITER, cfg.vllm.log, stop_file, str(RATE)]
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=clean_env(),
            )

            async def drop(how: str, inject, undo=None) -> None:
                await _wait(
                    lambda: len(rec.lines) >= (drops[-1]["lines_after"] if drops else 0) + 400,
                    30,
                    "lines to flow before the drop",
                )
                before = follower.reconnects
                at_lines = len(rec.lines)
                t0 = time.monotonic()
                await inject()
                restored = None
                if undo is not None:
                    await _wait(
                        lambda: follower.reconnects > before, 20, f"{how}: the drop to be noticed"
                    )
                    noticed = time.monotonic() - t0
                    await asyncio.sleep(max(0.0, CUT_SECONDS - noticed))
                    undo()
                    restored = time.monotonic()
                await _wait(
                    lambda: rec.event_after(t0, "resumed ") is not None,
                    60,
                    f"{how}: following to resume",
                )
                t_resumed = rec.event_after(t0, "resumed ")[0]
                lost = rec.event_after(t0, "connection lost")
                assert lost is not None, f"{how}: no drop was seen"
                await _wait(
                    lambda: len(rec.lines) > at_lines + 50, 30, f"{how}: new lines after resuming"
                )
                drops.append(
                    {
                        "how": how,
                        "at_line": at_lines,
                        "reason": lost[2],
                        "reconnects": follower.reconnects - before,
                        "detected_s": round(lost[0] - t0, 2),
                        "recovered_s": round(t_resumed - t0, 2),
                        "recovered_after_restore_s": None
                        if restored is None
                        else round(t_resumed - restored, 2),
                        "lines_after": len(rec.lines),
                    }
                )

            async def client_abort() -> None:
                assert transport._conn is not None
                transport._conn.abort()

            async def kill_session() -> None:
                assert transport._conn is not None
                port = transport._conn.get_extra_info("sockname")[1]
                pids = session_pids(lab, head, port)
                assert pids, f"no sshd session found for client port {port}"
                lab.exec(head, ["kill", "-KILL", *map(str, pids)])

            async def cut_link() -> None:
                nonlocal cut
                faults.cut_link(lab, head, "ext")
                cut = True

            def restore_link() -> None:
                nonlocal cut
                faults.restore_link(lab, head, "ext")
                cut = False

            await drop("client abort", client_abort)
            await drop("sshd session killed", kill_session)
            await drop("external link cut", cut_link, restore_link)
            await asyncio.sleep(1.0)
            lab.write_file(head, stop_file, "")
            out, err = await asyncio.to_thread(writer.communicate, timeout=30)
            assert writer.returncode == 0, err
            n = int(out.strip())
            await _wait(lambda: len(rec.lines) >= n, 60, f"all {n} lines")
            await asyncio.sleep(1.0)  # anything repeated after the last line would show now
        finally:
            follower.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await transport.close()
        return {
            "n": n,
            "rec": rec,
            "drops": drops,
            "reconnects": follower.reconnects,
            "connects": transport.connects,
        }

    try:
        res = asyncio.run(go())
    finally:
        if cut:
            faults.restore_link(lab, head, "ext")
        if writer is not None and writer.poll() is None:
            lab.write_file(head, stop_file, "")
            try:
                writer.wait(10)
            except subprocess.TimeoutExpired:
                writer.kill()
        lab.exec(head, ["rm", "-rf", work], check=False)

    # nothing of ours is left following on the node: every dropped session's reader ended
    # by itself once its SSH channel was gone (no signal reaches it from sshd)
    deadline = time.monotonic() + 30
    while True:
        left = [
            a
            for a in lab.exec(head, ["ps", "-eo", "args"]).stdout.splitlines()
            if cfg.vllm.log in a
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == [], left

    n, rec, drops = res["n"], res["rec"], res["drops"]
    numbers = [int(ln.split(" ", 1)[0]) for ln in rec.lines]
    lost = sorted(set(range(1, n + 1)) - set(numbers))
    repeated = len(numbers) - len(set(numbers))
    summary = (
        f"follow over SSH: N={n} lines at {RATE:g}/s, {len(drops)} drops "
        f"({res['reconnects']} reconnects, {res['connects']} SSH connections), "
        f"lost={len(lost)}, repeated={repeated}; "
        + "; ".join(
            f"{d['how']}: noticed {d['detected_s']}s, resumed {d['recovered_s']}s"
            + (
                f" ({d['recovered_after_restore_s']}s after restore)"
                if d["recovered_after_restore_s"] is not None
                else ""
            )
            for d in drops
        )
    )
    print(summary)
    record_property("follow_drop_summary", summary)
    assert lost == [] and repeated == 0, (lost[:10], repeated)
    assert numbers == list(range(1, n + 1))
    assert rec.lines == [expected_line(i) for i in range(1, n + 1)]  # byte-exact content
    assert rec.first_line_errors == []
    assert [d["how"] for d in drops] == ["client abort", "sshd session killed", "external link cut"]
    assert all(d["reconnects"] >= 1 for d in drops)
    assert res["connects"] >= 4  # one connection per drop, plus the first
    assert n >= 1000
