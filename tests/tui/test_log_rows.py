"""The log view's rows as drawn: cut or padded to the view's width, whatever the line."""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from textual.app import App, ComposeResult
from textual.geometry import Region

from sparktui.tui.widgets.log_pane import LogPane, LogView
from tests.tui.support import wait_until

LINES = [
    "INFO 12-01 09:00:00 [api_server.py:1] short line",
    "INFO 12-01 09:00:00 [loggers.py:123] " + "Avg generation throughput: 12.5 tokens/s, " * 8,
    "ERROR 12-01 09:00:01 [core.py:9] EngineCore failed to start. " + "x" * 300,
    "WARNING 12-01 09:00:02 模型加载失败 (model load failed) " + "宽" * 150,
    "INFO │ box │ drawing " + "─" * 250,
    "",
]


class _App(App):
    def compose(self) -> ComposeResult:
        yield LogPane("spark-1")


async def test_every_row_is_the_line_cut_or_padded_to_the_view_width():
    app = _App()
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(LogView)
        view.add_lines("spark-1", LINES)
        await pilot.pause()
        width = view.size.width
        rows = view.render_lines(Region(0, 0, width, len(LINES)))
        for line, row in zip(LINES, rows, strict=True):
            assert row.cell_length == width, line[:40]
            text = "".join(s.text for s in row)
            assert cell_len(text) == width, line[:40]
            assert text == set_cell_size("  " + line, width), line[:40]


async def test_rows_scrolled_sideways_show_the_columns_scrolled_to():
    app = _App()
    async with app.run_test(size=(120, 30)) as pilot:
        view = app.query_one(LogView)
        view.add_lines("spark-1", LINES[1:3])
        await pilot.pause()
        view.scroll_to(x=10, y=0, animate=False, immediate=True, force=True)
        await pilot.pause()
        assert view.scroll_offset.x == 10
        width = view.size.width
        rows = view.render_lines(Region(0, 0, width, 2))
        for line, row in zip(LINES[1:3], rows, strict=True):
            text = "".join(s.text for s in row)
            assert row.cell_length == width
            assert text == set_cell_size(("  " + line)[view.scroll_offset.x :], width)


def _status(app: App) -> str:
    from textual.widgets import Static

    return str(app.query_one("#log-status", Static).content)


async def test_the_status_line_catches_up_with_the_count_and_shows_a_pause_at_once():
    """Under a flood the line count may lag (at most LogPane.STATUS_EVERY); it catches up,
    and a change other than the count (following -> paused) shows at once."""
    app = _App()
    async with app.run_test(size=(120, 30)) as pilot:
        pane = app.query_one(LogPane)
        view = app.query_one(LogView)
        view.add_lines("spark-1", LINES)
        await pilot.pause()
        for k in range(20):  # a burst, faster than the status redraws
            view.add_lines("spark-1", [f"INFO burst {k}"])
            pane.update_status()
        total = len(view.entries)
        # no line comes after the burst: only the catch-up timer can bring the count (a
        # fixed pause of STATUS_EVERY + 0.2 s was too short on a loaded CI machine)
        await wait_until(
            pilot, lambda: f"{total} lines" in _status(app), timeout=5.0, what="the count"
        )
        view.follow = False
        pane.update_status()
        assert "paused" in _status(app)
