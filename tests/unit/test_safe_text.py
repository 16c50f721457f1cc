"""Node-sent text is made terminal-safe before anything shows it."""

from __future__ import annotations

import dataclasses

from sparktui.core.model import Container, Finding, NodeState, RayNode
from sparktui.core.safe_text import clean, clean_text, sanitize

HOSTILE = "a\x1b[2J\x1b]0;pwned\x07b\x9b31mc\x1bMd\u202ee\x00f\rg\x7fh"


def _unsafe(s: str) -> list[str]:
    return [
        c
        for c in s
        if (ord(c) < 32 and c not in "\t\n")
        or 0x7F <= ord(c) <= 0x9F
        or 0x202A <= ord(c) <= 0x202E
        or 0x2066 <= ord(c) <= 0x2069
    ]


def test_clean_drops_sequences_and_replaces_controls():
    assert clean(HOSTILE) == "ab\ufffd31mcd\ufffde\ufffdf\ufffdg\ufffdh"
    assert _unsafe(clean(HOSTILE)) == []
    assert clean("INFO\tok\r\n") == "INFO    ok"


def test_clean_text_keeps_safe_text_as_is_and_lines_apart():
    text = "first line\nsecond\tline"
    assert clean_text(text) is text
    assert clean_text("one\r\ntwo\x1b[1m!") == "one\ntwo!"


def test_sanitize_cleans_every_string_in_node_data_in_place():
    state = NodeState(
        "spark-1",
        "h",
        "head",
        "198.19.1.11",
        error=HOSTILE,
        containers=[Container(HOSTILE, "img", "running", HOSTILE, labels={HOSTILE: HOSTILE})],
        env={"NCCL_SOCKET_IFNAME": HOSTILE},
    )
    rows = [RayNode("id", "198.19.1.11", False, death_reason=HOSTILE)]
    assert sanitize(state) is state and sanitize(rows) is rows
    strings: list[str] = []

    def collect(o) -> None:
        if isinstance(o, str):
            strings.append(o)
        elif isinstance(o, (list, tuple)):
            for v in o:
                collect(v)
        elif isinstance(o, dict):
            for k, v in o.items():
                collect(k)
                collect(v)
        elif dataclasses.is_dataclass(o):
            for f in dataclasses.fields(o):
                collect(getattr(o, f.name))

    collect(state)
    collect(rows)
    assert sum(s == clean_text(HOSTILE) for s in strings) == 7
    assert all(_unsafe(s) == [] for s in strings)


def test_frozen_findings_are_left_alone_and_tuples_rebuilt():
    f = Finding("x", "error", None, "msg")
    holder = {"f": f, "t": (HOSTILE, 1)}
    sanitize(holder)
    assert holder["f"] is f
    assert holder["t"] == (clean_text(HOSTILE), 1)
