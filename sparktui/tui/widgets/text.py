"""Updating a text widget without repainting the whole screen.

`Static.update()` asks for a layout of the screen, and a layout repaints every widget on it.
A refresh tick changes a few words in several widgets (the header's tick, the vLLM strip, each
node pane) whose size stays the same: `set_text` skips an update that changes nothing and lays
the screen out only when the widget's size may change.
"""

from __future__ import annotations

from rich.cells import cell_len
from textual.content import Content
from textual.widgets import Static


def set_text(widget: Static, content: Content | str) -> None:
    """`widget.update(content)`, skipped when the same, with a layout only when needed."""
    old = widget.content
    if old == content:
        return
    widget.update(content, layout=may_resize(widget, old, content))


def may_resize(widget: Static, old: object, new: Content | str) -> bool:
    """Whether `new` in place of `old` may change `widget`'s size (True when unsure)."""
    if not isinstance(old, Content | str):
        return True
    before, after = _lines(old), _lines(new)
    styles = widget.styles
    if styles.width is not None and styles.width.is_auto:  # as wide as its text (a Label)
        if max(before, default=0) != max(after, default=0):
            return True
    else:  # as wide as its container: its text may wrap
        width = widget.content_region.width
        if not width or max(before + after, default=0) > width:
            return True
    if styles.height is not None and not styles.height.is_auto:
        return False  # a fixed height (the vLLM strip's one line)
    return len(before) != len(after)


def _lines(text: Content | str) -> list[int]:
    plain = text.plain if isinstance(text, Content) else text
    return [cell_len(line) for line in plain.split("\n")]
