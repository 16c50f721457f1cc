"""The console driven through Pilot: keys, read-only, confirmation, filter, findings."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Static

from sparktui.tui.app import SparkApp
from sparktui.tui.screens.confirm import ConfirmScreen
from sparktui.tui.screens.help import HelpScreen
from sparktui.tui.screens.progress import ProgressScreen
from sparktui.tui.widgets.findings import FindingDetail, FindingsList
from sparktui.tui.widgets.log_pane import LogPane, LogView
from sparktui.tui.widgets.node_pane import NodePane
from tests.tui.support import (
    TestBackend,
    detail_follows,
    log_applied,
    seed_config,
    seed_log_lines,
    seed_snapshot,
    shown,
    started,
    wait_until,
)

SIZE = (160, 50)


async def make_app(
    *,
    read_only: bool = False,
    theme: str | None = None,
    themes_dir=None,
    max_log_lines: int = 20000,
    **cfg_overrides,
) -> tuple[SparkApp, TestBackend]:
    cfg = seed_config(**cfg_overrides)
    backend = TestBackend(cfg, await seed_snapshot(cfg), read_only=read_only)
    app = SparkApp(backend, theme=theme, user_themes_dir=themes_dir, max_log_lines=max_log_lines)
    return app, backend


def plain(widget: Static) -> str:
    content = widget.content
    return getattr(content, "plain", str(content))


def notices(app: SparkApp) -> list[str]:
    return [n.message for n in app._notifications]


def detail_text(app: SparkApp) -> str:
    return plain(app.screen.query_one(FindingDetail).query_one("#finding-text", Static))


# ------------------------------------------------------------------ main screen


async def test_node_panes_show_both_ips_and_mismatch():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        panes = {p.node_name: p for p in app.screen.query(NodePane)}
        s1 = plain(panes["spark-1"].query_one(".node-body", Static))
        s2 = plain(panes["spark-2"].query_one(".node-body", Static))
        assert "config 192.168.200.12" in s1 and "ray    10.1.230.180" in s1
        assert "≠ MISMATCH" in s1 and panes["spark-1"].has_class("-mismatch")
        assert "192.168.200.13" in s2 and "MISMATCH" not in s2 and panes["spark-2"].has_class("-ok")
        assert "VLLM_HOST_IP 192.168.200.12" in s1
        assert "unified" in s1 and "GiB" in s1


async def test_footer_keys_and_help_list_every_action():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        keys = {b.binding.id: k for k, b in app.screen.active_bindings.items() if b.binding.id}
        for action_id, key in (
            ("teardown", "t"),
            ("restart", "r"),
            ("serve", "s"),
            ("preflight", "d"),
            ("filter", "slash"),
            ("findings", "f"),
            ("log", "l"),
            ("copy", "c"),
            ("help", "question_mark"),
            ("quit", "q"),
        ):
            assert keys.get(action_id) == key, action_id
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = plain(app.screen.query_one("#help-text", Static))
        for action_id in (
            "teardown",
            "restart",
            "serve",
            "preflight",
            "filter",
            "findings",
            "log",
            "copy",
            "help",
            "quit",
        ):
            assert action_id in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_palette_offers_the_actions():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert any(t.startswith("Teardown") for t in titles)
        assert any(t.startswith("Preflight") for t in titles)


async def test_ctrl_c_does_not_quit():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: notices(app), what="a notice")
        assert app.is_running
        assert any("Press q to quit" in m for m in notices(app))


async def test_quit_sends_nothing_that_changes_a_node():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("q")
    assert not app.is_running
    assert backend.mutating_sent() == []


async def test_keymap_remaps_an_action():
    app, _ = await make_app(keymap={"teardown": "x"})
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("t")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmScreen)


def test_console_actions_are_the_cores_registry():
    from sparktui.core.actions import ACTIONS
    from sparktui.tui import actions as registry

    for spec in ACTIONS.values():
        ui = next(a for a in registry.REGISTRY if a.core == spec.id)
        assert (ui.label, ui.description, ui.key, ui.mutating) == (
            spec.title,
            spec.description,
            spec.key,
            spec.mutating,
        )
    assert registry.by_id("preflight").core == "doctor"  # the keymap id configs use


async def test_findings_list_posts_selected_and_the_screen_routes_it():
    app, _ = await make_app()
    posted: list[FindingsList.Selected] = []
    async with app.run_test(
        size=SIZE,
        message_hook=lambda m: posted.append(m) if isinstance(m, FindingsList.Selected) else None,
    ) as pilot:
        await started(pilot)
        await detail_follows(pilot)
        flist = app.screen.query_one(FindingsList)
        assert posted and posted[-1].finding is flist.selected is not None
        await pilot.press("down")
        await detail_follows(pilot)
        assert posted[-1].finding is flist.selected
        assert app.screen.query_one(FindingDetail).finding is flist.selected


# ------------------------------------------------------------------ read-only


async def test_read_only_drops_mutating_actions_everywhere():
    app, backend = await make_app(read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.screen.query_one("#badge-readonly").display
        shown = {b.binding.id for b in app.screen.active_bindings.values() if b.binding.show}
        assert not shown & {"teardown", "restart", "serve"}
        assert {"preflight", "filter", "quit"} <= shown
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert not any(t.split()[0] in ("Teardown", "Restart", "Serve") for t in titles)
        for key in ("t", "r", "s"):
            await pilot.press(key)  # the refusal is notified by the key's own action
            assert not isinstance(app.screen, ConfirmScreen)
        assert sum("Read-only" in m for m in notices(app)) == 3
        await pilot.press("question_mark")
        text = plain(app.screen.query_one("#help-text", Static))
        assert "teardown " not in text.split("READ-ONLY")[0]
        assert "READ-ONLY" in text
    assert backend.mutating_sent() == []


async def test_read_only_keymap_moves_the_refusal_with_the_key():
    app, backend = await make_app(read_only=True, keymap={"teardown": "x"})
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("x")
        assert not isinstance(app.screen, ConfirmScreen)
        assert sum("Read-only: teardown" in m for m in notices(app)) == 1
    assert backend.mutating_sent() == []


async def test_read_only_transport_refuses_even_when_asked_directly():
    _, backend = await make_app(read_only=True)
    events = []
    outcome = await backend.execute("teardown", events.append)
    assert not outcome.ok and "read-only" in outcome.summary
    assert backend.mutating_sent() == []
    assert all(t.read_only for t in backend.monitor.transports.values())


# ------------------------------------------------------------------ confirmation


async def test_teardown_confirmation_focuses_cancel_and_shows_commands_per_node():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("t")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.focused is not None and app.focused.id == "cancel"
        text = plain(app.screen.query_one("#confirm-text", Static))
        assert "[spark-1]" in text and "[spark-2]" in text
        assert "$ docker rm -f vllm_node" in text or "docker" in text
        await pilot.press("enter")  # Enter on Cancel: nothing runs
        await wait_until(
            pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="the dialog to close"
        )
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("cancelled" in m for m in notices(app))
    assert backend.mutating_sent() == []


async def test_confirmed_teardown_runs_through_the_actions_layer_with_progress():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("t")
        await pilot.press("tab")  # to the action's own button
        assert app.focused.id == "confirm"
        await pilot.press("enter")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ProgressScreen), what="the progress screen"
        )
        assert isinstance(app.screen, ProgressScreen)
        progress = app.screen
        await wait_until(pilot, lambda: progress.summary is not None, 10, "the action's end")
        assert progress.summary is not None
        assert {p.node for p in progress.rows} == {"spark-1", "spark-2"}
        assert all(p.state != "pending" for p in progress.rows)
    sent = backend.mutating_sent()
    assert sent and all("docker" in " ".join(argv) for argv in sent)


# ------------------------------------------------------------------ findings


async def test_selecting_a_finding_shows_live_names_and_ips():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        flist = app.screen.query_one(FindingsList)
        await wait_until(pilot, lambda: flist._keys, what="the findings listed")
        assert app.focused is flist
        ids = [k.split(":")[1] for k in flist._keys]
        assert "ray-ip-mismatch" in ids and "vllm-host-ip-mismatch" in ids
        while flist.selected is None or flist.selected.id != "vllm-host-ip-mismatch":
            await pilot.press("down")
        await detail_follows(pilot)
        text = detail_text(app)
        assert "spark-1" in text and "10.1.230.180" in text and "192.168.200.12" in text
        assert "Fix" in text


async def test_log_crash_line_becomes_a_finding_with_live_fix_and_is_highlighted():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        lines = seed_log_lines()
        backend.feed(lines)
        view = app.screen.query_one(LogView)
        await shown(pilot, view, len(lines))
        marked = [e for e in view.entries if e.finding]
        assert marked, "no log line was marked by the knowledge base"
        assert any("placement group" in e.text or "node:192.168.200.12" in e.text for e in marked)
        flist = app.screen.query_one(FindingsList)
        log_keys = [k for k in flist._keys if k.startswith("log:")]
        assert log_keys
        flist.highlighted = flist._keys.index(log_keys[0])
        await detail_follows(pilot)
        text = detail_text(app)
        assert "On this cluster:" in text and "10.1.230.180" in text and "spark-1" in text


async def test_copy_puts_the_selected_finding_on_the_clipboard():
    app, _ = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await wait_until(
            pilot, lambda: app.main.findings_list.selected is not None, what="a finding selected"
        )
        await pilot.press("c")
        assert "Fix:" in app.clipboard and "spark-1" in app.clipboard


# ------------------------------------------------------------------ log pane


async def test_filter_narrows_the_log_and_escape_clears_it():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        lines = seed_log_lines()
        backend.feed(lines)
        view = app.screen.query_one(LogView)
        await shown(pilot, view, len(lines))
        total = len(view.view)
        await pilot.press("slash")
        box = app.screen.query_one("#log-filter")
        assert box.display and app.focused is box
        await pilot.press(*"autoscaler")
        await wait_until(pilot, lambda: view.filter_text == "autoscaler", what="the filter")
        assert 0 < len(view.view) < total
        assert all("autoscaler" in e.text.lower() for e in view.view)
        await pilot.press("escape")
        await wait_until(pilot, lambda: view.filter_text == "", what="the filter cleared")
        assert len(view.view) == total and not box.display


async def test_findings_only_toggle():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        lines = seed_log_lines()
        backend.feed(lines)
        view = app.screen.query_one(LogView)
        await shown(pilot, view, len(lines))
        await pilot.press("f")
        assert view.findings_only and view.view and all(e.finding for e in view.view)
        await pilot.press("f")
        assert not view.findings_only and len(view.view) == len(view.entries)


async def test_log_text_is_never_markup():
    app, backend = await make_app()
    nasty = "[bold red]not markup[/] [link=https://x]y[/link] $crash \x1b[31mred\x1b[0m"
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.feed([nasty])
        view = app.screen.query_one(LogView)
        await shown(pilot, view, 1)
        assert (
            view.entries[-1].text == "[bold red]not markup[/] [link=https://x]y[/link] $crash red"
        )
        rendered = "".join(
            seg.text for seg in view.render_line(len(view.view) - 1 - int(view.scroll_offset.y))
        )
        assert "[bold red]not markup[/]" in rendered


async def test_log_is_bounded_and_counts_new_lines_when_scrolled_up():
    app, backend = await make_app(max_log_lines=200)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.feed([f"INFO line {i}" for i in range(1000)])
        view = app.screen.query_one(LogView)
        await shown(pilot, view, 1000)
        assert len(view.entries) <= 210 and view.entries[-1].text == "INFO line 999"
        view.focus()
        await pilot.press("pageup")
        await wait_until(pilot, lambda: not view.following, what="the view to unpin")
        backend.feed(["INFO one more", "INFO and another"])
        await shown(pilot, view, 1002)
        assert view.new_lines == 2
        status = plain(app.screen.query_one(LogPane).query_one("#log-status", Static))
        assert "2 new lines" in status
        await pilot.press("end")
        await wait_until(pilot, lambda: view.following, what="the view to follow again")
        assert view.new_lines == 0 and view.following


async def test_follow_toggle_pauses_the_log():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("l")
        view = app.screen.query_one(LogView)
        assert not view.following
        backend.feed(["INFO a", "INFO b", "INFO c"])
        await shown(pilot, view, 3)
        assert view.new_lines == 3
        await pilot.press("l")
        assert view.following and view.new_lines == 0


async def test_the_log_status_line_says_when_the_stream_is_lost_and_back():
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        status = app.screen.query_one("#log-status")
        backend.feed(["INFO a"], events=["following /tmp/vllm.log on spark-1"])
        await log_applied(pilot, backend)
        assert "following /tmp/vllm.log on spark-1" in str(status.render())
        backend.feed(
            [],
            events=[
                "connection lost: spark-1 (198.18.0.11): SSH disconnected: "
                "\x1b]0;x\x07bye; reconnecting in 0.5s"
            ],
        )
        await log_applied(pilot, backend)
        text = str(status.render())
        assert "connection lost: spark-1" in text and "bye; reconnecting" in text
        assert "\x1b" not in text and "\x07" not in text
        backend.feed(["INFO b"], events=["resumed /tmp/vllm.log at byte 7"])
        await log_applied(pilot, backend)
        assert "resumed /tmp/vllm.log at byte 7" in str(status.render())
        assert [e.text for e in app.log_view.entries][-2:] == ["INFO a", "INFO b"]


async def test_save_log_writes_a_file(tmp_path):
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.feed(["INFO saved line"])
        await log_applied(pilot, backend)
        await pilot.press("w")
        # the save runs in a thread worker that notifies when the file is written
        await wait_until(
            pilot,
            lambda: any(m.startswith("Saved ") for m in notices(app)),
            what="the save worker's notice",
        )
        saved = list((tmp_path / "state" / "sparktui" / "logs").glob("*.log"))
        assert saved and "INFO saved line" in saved[0].read_text()
        assert any(str(saved[0]) in m for m in notices(app))


# ------------------------------------------------------------------ themes


async def test_bad_theme_file_notifies_once_and_falls_back(tmp_path):
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "broken.yaml").write_text("name: broken\nprimary: not-a-colour\n")
    app, _ = await make_app(theme="broken", themes_dir=themes)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.theme == "sparktui-dark"
        msgs = [m for m in notices(app) if "broken.yaml" in m]
        assert len(msgs) == 1 and "sparktui-dark" in msgs[0]


async def test_user_theme_is_loaded_and_unknown_theme_falls_back(tmp_path):
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "mine.yaml").write_text(
        "name: mine\nprimary: '#123456'\nvariables:\n  ip-mismatch: '#ff00ff'\n"
    )
    app, _ = await make_app(theme="mine", themes_dir=themes)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.theme == "mine"
        assert app.theme_variables["ip-mismatch"] == "#ff00ff"
        assert app.theme_variables["node-ok"]  # a slot the file left out: derived default
    app, _ = await make_app(theme="nope")
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        assert app.theme == "sparktui-dark"
        assert any("No theme named 'nope'" in m for m in notices(app))


@pytest.mark.parametrize(
    "name", ["sparktui-dark", "sparktui-light", "sparktui-ansi", "sparktui-high-contrast"]
)
def test_shipped_themes_define_every_slot(name):
    from sparktui.tui.themes import SLOTS, load_themes

    ts = load_themes(None)
    assert not ts.errors
    assert set(SLOTS) <= set(ts.themes[name].variables)


async def test_lines_and_refresh_ticks_repaint_without_laying_the_screen_out(monkeypatch):
    """A layout repaints every widget (20-25 ms a frame on a 2 GHz core): new log lines, and
    a refresh tick that changes words but no size, must not ask for one."""
    from textual.screen import Screen

    from sparktui.tui.widgets.header import HeaderBar

    layouts = []
    real = Screen._refresh_layout

    def counted(self, *args, **kwargs):
        layouts.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    # one refresh tick only: a later tick's text ("tick 9" -> "tick 10") may be wider, and its
    # layout, landing in the checks below, is a right one (a loaded machine saw it in CI)
    app, backend = await make_app(refresh_interval=3600.0)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        view = app.screen.query_one(LogView)
        backend.feed([f"INFO line {i}" for i in range(200)])  # past the pane: a scrollbar
        await shown(pilot, view, 200)
        await pilot.pause(0.2)
        assert view.show_vertical_scrollbar
        before = len(layouts)
        for k in range(5):
            backend.feed([f"INFO more {k}.{i}" for i in range(7)])
            await shown(pilot, view, 200 + 7 * (k + 1))
            await pilot.pause(0.05)
        assert len(layouts) == before, "a log sync laid the whole screen out"
        # the view is at the newest line and the scrollbar's thumb with it
        assert view.scroll_y == view.max_scroll_y
        assert view.vertical_scrollbar.position == view.scroll_y
        header = app.screen.query_one(HeaderBar)
        header.refresh_text = header.refresh_text.replace("s ·", "s  ·", 1)  # one cell wider
        await pilot.pause(0.1)
        grown = len(layouts)
        assert grown > before, "a label that grew must be laid out"
        header.refresh_text = header.refresh_text[:-1] + "x"  # same width
        await pilot.pause(0.1)
        assert len(layouts) == grown


async def test_the_log_scrollbar_draws_again_only_when_its_thumb_moves(monkeypatch):
    """A followed log with thousands of lines keeps its thumb on the same cell while lines
    come: the bar's rows are not drawn again each frame; scrolling up moves it and they are."""
    from textual.scrollbar import ScrollBar

    from sparktui.tui.widgets.log_pane import ThumbScrollBar

    drawn = []
    real = ScrollBar.render

    def counted(self):
        drawn.append(1)
        return real(self)

    monkeypatch.setattr(ScrollBar, "render", counted)
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        view = app.screen.query_one(LogView)
        assert isinstance(view.vertical_scrollbar, ThumbScrollBar)
        backend.feed([f"INFO line {i}" for i in range(5000)])
        await shown(pilot, view, 5000)
        await pilot.pause(0.2)
        assert view.show_vertical_scrollbar and drawn
        before = len(drawn)
        for k in range(5):
            backend.feed([f"INFO more {k}.{i}" for i in range(7)])
            await shown(pilot, view, 5000 + 7 * (k + 1))
            await pilot.pause(0.05)
        assert view.scroll_y == view.max_scroll_y
        assert len(drawn) == before, "the bar was drawn again with its thumb where it was"
        view.focus()
        await pilot.press("home")
        await pilot.pause(0.2)
        assert view.scroll_y == 0
        assert len(drawn) > before, "the thumb moved to the top, the bar must be drawn again"


