"""The console app: one screen of node panes, findings, log and vLLM strip over a Backend.

Collectors (monitor ticks, the log follower, actions) run as workers and post dataclass
messages; the monitor is re-armed with `set_timer` after each tick and pauses while a
dialog is up; every worker failure goes through `on_worker_state_changed`. Quitting
closes connections and never stops anything on the nodes.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, OptionList
from textual.worker import Worker, WorkerState

from sparktui import locations
from sparktui.core.model import ClusterSnapshot, Finding, NodeState, sort_findings
from sparktui.tui import actions as registry
from sparktui.tui.backend import Backend, PlanView
from sparktui.tui.messages import ActionFinished, ActionProgress, LogBatch, SnapshotUpdated
from sparktui.tui.screens.confirm import ConfirmScreen
from sparktui.tui.screens.help import HelpScreen
from sparktui.tui.screens.progress import ProgressScreen
from sparktui.tui.themes import DEFAULT_THEME, load_themes, slot_defaults
from sparktui.tui.widgets.findings import FindingDetail, FindingsList, finding_key
from sparktui.tui.widgets.header import HeaderBar
from sparktui.tui.widgets.log_pane import LogPane, LogView
from sparktui.tui.widgets.node_pane import NodePane, memory_of
from sparktui.tui.widgets.vllm_strip import VllmStrip

HISTORY = 60  # memory samples kept per node (sparkline)
COPY_MAX_LINES = 1000  # OSC 52 payloads beyond ~100 KB are dropped by some terminals


class MainScreen(Screen):
    """The console's one screen. Its bindings come from the registry (see main_screen)."""

    AUTO_FOCUS = "#findings"

    def __init__(self, backend: Backend, max_log_lines: int) -> None:
        super().__init__(id="main")
        self.backend = backend
        self.max_log_lines = max_log_lines

    def compose(self) -> ComposeResult:
        cfg = self.backend.cfg
        yield HeaderBar(cfg.cluster_name, read_only=self.backend.read_only,
                        demo=self.backend.demo, interval=cfg.refresh_interval)
        yield VllmStrip(cfg.vllm.port)
        with Horizontal(id="nodes"):
            for n in cfg.nodes:
                yield NodePane(NodeState(name=n.name, host=n.host, role=n.role,
                                         configured_ip=n.ip, error="probing…"),
                               n.container.name)
        with Horizontal(id="middle"):
            yield FindingsList()
            yield FindingDetail()
        yield LogPane(self.backend.log_label, self.max_log_lines)
        yield Footer()

    def on_mount(self) -> None:
        self.app.call_later(self.app.main_ready)  # type: ignore[attr-defined]


def main_screen(backend: Backend, max_log_lines: int) -> MainScreen:
    """A MainScreen whose bindings are the registry's for this mode (read-only or not)."""
    cls = type("MainScreen", (MainScreen,),
               {"BINDINGS": registry.bindings(backend.read_only)})
    return cls(backend, max_log_lines)


class SparkApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "sparktui"
    BINDINGS = [Binding("ctrl+c", "help_quit", show=False, system=True)]

    def __init__(self, backend: Backend, *, theme: str | None = None,
                 user_themes_dir: Path | None = None, max_log_lines: int = 20000,
                 poll: bool = True, follow_log: bool = True) -> None:
        super().__init__()
        self.backend = backend
        self.cfg = backend.cfg
        self.read_only = backend.read_only
        self.max_log_lines = max_log_lines
        self._poll_enabled = poll
        self._follow_enabled = follow_log
        self._notes: list[tuple[str, str]] = []  # (message, severity) shown once mounted
        themes = load_themes(user_themes_dir)
        for t in themes.themes.values():
            self.register_theme(t)
        self.theme_sources = themes.sources
        for err in themes.errors:
            self._notes.append((f"Theme file skipped: {err}", "warning"))
        wanted = theme or self.cfg.theme or DEFAULT_THEME
        if wanted not in themes.themes and wanted not in self.available_themes:
            if not themes.errors:
                self._notes.append((f"No theme named '{wanted}'; using {DEFAULT_THEME}.",
                                    "warning"))
            else:
                self._notes[-1] = (self._notes[-1][0] + f"; using {DEFAULT_THEME}.", "warning")
            wanted = DEFAULT_THEME
        self._wanted_theme = wanted
        self.snapshot: ClusterSnapshot | None = None
        self.history: dict[str, deque[float]] = {}
        self.log_findings: dict[str, Finding] = {}
        self.doctor_findings: list[Finding] = []
        self.running_action: str | None = None
        self._progress: ProgressScreen | None = None
        self._last_error: dict[str, str] = {}
        self._poll_timer = None
        self._log_applied = asyncio.Event()
        self._gc_threshold: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ setup

    def get_theme_variable_defaults(self) -> dict[str, str]:
        theme = self.get_theme(self.theme) if self.is_running else None
        return slot_defaults(theme)

    def get_default_screen(self) -> Screen:
        return main_screen(self.backend, self.max_log_lines)

    def on_mount(self) -> None:
        self.theme = self._wanted_theme
        unknown = registry.unknown_keymap_ids(self.cfg.keymap)
        keymap = {k: v for k, v in self.cfg.keymap.items() if k not in unknown}
        if keymap:
            self.set_keymap(keymap)
        if unknown:
            known = ", ".join(a.id for a in registry.REGISTRY)
            self._notes.append((f"keymap: unknown action '{unknown[0]}' (known: {known})",
                                "warning"))
        for message, severity in self._notes:
            self.notify(message, severity=severity, timeout=10)  # type: ignore[arg-type]

    def main_ready(self) -> None:
        """The main screen is composed: start the collectors."""
        self._quiet_gc()
        if self._poll_enabled:
            self._poll()
        if self._follow_enabled:
            self._start_log()

    async def on_unmount(self) -> None:
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
            gc.unfreeze()
            self._gc_threshold = None
        try:
            await asyncio.wait_for(self.backend.close(), 5)
        except Exception:  # closing must not turn a quit into a crash
            pass

    def _quiet_gc(self) -> None:
        """Keep the cyclic garbage collector's full collections short and rare.

        A log flood adds ~20k long-lived entries a second; CPython then makes a full
        collection about every second, and each walked every object of the app (imports,
        widgets, styles): pauses of 100-400 ms on a busy machine, keys waiting behind them.
        What exists now lives as long as the app: frozen, the collector skips it; and full
        collections wait for 10x more younger ones. Both are undone when the app ends.
        """
        if self._gc_threshold is None:
            self._gc_threshold = gc.get_threshold()
            gc.freeze()
            young, middle, _full = self._gc_threshold
            gc.set_threshold(young, middle, 100)

    # ------------------------------------------------------------------ collectors

    def _dialog_open(self) -> bool:
        return len(self.screen_stack) > 1

    def _poll(self) -> None:
        """One monitor tick in a worker; the worker's end re-arms the timer."""
        self._poll_timer = None
        if self._dialog_open():
            self.header.set_refresh("refresh paused (dialog open)")
            self._poll_timer = self.set_timer(0.5, self._poll)
            return
        self.run_worker(self._refresh(), name="refresh", group="refresh", exclusive=True,
                        exit_on_error=False)

    async def _refresh(self) -> None:
        snapshot = await self.backend.refresh()
        self.post_message(SnapshotUpdated(snapshot))

    def _start_log(self) -> None:
        self.run_worker(self._follow_log(), name="log", group="log", exclusive=True,
                        exit_on_error=False)

    async def _follow_log(self) -> None:
        # One batch in flight: the next is posted once the pane has applied this one.
        # Meanwhile the follower's bounded queue (and, through it, the node) holds the rest,
        # so a flood never piles up in the app's message queue ahead of key presses.
        applied = self._log_applied = asyncio.Event()
        applied.set()
        async for node, lines, events in self.backend.follow_log():
            if lines or events:
                await applied.wait()
                applied.clear()
                self.post_message(LogBatch(node, list(lines), list(events)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every collector's end and every failure, in one place."""
        worker, state = event.worker, event.state
        if state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        group = worker.group
        error = worker.error if state == WorkerState.ERROR else None
        if group == "refresh":
            if error is not None:
                self._report("refresh", f"Refresh failed: {type(error).__name__}: {error}")
                self.header.set_refresh(f"refresh failed: {error}", stale=True)
            if self._poll_enabled and self._poll_timer is None and self.is_running:
                self._poll_timer = self.set_timer(self.cfg.refresh_interval, self._poll)
        elif group == "log" and state != WorkerState.CANCELLED:
            why = f"{type(error).__name__}: {error}" if error else "the log stream ended"
            self._report("log", f"Log follower stopped ({why}); retrying in 5 s.")
            self.set_timer(5, self._start_log)
        elif group == "action" and error is not None:
            self.post_message(ActionFinished(self.running_action or "action", False,
                                             f"{type(error).__name__}: {error}"))
        elif group == "save" and error is not None:
            self.notify(f"Could not save the log: {error}", severity="error")

    def _report(self, what: str, message: str) -> None:
        """Notify a collector problem once until it changes."""
        if self._last_error.get(what) != message:
            self._last_error[what] = message
            self.notify(message, severity="error", timeout=8)

    # ------------------------------------------------------------------ widgets

    @property
    def header(self) -> HeaderBar | _Null:
        if not self.screen_stack:
            return _Null()
        return self.screen_stack[0].query_one(HeaderBar)

    def _main_query(self, widget_type):
        return self.screen_stack[0].query_one(widget_type)

    @property
    def log_view(self) -> LogView:
        return self._main_query(LogView)

    @property
    def findings_list(self) -> FindingsList:
        return self._main_query(FindingsList)

    def on_snapshot_updated(self, message: SnapshotUpdated) -> None:
        snap = message.snapshot
        self.snapshot = snap
        self._last_error.pop("refresh", None)
        main = self.screen_stack[0]
        panes = {p.node_name: p for p in main.query(NodePane)}
        for node in snap.nodes:
            hist = self.history.setdefault(node.name, deque(maxlen=HISTORY))
            mem = memory_of(node)
            if mem is not None and node.reachable:
                hist.append(round(mem.fraction * 100, 1))
            pane = panes.get(node.name)
            if pane is None:
                pane = NodePane(node)
                main.query_one("#nodes").mount(pane)
            pane.update_state(node, list(hist))
        main.query_one(VllmStrip).update_status(snap.vllm)
        down = sum(1 for n in snap.nodes if not n.reachable)
        text = f"refresh {self.cfg.refresh_interval:g}s · tick {snap.tick}"
        if snap.ray_error and snap.ray_error != "not read yet":
            text += f" · Ray: {snap.ray_error}"
        if down:
            text += f" · {down} node{'s' if down > 1 else ''} down"
        self.header.set_refresh(text, stale=bool(down))
        if self.log_findings:
            self._join_log_findings()
        self._show_findings()

    def _all_findings(self) -> list[Finding]:
        out: dict[str, Finding] = {}
        for f in (*(self.snapshot.findings if self.snapshot else ()), *self.doctor_findings,
                  *self.log_findings.values()):
            out.setdefault(finding_key(f), f)
        return sort_findings(list(out.values()))

    def _show_findings(self) -> None:
        flist = self.findings_list
        flist.set_findings(self._all_findings())
        self.screen_stack[0].query_one(FindingDetail).show(flist.selected)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if isinstance(event.option_list, FindingsList):
            self.screen_stack[0].query_one(FindingDetail).show(event.option_list.selected)

    def on_log_batch(self, message: LogBatch) -> None:
        try:
            self._apply_log_batch(message)
        finally:
            self._log_applied.set()

    def _apply_log_batch(self, message: LogBatch) -> None:
        if message.events:
            self.screen_stack[0].query_one(LogPane).set_stream_state(message.events[-1])
        view = self.log_view
        entries = view.add_lines(message.node, message.lines)
        if not entries:
            return
        # the knowledge base reads what the pane shows (escapes dropped, controls replaced):
        # a finding quotes its log line, and that text reaches the screen too
        marks = self.backend.scan_log([e.text for e in entries])
        for m in marks:
            view.mark(m.line, m.severity, m.pattern)
        if marks:
            self._join_log_findings()
            self._show_findings()

    def _join_log_findings(self) -> None:
        self.log_findings = {finding_key(f): f
                             for f in self.backend.log_findings(self.snapshot)}

    # ------------------------------------------------------------------ actions

    def action_help_quit(self) -> None:
        """Ctrl+C: never quits by accident; says how to."""
        key = self._key_for("quit")
        self.notify(f"Ctrl+C does not quit. Press {key} to quit — everything on the nodes "
                    "keeps running.", title="Quit?")

    def _key_for(self, action_id: str) -> str:
        a = registry.by_id(action_id)
        key = self.cfg.keymap.get(action_id) or (a.key if a else "?")
        return registry.KEY_DISPLAY.get(key, key)

    def action_refused(self, action_id: str) -> None:
        self.notify(f"Read-only: {action_id} is disabled here (it would change the nodes).",
                    title="READ-ONLY", severity="warning")

    def action_core_action(self, action_id: str) -> None:
        """t / r / s: show the plan, confirm (focus on Cancel), then run it."""
        a = registry.by_id(action_id)
        if self.read_only or a is None or not a.mutating:
            self.action_refused(action_id)
            return
        if self.running_action:
            self.notify(f"{self.running_action} is still running; one action at a time.",
                        severity="warning")
            return
        plan = self.backend.plan(action_id)
        if plan.error:
            self.notify(f"Cannot {action_id}: {plan.error}", severity="error", timeout=10)
            return
        self.push_screen(ConfirmScreen(plan), callback=partial(self._confirmed, plan))

    def _confirmed(self, plan: PlanView, ok: bool | None) -> None:
        if not ok:
            self.notify(f"{plan.action} cancelled — nothing was run.")
            return
        self._run_action(plan)

    def action_preflight(self) -> None:
        """d: the doctor checks; changes nothing, so no confirmation."""
        if self.running_action:
            self.notify(f"{self.running_action} is still running; one action at a time.",
                        severity="warning")
            return
        plan = self.backend.plan("doctor")
        if plan.error:
            self.notify(f"Cannot run preflight: {plan.error}", severity="error")
            return
        self._run_action(plan)

    def _run_action(self, plan: PlanView) -> None:
        self.running_action = plan.action
        self.header.set_action(f"▸ {plan.action} running")
        self._progress = ProgressScreen(plan)
        self.push_screen(self._progress)
        self.run_worker(self._execute(plan.action), name=f"action:{plan.action}",
                        group="action", exit_on_error=False)

    async def _execute(self, action: str) -> None:
        outcome = await self.backend.execute(
            action, lambda p: self.post_message(ActionProgress(p)))
        self.post_message(ActionFinished(action, outcome.ok, outcome.summary,
                                         list(outcome.findings)))

    def on_action_progress(self, message: ActionProgress) -> None:
        if self._progress is not None:
            self._progress.update_progress(message.progress)

    def on_action_finished(self, message: ActionFinished) -> None:
        self.running_action = None
        self.header.set_action("")
        if self._progress is not None:
            self._progress.finish(message.ok, message.summary)
        if message.action == "doctor":
            self.doctor_findings = list(message.findings)
            self._show_findings()
        self.notify(f"{message.action}: {message.summary}",
                    severity="information" if message.ok else "error", timeout=10)
        if self._poll_enabled and self._poll_timer is not None:  # refresh soon after
            self._poll_timer.stop()
            self._poll_timer = self.set_timer(0.2, self._poll)

    def action_filter_log(self) -> None:
        self.screen_stack[0].query_one(LogPane).open_filter()

    def action_toggle_findings_only(self) -> None:
        view = self.log_view
        view.set_findings_only(not view.findings_only)
        self.notify("Log: only lines with findings." if view.findings_only
                    else "Log: every line.", timeout=3)

    def action_toggle_follow(self) -> None:
        view = self.log_view
        view.set_follow(not view.follow)

    def action_copy(self) -> None:
        focused = self.focused
        selected = self.findings_list.selected
        in_findings = focused is not None and (
            isinstance(focused, FindingsList)
            or any(isinstance(a, FindingDetail) for a in focused.ancestors_with_self))
        if in_findings and selected is not None:
            self.copy_to_clipboard(finding_text(selected))
            self.notify(f"Copied finding '{selected.title or selected.id}' to the clipboard.")
            return
        view = self.log_view
        lines = [e.text for e in view.view[-COPY_MAX_LINES:]]
        self.copy_to_clipboard("\n".join(lines))
        self.notify(f"Copied {len(lines)} log line{'s' if len(lines) != 1 else ''} "
                    "to the clipboard.")

    def action_save_log(self) -> None:
        text = self.log_view.visible_text()
        self._save(text)

    @work(thread=True, group="save", exit_on_error=False)
    def _save(self, text: str) -> None:
        directory = locations.state_dir() / "logs"
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = directory / f"{self.cfg.cluster_name}-vllm-{stamp}.log"
        path.write_text(text + ("\n" if text else ""), encoding="utf-8")
        lines = text.count("\n") + 1 if text else 0
        self.call_from_thread(self.notify, f"Saved {lines} lines to {path}", timeout=10)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        rows = [(self._key_for(a.id), a.id, a.description, a.mutating)
                for a in registry.available(self.read_only)]
        self.push_screen(HelpScreen(rows, self.read_only))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for cmd in super().get_system_commands(screen):
            if cmd.title != "Quit":
                yield cmd
        for a in registry.available(self.read_only):
            action = a.action.removeprefix("app.")
            yield SystemCommand(f"{a.label} ({self._key_for(a.id)})", a.description,
                                partial(self.run_action, action))


def finding_text(f: Finding) -> str:
    """A finding as plain text (clipboard)."""
    out = [f"{f.severity.upper()}: {f.title or f.id} [{f.node or 'cluster'}]", f.message]
    if f.explanation:
        out += ["", f.explanation.strip()]
    if f.fix:
        out += ["", "Fix:", f.fix.strip()]
    if f.text:
        out += ["", f"Log line {f.line}: {f.text.strip()}"]
    out += list(f.links)
    return "\n".join(out)


class _Null:
    """Stands in for the header before the main screen exists."""

    def set_refresh(self, *a, **k) -> None: ...

    def set_action(self, *a, **k) -> None: ...
