"""Text from nodes made safe for a terminal.

Everything a node sends (log lines, `docker ps` fields, environment values, Ray's death
reasons, command output, even an SSH server's disconnect reason) may carry escape
sequences or control characters that a terminal would obey: move the cursor, retitle the
window, rewrite what the operator reads. `clean()` drops ANSI colour/OSC sequences and
replaces every other control character (C0 but tab and newline, DEL, C1, bidi overrides)
with U+FFFD; `sanitize()` cleans every string inside node data in place, so the console,
`sparktui status` and the findings built from it only ever hold clean text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

# CSI (colours, cursor moves), OSC (titles, hyperlinks, clipboard), and two-byte escapes
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# C0 (but tab and newline), DEL, C1 (U+0080..U+009F are 8-bit CSI/OSC/DCS to terminals),
# and the bidi embeddings/overrides/isolates that reorder what is shown
CONTROL_RE = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)

T = TypeVar("T")


def clean(line: str) -> str:
    """One log line for the screen: no line end, tabs expanded, then `clean_text`."""
    return clean_text(line.rstrip("\r\n").expandtabs())


def clean_text(text: str) -> str:
    """Any node-sent text (may span lines): unchanged unless it holds something unsafe."""
    if not CONTROL_RE.search(text):
        return text
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    return CONTROL_RE.sub("\ufffd", text.replace("\r\n", "\n"))


def escape(text: str | None) -> str:
    """Text shown literally, for a report: tabs as spaces, every control character (and
    newline) written as its `\\xNN` / `\\uNNNN` escape, never interpreted."""
    if not text:
        return ""
    text = text.replace("\t", "    ")

    def one(m: re.Match[str]) -> str:
        o = ord(m.group())
        return f"\\x{o:02x}" if o < 256 else f"\\u{o:04x}"

    return _ESCAPED_RE.sub(one, text)


_ESCAPED_RE = re.compile(CONTROL_RE.pattern[:-1] + "\n\t]")


def sanitize(obj: T) -> T:
    """Clean every string in `obj` in place: dataclass fields (not frozen ones), list items,
    dict keys and values; tuples are rebuilt. Returns `obj`."""
    _walk(obj, set())
    return obj


def _clean_value(value: Any, seen: set[int]) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if type(value) is tuple:
        return tuple(_clean_value(v, seen) for v in value)
    _walk(value, seen)
    return value


def _walk(obj: Any, seen: set[int]) -> None:
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            obj[i] = _clean_value(v, seen)
    elif isinstance(obj, dict):
        items = list(obj.items())
        obj.clear()
        for k, v in items:
            obj[clean_text(k) if isinstance(k, str) else k] = _clean_value(v, seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if obj.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            return  # built by us from clean data (Finding), never straight from a node
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            new = _clean_value(v, seen)
            if new is not v:
                setattr(obj, f.name, new)