async def test_a_flood_of_log_lines_is_synced_at_the_frame_tick_not_between_ticks(monkeypatch):
    """Under a flood the pane shows new lines at the screen's next frame tick, before the
    frame is worked out (a timer of its own would land between two ticks and leave the
    lines a frame longer off screen); a quiet line is still shown at once."""
    from sparktui.tui.frames import FrameScreen

    in_tick = [False]
    synced: list[bool] = []
    real_tick = FrameScreen._on_timer_update
    real_sync = LogView._sync

    def tick(self):
        in_tick[0] = True
        try:
            real_tick(self)
        finally:
            in_tick[0] = False

    def sync(self):
        synced.append(in_tick[0])
        real_sync(self)

    monkeypatch.setattr(FrameScreen, "_on_timer_update", tick)
    monkeypatch.setattr(LogView, "_sync", sync)
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        view = app.screen.query_one(LogView)
        await pilot.pause(1.2)  # a quiet spell: the next line is shown at once
        synced.clear()
        backend.feed(["INFO quiet line"])
        await shown(pilot, view, 1)
        assert synced[:1] == [False], "a line after a quiet spell waits for nothing"
        synced.clear()
        for k in range(60):  # about 1k lines/s: fewer a frame than the pane has rows
            backend.feed([f"INFO flood {k}.{i}" for i in range(10)])
            await pilot.pause(0.01)
        await shown(pilot, view, 1 + 60 * 10)
        # the first flood sync has no rate yet (a timer); a batch that comes when a sync is
        # already due is synced at once (the pilot's pauses make every other one so); the
        # rest at the tick - without the frame hook none is
        assert len(synced) >= 10
        assert sum(synced) >= len(synced) // 3, f"flood syncs between ticks: {synced}"
        assert view.scroll_y == view.max_scroll_y


