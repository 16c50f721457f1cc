"""The main screen in every shipped theme (pytest-textual-snapshot). Regenerate with
`pytest tests/tui/test_snapshots.py --snapshot-update` after an intended change."""

from __future__ import annotations

import pytest

from tests.tui.scenes import SIZE, THEMES, feeder, main_screen_app


@pytest.mark.parametrize("theme", THEMES)
def test_main_screen(snap_compare, theme):
    app, backend = main_screen_app(theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=feeder(backend))


def test_main_screen_read_only(snap_compare):
    app, backend = main_screen_app("sparktui-dark", read_only=True)
    assert snap_compare(app, terminal_size=SIZE, run_before=feeder(backend))
