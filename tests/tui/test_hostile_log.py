"""Hostile log content in the console: bytes appended to the followed vLLM log travel the
path the live console uses (FileFollower over a transport -> LogBatch -> the app's log pane
and the knowledge base -> findings) and must never crash it, never style or move anything
(no Rich markup, no ANSI/OSC escape, no C1 control reaching the terminal), and the app must
stay responsive under a flood.

The log is a local file followed through a LocalTransport (the real `tail -F` script); the
rest of the backend is the real LiveBackend over a fixed seed-story snapshot.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path

import pytest
from textual.widgets import Static

from sparktui.core.transport import LocalTransport
from sparktui.tui.app import SparkApp
from sparktui.tui.live import LiveBackend
from sparktui.tui.screens.help import HelpScreen
from sparktui.tui.widgets.findings import FindingDetail, FindingsList
from sparktui.tui.widgets.log_pane import LogView
from tests.tui.support import (
    FixedMonitor,
    detail_follows,
    seed_config,
    seed_log_lines,
    seed_snapshot,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("reap_subprocesses")

SIZE = (160, 50)
# Anything a terminal could act on: C0 controls (tab and newline never survive into a
# rendered line either), DEL, C1 controls (U+0080..U+009F: 8-bit CSI/OSC/DCS in UTF-8).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# Sequences only log text could have produced (Textual itself never writes these).
HOSTILE_SEQ = re.compile(r"\x1b\]52|\x1b\]0;|\x1b\]8;|\x1b\[2J|\x1b\[31m|\x9b|\x9d|\x1b\[H")

OSC52 = b"\x1b]52;c;cHduZWQ=\x1b\\"  # set the clipboard to "pwned"
HOSTILE_LINES: dict[str, bytes] = {
    "markup": b"[bold red]x[/] [link=https://evil.example/]click me[/link] "
    b"[reverse]rev[/reverse] [@click=app.quit]quit[/] $crash",
    "ansi": b"\x1b[31mred\x1b[0m \x1b[2J\x1b[H home \x1b]0;pwned title\x07 "
    + OSC52
    + b" after \x07 bell",
    "utf8": b"bad utf8 \xff\xfe\xc3\x28 and a lone \xe2\x82 end",
    "c1": b"c1 \xc2\x9b2J \xc2\x9d52;c;eA==\xc2\x9c end",
    "nul": b"nul \x00 bell \x07 bs \x08 del \x7f cr\rEVIL end",
    "binary": bytes(b for b in random.Random(9).randbytes(3000) if b != 0x0A),
}
BIG = 2 * 1024 * 1024


async def make_app(
    tmp_path: Path, max_log_lines: int = 20000
) -> tuple[SparkApp, LiveBackend, Path]:
    """The console on the seed story, its vLLM log a local file followed for real."""
    cfg = seed_config()
    log = tmp_path / "vllm.log"
    log.write_bytes(b"")
    cfg.vllm.log = str(log)
    monitor = FixedMonitor(cfg, await seed_snapshot(cfg), read_only=False)
    monitor.transports[cfg.head.name] = LocalTransport(cfg.head.name)
    backend = LiveBackend(cfg, monitor=monitor)
    return SparkApp(backend, max_log_lines=max_log_lines), backend, log


async def until(pilot, pred, timeout: float, what: str) -> float:
    return await wait_until(pilot, pred, timeout, what)


async def following(pilot, backend: LiveBackend) -> None:
    await until(
        pilot,
        lambda: backend._follower is not None and backend._follower.inode is not None,
        20,
        "the log follower to start",
    )


async def stop_following(backend: LiveBackend) -> None:
    """End the follower and reap its `tail` process before the test's event loop closes."""
    f = backend._follower
    if f is not None:
        f.stop()
        if f._task is not None:
            await asyncio.gather(f._task, return_exceptions=True)
    await asyncio.sleep(0.2)  # the subprocess transport closes a little after the exit


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def terminal_output(app: SparkApp) -> tuple[list[str], str]:
    """Every segment's text of the whole screen, and the bytes Textual would write."""
    update = app.screen._compositor.render_update(full=True)
    texts = [seg.text for line in update.strips for strip in line for seg in strip]
    return texts, update.render_segments(app.console)