async def test_a_flood_in_the_full_screen_log_syncs_at_the_frame_tick():
    """2k lines/s with the log full screen (55 rows): the rows would allow a sync every
    22 ms, but the pane syncs at the screen's frame tick, never on a timer of its own
    (one came late under load, and lines passed through the pane unseen)."""
    app, backend = await make_app()
    async with app.run_test(size=(200, 60)) as pilot:
        await started(pilot)
        await pilot.press("z")
        await pilot.pause()
        view = app.screen.query_one(LogView)
        assert view.size.height >= 50
        timers = []
        own_timer = view.set_timer

        def set_timer(delay, callback=None, **kw):
            timers.append((round(view._rate), delay))
            return own_timer(delay, callback, **kw)

        view.set_timer = set_timer  # type: ignore[method-assign]
        rates = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k in range(100):  # 20 lines every 10 ms for 1 s
            backend.feed([f"INFO flood line {k}.{i}" for i in range(20)])
            await asyncio.sleep(max(0.0, start + (k + 1) * 0.01 - loop.time()))
            rates.append(view._rate)
        await log_applied(pilot, backend)
        flood = [r for r in rates[20:] if r > 0]
        assert flood and min(flood) > 0.8 * view.size.height / view.SYNC_INTERVAL, flood
        # beyond two pane-heights a frame the pane keeps its timer (see add_lines): a slow
        # machine that bunches the batches may measure such a rate for one sync
        in_frame_regime = [
            t for t in timers if 0 < t[0] and t[0] * view.SYNC_MIN <= 2 * view.size.height
        ]
        assert not in_frame_regime, timers


