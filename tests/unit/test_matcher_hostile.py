"""Hostile input: ANSI, invalid UTF-8, Rich markup, binary, multi-megabyte lines.

Property: whatever surrounds a known signature line, the matcher still finds it on the
right line with the right capture, never raises, and noise alone never raises an alarm.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktui.commands.diagnose import plain
from sparktui.knowledge import Matcher, diagnose_bytes, load_builtin
from sparktui.knowledge.matcher import MAX_TEXT

M = Matcher(load_builtin())
SIG = b"OSError: [Errno 98] Address already in use"
PG = (
    b"\x1b[33m(autoscaler +5s)\x1b[0m Error: No available node types can fulfill resource "
    b"request {'GPU': 1.0, 'node:10.1.2.3': 0.001}. Add suitable node types."
)

ansi = st.sampled_from(
    [
        b"\x1b[31m",
        b"\x1b[0m",
        b"\x1b[1;32;40m",
        b"\x1b]0;title\x07",
        b"\x1b[2K",
        b"\x1b[?25l",
        b"\x1bM",
    ]
)
markup = st.sampled_from(
    [
        b"[bold red]",
        b"[/]",
        b"[link=file:///etc/passwd]x[/link]",
        b"[@click=app.quit]",
        b"\\[escaped]",
        b"[red",
    ]
)
invalid_utf8 = st.sampled_from(
    [b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xf0\x9f\x92", b"\x80", b"\xed\xa0\x80"]
)
printable = st.binary(max_size=80).map(lambda b: b.replace(b"\n", b" "))
noise_piece = st.one_of(ansi, markup, invalid_utf8, printable, st.just(b"\x00"), st.just(b"\r"))
noise_line = st.lists(noise_piece, max_size=8).map(b"".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(noise_line, max_size=20),
    after=st.lists(noise_line, max_size=20),
    pre=st.sampled_from(
        [
            b"",
            b"(APIServer pid=7) ERROR 11-29 22:00:01 [x.py:1] ",
            b"\x1b[36m(RayWorkerWrapper pid=9, ip=10.9.9.9)\x1b[0m ",
        ]
    ),
    split=st.integers(min_value=1, max_value=4096),
)
def test_signature_found_on_its_line_whatever_surrounds_it(before, after, pre, split):
    data = b"\n".join([*before, pre + SIG, *after]) + b"\n"
    sc = M.scanner()
    hits = []
    for i in range(0, len(data), split):  # any chunking gives the same answer
        hits += sc.feed(data[i : i + split])
    hits += sc.close()
    lines = [h.line for h in hits if h.id == "port.errno98"]
    assert len(before) + 1 in lines


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(noise_line, max_size=40))
def test_noise_alone_never_crashes_or_alarms(lines):
    findings = diagnose_bytes(b"\n".join(lines), M)
    assert [f for f in findings if f.severity == "error"] == []


@settings(max_examples=60, deadline=None)
@given(junk=st.binary(min_size=0, max_size=3000))
def test_binary_input_is_handled(junk):
    findings = diagnose_bytes(junk + b"\n" + PG + b"\n" + junk, M)
    assert findings[0].category == "placement_group_ip_mismatch"
    assert findings[0].captures["ip"] == "10.1.2.3"


def test_two_megabyte_lines_stay_bounded_and_still_match():
    big = b"A" * (2 << 20)
    data = big + b"\n" + big + SIG + b"\n" + b"x" * (3 << 20) + b"\n" + SIG + b"\n"
    hits = [h for h in M.scan_bytes(data) if h.id == "port.errno98"]
    assert [h.line for h in hits] == [2, 4]
    assert all(len(h.text) <= MAX_TEXT + 1 for h in hits)


def test_line_longer_than_the_partial_limit_is_cut_not_buffered_forever():
    sc = M.scanner()
    for _ in range(12):  # 12 MiB without a newline
        assert sc.feed(b"B" * (1 << 20)) == []
    assert len(sc._carry) <= 8 << 20
    assert [h.id for h in sc.feed(SIG + b"\n") + sc.close()] == ["port.errno98"]


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=300))
def test_plain_output_never_carries_control_characters(text):
    out = plain(text)
    assert not any(ord(c) < 32 or ord(c) == 127 or 0x80 <= ord(c) < 0xA0 for c in out)


@pytest.mark.parametrize(
    "payload",
    [
        b"[bold red]OSError: [Errno 98] Address already in use[/bold red]\n",
        b"\x1b]8;;http://evil\x07OSError: [Errno 98] Address already in use\n",
    ],
)
def test_cli_prints_markup_literally_and_escapes_controls(payload, tmp_path):
    log = tmp_path / "hostile.log"
    log.write_bytes(b"\xff\xfe garbage \x00\n" + payload)
    r = subprocess.run(
        [sys.executable, "-m", "sparktui", "diagnose", str(log)],
        capture_output=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert r.returncode == 1, r.stderr
    out = r.stdout.decode()
    assert "\x1b" not in out and "\x07" not in out
    if payload.startswith(b"[bold"):
        assert "[bold red]OSError" in out  # shown as text, not interpreted
    j = subprocess.run(
        [sys.executable, "-m", "sparktui", "diagnose", "--json", str(log)],
        capture_output=True,
        timeout=120,
        env=_env(tmp_path),
    )
    data = json.loads(j.stdout)
    assert data["findings"][0]["id"] == "port.errno98"


def _env(tmp_path):
    import os

    env = dict(os.environ)
    env["HOME"] = str(tmp_path)  # no user config is picked up
    env.pop("SPARKTUI_CONFIG", None)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    return env