def text_styles(view: LogView, entry) -> list:
    """The styles of the rendered text of a log entry (its marker column dropped)."""
    segs = list(view._strip(entry))
    return [s.style for s in segs[1:] if s.text]


def assert_unstyled(view: LogView, entry) -> None:
    for style in text_styles(view, entry):
        if style is None:
            continue
        assert style.color is None and style.bgcolor is None, (entry.text[:60], style)
        assert not (style.bold or style.reverse or style.italic or style.underline), style
        assert style.link is None and not style.meta, style


async def test_hostile_bytes_are_shown_literally_and_inert(tmp_path):
    app, backend, log = await make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await following(pilot, backend)
        view = app.screen.query_one(LogView)
        append(log, b"reference plain line\n")
        append(log, b"A" * BIG + b" tail of the 2 MB line\n")
        for data in HOSTILE_LINES.values():
            append(log, data + b"\n")
        append(log, b"last line\n")
        await until(
            pilot, lambda: len(view.entries) >= 3 + len(HOSTILE_LINES), 20, "every line in the pane"
        )
        await pilot.wait_for_scheduled_animations()  # drawn (the pane syncs on a timer)
        assert app.is_running
        entries = view.entries
        assert [e.text for e in entries][0] == "reference plain line"
        assert entries[-1].text == "last line" and len(entries) == 3 + len(HOSTILE_LINES)
        big = entries[1]
        assert big.text.startswith("A" * 4000) and "line truncated" in big.text
        assert len(big.text) < 70 * 1024  # the follower caps a line; the pane caps drawing
        by_name = dict(zip(HOSTILE_LINES, entries[2:-1], strict=True))

        # Markup is text: brackets visible, exactly as written, nothing applied.
        assert by_name["markup"].text == HOSTILE_LINES["markup"].decode()
        # ANSI/OSC sequences are dropped, the words between them stay.
        ansi = by_name["ansi"].text
        assert "red" in ansi and "home" in ansi and "after" in ansi
        # Invalid UTF-8 becomes U+FFFD; the valid text around it stays.
        assert by_name["utf8"].text.startswith("bad utf8 \ufffd\ufffd\ufffd( and a lone ")
        assert by_name["utf8"].text.endswith(" end")
        assert by_name["c1"].text.startswith("c1 ") and by_name["c1"].text.endswith(" end")
        assert "bell" in by_name["nul"].text and "EVIL end" in by_name["nul"].text
        for e in entries:
            assert not CONTROL.search(e.text), (e.text[:80], CONTROL.search(e.text))
            assert_unstyled(view, e)
            rendered = "".join(s.text for s in view._strip(e))
            assert not CONTROL.search(rendered)
        assert "[bold red]x[/]" in "".join(s.text for s in view._strip(by_name["markup"]))

        view.scroll_end(animate=False)
        await until(
            pilot,
            lambda: any("[bold red]x[/]" in t for t in terminal_output(app)[0]),
            5,
            "the screen updated after the scroll (the markup line in view)",
        )
        texts, raw = terminal_output(app)
        assert any("[bold red]x[/]" in t for t in texts)  # on screen, literally
        assert not [t for t in texts if CONTROL.search(t)]
        assert not HOSTILE_SEQ.search(raw), HOSTILE_SEQ.search(raw)

        # still answers keys
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), 5, "help")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen), 5, "help closed")
        await stop_following(backend)


async def test_hostile_crash_line_becomes_an_inert_finding(tmp_path):
    """A log line that the knowledge base recognises, laced with escapes and markup: the
    finding (list and detail) shows its text without letting any of it through."""
    evil = "\x1b]52;c;cHduZWQ=\x1b\\\x1b[2J\u009b31m[bold red]x[/]\x1b[31m"
    lines = [ln[:20] + evil + ln[20:] for ln in seed_log_lines()]
    app, backend, log = await make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await following(pilot, backend)
        append(log, ("\n".join(lines) + "\n").encode())
        flist = app.screen.query_one(FindingsList)
        await until(
            pilot,
            lambda: any(k.startswith("log:") for k in flist._keys),
            20,
            "a finding from the hostile log",
        )
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: len(view.entries) == len(lines), 20, "every line")
        assert [e for e in view.entries if e.finding], "no log line was marked"
        flist.highlighted = next(i for i, k in enumerate(flist._keys) if k.startswith("log:"))
        await detail_follows(pilot)
        finding = app.screen.query_one(FindingDetail).finding
        assert finding is not None and finding.source == "log" and finding.text
        detail = app.screen.query_one(FindingDetail).query_one("#finding-text", Static)
        shown = detail.content.plain
        assert "[bold red]x[/]" in shown  # literally
        assert not CONTROL.search(shown.replace("\n", "")), repr(CONTROL.search(shown))
        for f in app._all_findings():
            for text in (f.message, f.text or "", f.title or ""):
                assert not CONTROL.search(text.replace("\n", "")), (f.id, text[:120])
        texts, raw = terminal_output(app)
        assert not [t for t in texts if CONTROL.search(t)]
        assert not HOSTILE_SEQ.search(raw), HOSTILE_SEQ.search(raw)
        await stop_following(backend)