async def test_a_followed_log_keeps_its_newest_line_in_view_when_the_pane_shrinks():
    """The pane gets fewer rows (a finding arrives and the findings box grows, the terminal
    shrinks): a followed log stays at its end, it does not keep the old scroll offset and
    hide the newest lines under the pane's bottom edge."""
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.feed([f"INFO line {i}" for i in range(200)])
        view = app.screen.query_one(LogView)
        await shown(pilot, view, 200)
        assert view.following and view.scroll_y == view.max_scroll_y > 0
        rows = view.size.height
        await pilot.resize_terminal(SIZE[0], SIZE[1] - 12)
        await wait_until(pilot, lambda: view.size.height < rows, what="the pane to shrink")
        await pilot.pause()
        await wait_until(
            pilot,
            lambda: view.scroll_y == view.max_scroll_y,
            what=f"the view at its end (scroll {view.scroll_y} of {view.max_scroll_y})",
        )
        assert view.following


async def test_a_batch_a_little_taller_than_the_pane_is_drawn_whole_over_two_frames(monkeypatch):
    """More lines came since the last frame than the pane has rows (2k lines/s into 39 rows:
    40 between some frames): the followed pane draws the oldest of them first and the rest
    at the next frame, so no line passes unseen; a batch far taller than the pane (a flood
    the screen cannot carry) still goes straight to its end."""
    drawn: set[int] = set()
    real = LogView.render_lines

    def render_lines(self, crop):
        _, top = self.scroll_offset
        drawn.update(self.view[top + y].seq for y in crop.line_range if top + y < len(self.view))
        return real(self, crop)

    monkeypatch.setattr(LogView, "render_lines", render_lines)
    app, backend = await make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        view = app.screen.query_one(LogView)
        backend.feed([f"INFO line {i}" for i in range(10)])
        await shown(pilot, view, 10)
        await pilot.pause(0.3)
        rows = view.size.height
        first = view.received + 1
        backend.feed([f"INFO batch line {i}" for i in range(rows + 5)])
        await shown(pilot, view, 10 + rows + 5)
        await wait_until(pilot, lambda: view.scroll_y == view.max_scroll_y, what="the end")
        missed = [s for s in range(first, view.received + 1) if s not in drawn]
        assert not missed, f"lines never drawn: {missed} (pane of {rows} rows)"
        assert view.following
        # far behind: the end at once, the lines between pass unseen
        await pilot.pause(0.3)
        first = view.received + 1
        backend.feed([f"INFO flood line {i}" for i in range(3 * rows)])
        await shown(pilot, view, view.received + 3 * rows)
        await wait_until(pilot, lambda: view.scroll_y == view.max_scroll_y, what="the end")
        assert first not in drawn and view.received in drawn