async def test_a_flood_of_100k_lines_keeps_the_console_responsive(tmp_path):
    n = 100_000
    app, backend, log = await make_app(tmp_path)
    gaps: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await following(pilot, backend)
        view = app.screen.query_one(LogView)
        last = [time.monotonic()]

        def tick() -> None:
            now = time.monotonic()
            gaps.append(now - last[0])
            last[0] = now

        timer = app.set_interval(0.02, tick)
        t0 = time.monotonic()
        append(log, "".join(f"INFO short line {i}\n" for i in range(1, n + 1)).encode())
        await until(pilot, lambda: view._seq >= n // 10, 30, "the flood to start arriving")
        # mid-flood: a key still opens help promptly
        k0 = time.monotonic()
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), 5, "help mid-flood")
        key_latency = time.monotonic() - k0
        await pilot.press("escape")
        await until(pilot, lambda: view._seq >= n, 60, f"all {n} lines")
        ingest = time.monotonic() - t0
        timer.stop()
        assert app.is_running
        assert view.entries[-1].text == f"INFO short line {n}" and view._seq == n
        assert len(view.entries) <= view.max_lines + view.max_lines // 20  # pruned in chunks
        # the retained lines are the newest ones, in order, none missing or repeated
        first = int(view.entries[0].text.rsplit(" ", 1)[1])
        assert [e.text for e in view.entries] == [
            f"INFO short line {i}" for i in range(first, n + 1)
        ]
        worst = max(gaps)
        await stop_following(backend)
    print(
        f"hostile flood: {n} lines in {ingest:.1f}s, key->help {key_latency * 1000:.0f} ms, "
        f"worst event-loop stall {worst * 1000:.0f} ms"
    )
    assert key_latency < 5.0 and worst < 2.0


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
async def test_each_hostile_line_alone_in_the_filter_and_copy_paths(tmp_path, name):
    """Filter on the hostile text itself, copy the view: nothing breaks, text stays text."""
    app, backend, log = await make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await following(pilot, backend)
        append(log, HOSTILE_LINES[name] + b"\nINFO plain\n")
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: len(view.entries) == 2, 10, "both lines")
        word = view.entries[0].text[:6]
        await pilot.press("slash")
        await pilot.press(*[c for c in word if c.isalnum()] or ["x"])
        await pilot.press("enter")
        await until(pilot, lambda: app.focused is view, 5, "the filter kept, the view focused")
        app.screen.query_one(LogView).focus()
        await pilot.press("c")
        await pilot.pause()  # one frame: the copy's notice
        assert app.is_running
        assert not CONTROL.search(app.clipboard or "")
        await stop_following(backend)


async def test_the_real_followers_word_on_the_stream_reaches_the_status_line(tmp_path):
    app, backend, log = await make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await following(pilot, backend)
        status = app.screen.query_one("#log-status")
        await until(
            pilot,
            lambda: f"following {log} on spark-1" in str(status.render()),
            10,
            "the follower's first word in the status line",
        )
        append(log, b"one\ntwo\n")
        await until(pilot, lambda: len(app.log_view.entries) == 2, 10, "two lines")
        log.write_bytes(b"")  # truncated, as a new `vllm serve > vllm.log` does
        append(log, b"three\n")
        await until(
            pilot,
            lambda: "was truncated" in str(status.render()),
            10,
            "the truncation in the status line",
        )
        await until(pilot, lambda: len(app.log_view.entries) == 3, 10, "the new content")
        assert [e.text for e in app.log_view.entries] == ["one", "two", "three"]
        await stop_following(backend)
