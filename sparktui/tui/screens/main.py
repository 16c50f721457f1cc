"""The console's main screen: node panes, findings, log and vLLM strip over a Backend. It
holds the console's state and does its work; the App around it is a shell.

Collectors (monitor ticks, the log follower, actions) run as this screen's workers and
post dataclass messages to it; the monitor is re-armed with `set_timer` after each tick
and pauses while another screen (a dialog) is up; every worker's end or failure goes
through `on_worker_state_changed`. Widgets post what the operator did
(`FindingsList.Selected`, ...) and the screen routes it. Which actions are offered is
`check_action`'s answer, and that only asks the backend (read-only is the core's call).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from functools import partial
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from sparktui import locations
from sparktui.core.actions import ACTIONS
from sparktui.core.model import ClusterSnapshot, Finding, NodeState, sort_findings
from sparktui.tui import actions as registry
from sparktui.tui import layout
from sparktui.tui.backend import Backend, PlanView, Progress
from sparktui.tui.frames import FrameScreen
from sparktui.tui.messages import ActionFinished, ActionProgress, LogArrived, SnapshotUpdated
from sparktui.tui.screens.confirm import ConfirmScreen
from sparktui.tui.screens.doctor import DoctorScreen
from sparktui.tui.screens.help import HelpScreen
from sparktui.tui.screens.progress import ProgressScreen
from sparktui.tui.widgets.findings import FindingDetail, FindingsList, finding_key
from sparktui.tui.widgets.header import HeaderBar
from sparktui.tui.widgets.log_pane import LogPane, LogView
from sparktui.tui.widgets.node_pane import NodePane, memory_of
from sparktui.tui.widgets.node_table import NodeDetail, NodeTable, counts_by_node
from sparktui.tui.widgets.vllm_strip import VllmStrip

HISTORY = 60  # memory samples kept per node (sparkline)
PROBE_AGAIN = 2.0  # s: a node selected again within this is not probed again
COPY_MAX_LINES = 1000  # OSC 52 payloads beyond ~100 KB are dropped by some terminals


class MainScreen(FrameScreen):
    """The console's one screen, and its controller. Bindings come from the registry."""

    AUTO_FOCUS = "#findings"
    BINDINGS: ClassVar[list[BindingType]] = registry.bindings()

    class Ready(Message):
        """The screen is composed and its collectors are started."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_log_lines: int = 20000,
        poll: bool = True,
        follow_log: bool = True,
    ) -> None:
        super().__init__(id="main")
        self.backend = backend
        self.cfg = backend.cfg
        self.max_log_lines = max_log_lines
        self._poll_enabled = poll
        self._follow_enabled = follow_log
        self.snapshot: ClusterSnapshot | None = None
        self.history: dict[str, deque[float]] = {}
        self.log_findings: dict[str, Finding] = {}
        self.doctor_findings: list[Finding] = []
        self.running_action: str | None = None
        self._progress: ProgressScreen | None = None
        self._last_error: dict[str, str] = {}
        self._poll_timer: Timer | None = None
        self._log_applied = asyncio.Event()
        self.layout_plan: layout.Layout | None = None  # set on every resize (issue 17)
        self.log_full = False
        self._probed_at: dict[str, float] = {}  # node -> when its selection probed it

    def compose(self) -> ComposeResult:
        cfg = self.cfg
        yield HeaderBar(
            cfg.cluster_name,
            read_only=self.backend.read_only,
            demo=self.backend.demo,
            interval=cfg.refresh_interval,
        )
        yield VllmStrip(cfg.vllm.port)
        with Horizontal(id="nodes"):
            for n in cfg.nodes:
                yield NodePane(
                    NodeState(
                        name=n.name, host=n.host, role=n.role, configured_ip=n.ip, error="probing…"
                    ),
                    n.container.name,
                )
        with Horizontal(id="node-box"):  # many nodes or a small terminal: the table
            yield NodeTable()
            yield NodeDetail()
        with Horizontal(id="middle"):
            yield FindingsList()
            yield FindingDetail()
        yield LogPane(self.backend.log_label, self.max_log_lines)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(NodeTable)
        table.containers = {n.name: n.container.name for n in self.cfg.nodes}
        table.set_nodes(
            [
                NodeState(
                    name=n.name, host=n.host, role=n.role, configured_ip=n.ip, error="probing…"
                )
                for n in self.cfg.nodes
            ],
            {},
        )
        self._relayout()
        self.call_later(self._start)

    def _start(self) -> None:
        if self._poll_enabled:
            self._poll()
        if self._follow_enabled:
            self._start_log()
        self.post_message(self.Ready())

    # ------------------------------------------------------------------ widgets

    @property
    def header(self) -> HeaderBar:
        return self.query_one(HeaderBar)

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    @property
    def findings_list(self) -> FindingsList:
        return self.query_one(FindingsList)

    # ------------------------------------------------------------------ collectors

    def _dialog_open(self) -> bool:
        return self.app.screen is not self

    def _poll(self) -> None:
        """One monitor tick in a worker; the worker's end re-arms the timer."""
        self._poll_timer = None
        if self._dialog_open():
            self.header.refresh_text = "refresh paused (dialog open)"
            self._poll_timer = self.set_timer(0.5, self._poll)
            return
        self.run_worker(
            self._refresh(), name="refresh", group="refresh", exclusive=True, exit_on_error=False
        )

    async def _refresh(self) -> None:
        snapshot = await self.backend.refresh()
        self.post_message(SnapshotUpdated(snapshot))

    def _start_log(self) -> None:
        self.run_worker(
            self._follow_log(), name="log", group="log", exclusive=True, exit_on_error=False
        )

    async def _follow_log(self) -> None:
        # One batch in flight: the next is posted once the pane has applied this one.
        # Meanwhile the follower's bounded queue (and, through it, the node) holds the rest,
        # so a flood never piles up in the message queue ahead of key presses.
        applied = self._log_applied = asyncio.Event()
        applied.set()
        async for node, lines, events in self.backend.follow_log():
            if lines or events:
                await applied.wait()
                applied.clear()
                self.post_message(LogArrived(node, list(lines), list(events)))

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
                self.header.refresh_text = f"refresh failed: {error}"
                self.header.stale = True
            if self._poll_enabled and self._poll_timer is None and self.app.is_running:
                self._poll_timer = self.set_timer(self.cfg.refresh_interval, self._poll)
        elif group == "log" and state != WorkerState.CANCELLED:
            why = f"{type(error).__name__}: {error}" if error else "the log stream ended"
            self._report("log", f"Log follower stopped ({why}); retrying in 5 s.")
            self.set_timer(5, self._start_log)
        elif group == "action" and error is not None:
            self.post_message(
                ActionFinished(
                    self.running_action or "action", False, f"{type(error).__name__}: {error}"
                )
            )
        elif group == "save" and error is not None:
            self.notify(f"Could not save the log: {error}", severity="error")

    def _report(self, what: str, message: str) -> None:
        """Notify a collector problem once until it changes."""
        if self._last_error.get(what) != message:
            self._last_error[what] = message
            self.notify(message, severity="error", timeout=8)

    # ------------------------------------------------------------------ what the collectors post

    def on_snapshot_updated(self, message: SnapshotUpdated) -> None:
        snap = message.snapshot
        self.snapshot = snap
        self._last_error.pop("refresh", None)
        for node in snap.nodes:
            hist = self.history.setdefault(node.name, deque(maxlen=HISTORY))
            mem = memory_of(node)
            if mem is not None and node.reachable:
                hist.append(round(mem.fraction * 100, 1))
        self._draw_panes()
        self.query_one(VllmStrip).update_status(snap.vllm)
        down = sum(1 for n in snap.nodes if not n.reachable)
        text = f"refresh {self.cfg.refresh_interval:g}s · tick {snap.tick}"
        if snap.backend == "native":  # vLLM's own multi-node mode; said when only seen
            text += " · native multi-node (no Ray)" + (
                ", seen: cluster.backend not set" if snap.backend_note else ""
            )
        if snap.ray_error and snap.ray_error != "not read yet":
            text += f" · Ray: {snap.ray_error}"
        elif waiting := len(snap.pending_pgs) or len(snap.ray_demands):
            what = "placement group" if snap.pending_pgs else "demand"
            text += f" · Ray: {waiting} pending {what}{'s' if waiting > 1 else ''}"
        if down:
            text += f" · {down} node{'s' if down > 1 else ''} down"
        self.header.refresh_text = text
        self.header.stale = bool(down)
        if self.log_findings:
            self._join_log_findings()
        self._show_findings()

    def on_log_arrived(self, message: LogArrived) -> None:
        try:
            self._apply_log_batch(message)
        finally:
            self._log_applied.set()

    def _apply_log_batch(self, message: LogArrived) -> None:
        if message.events:
            self.query_one(LogPane).set_stream_state(message.events[-1])
        view = self.log_view
        entries = view.add_lines(message.node, message.lines)
        if not entries:
            return
        # the knowledge base reads what the pane shows (escapes dropped, controls replaced):
        # a finding quotes its log line, and that text reaches the screen too
        marks = self.backend.scan_log([e.text for e in entries], node=message.node)
        for m in marks:
            view.mark(m.line, m.severity, m.pattern)
        if marks:
            self._join_log_findings()
            self._show_findings()

    def _join_log_findings(self) -> None:
        self.log_findings = {finding_key(f): f for f in self.backend.log_findings(self.snapshot)}

    def all_findings(self) -> list[Finding]:
        """Live checks, the doctor's and the log's findings, one each, errors first."""
        out: dict[str, Finding] = {}
        for f in (
            *(self.snapshot.findings if self.snapshot else ()),
            *self.doctor_findings,
            *self.log_findings.values(),
        ):
            out.setdefault(finding_key(f), f)
        return sort_findings(list(out.values()))

    def _show_findings(self) -> None:
        findings = self.all_findings()
        had = self.findings_list.option_count > 0
        self.findings_list.set_findings(findings)
        self._draw_table(findings)
        if had != bool(findings):  # the findings box grows to show them, or gives the log back
            self._relayout()

    @on(FindingsList.Selected)
    def _show_detail(self, message: FindingsList.Selected) -> None:
        detail = self.query_one(FindingDetail)
        detail.open_key = self._key_for("open_log")
        detail.show(message.finding)

    # ------------------------------------------------------------------ layout (issue 17)

    def _draw_panes(self) -> None:
        """The node panes, drawn only while they are the layout (32 hidden panes would
        cost a render each per refresh)."""
        snap = self.snapshot
        if snap is None or (self.layout_plan and self.layout_plan.mode != "panes"):
            return
        box = self.query_one("#nodes")
        panes = {p.node_name: p for p in box.query(NodePane)}
        for node in snap.nodes:
            pane = panes.get(node.name)
            if pane is None:
                pane = NodePane(node)
                box.mount(pane)
            pane.backend = snap.backend
            pane.update_state(node, list(self.history.get(node.name, ())))

    def _draw_table(self, findings: list[Finding]) -> None:
        snap = self.snapshot
        if snap is None:
            return
        table = self.query_one(NodeTable)
        table.backend = snap.backend
        table.set_nodes(list(snap.nodes), counts_by_node(findings))
        if len(snap.nodes) != len(self.cfg.nodes) and self.layout_plan is not None:
            self._relayout()
        self._draw_detail()

    def _draw_detail(self, name: str | None = None) -> None:
        snap = self.snapshot
        name = name or self.query_one(NodeTable).selected
        node = next((n for n in snap.nodes if n.name == name), None) if snap else None
        if node is None:
            return
        ncfg = self.cfg.node(node.name)
        self.query_one(NodeDetail).show(
            node,
            list(self.history.get(node.name, ())),
            ncfg.container.name if ncfg else None,
            snap.backend if snap else "ray",
        )

    @on(NodeTable.NodeSelected)
    def _node_selected(self, message: NodeTable.NodeSelected) -> None:
        self._draw_detail(message.name)
        table = self.query_one(NodeTable)
        last = self._probed_at.get(message.name, 0.0)
        if table.has_focus and self._poll_enabled and time.monotonic() - last > PROBE_AGAIN:
            self._probed_at[message.name] = time.monotonic()  # the operator's node: now
            self.run_worker(
                self._probe_now(message.name),
                name=f"probe:{message.name}",
                group="probe",
                exit_on_error=False,
            )

    async def _probe_now(self, name: str) -> None:
        snapshot = await self.backend.probe_now(name)
        if snapshot is not None:
            self.post_message(SnapshotUpdated(snapshot))

    @on(NodeTable.RowSelected)
    def _node_entered(self, event: NodeTable.RowSelected) -> None:
        """Enter on a row where the detail pane is not beside the table: the pane in the
        table's place, Enter or Esc back."""
        event.stop()
        plan = self.layout_plan
        if plan is not None and plan.mode == "table" and not plan.detail_beside:
            box = self.query_one("#node-box")
            box.set_class(not box.has_class("-detail-only"), "-detail-only")

    def key_escape(self) -> None:
        box = self.query_one("#node-box")
        if box.has_class("-detail-only"):
            box.remove_class("-detail-only")

    def on_resize(self) -> None:
        self._relayout()

    def _relayout(self) -> None:
        """Panes or table, and each area's height, for this size and node count."""
        size = self.size
        if not size.width or not size.height:
            return
        snap = self.snapshot
        count = len(snap.nodes) if snap else len(self.cfg.nodes)
        fixed = sum(1 for w in (HeaderBar, VllmStrip, Footer) if self.query(w))
        plan = layout.plan(
            size.width,
            size.height,
            count,
            fixed=fixed,
            log_full=self.log_full,
            findings=self.findings_list.option_count > 0,
        )
        was = self.layout_plan
        self.layout_plan = plan
        nodes, box, middle = (
            self.query_one("#nodes"),
            self.query_one("#node-box"),
            self.query_one("#middle"),
        )
        self.set_class(plan.log_full, "-log-full")
        nodes.display = plan.mode == "panes" and not plan.log_full
        box.display = plan.mode == "table" and not plan.log_full and plan.nodes_height > 0
        box.set_class(plan.detail_beside, "-beside")
        if plan.detail_beside:
            box.remove_class("-detail-only")
        middle.display = not plan.log_full and plan.middle_height > 0
        self.query_one(VllmStrip).display = not plan.log_full
        if plan.mode == "table":
            box.styles.height = plan.nodes_height
        middle.styles.height = plan.middle_height
        if was is not None and was.mode != plan.mode and plan.mode == "panes":
            self._draw_panes()

    def action_toggle_log_full(self) -> None:
        self.log_full = not self.log_full
        self._relayout()
        if self.log_full:
            self.log_view.focus()

    def action_sort_nodes(self) -> None:
        plan = self.layout_plan
        if plan is None or plan.mode != "table":
            self.notify("The node table is shown when the node panes do not fit.", timeout=3)
            return
        label = self.query_one(NodeTable).cycle_sort()
        self.notify(f"Nodes sorted by {label}.", timeout=3)

    # ------------------------------------------------------------------ availability

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A core action is offered only if the backend allows it (read-only: the core
        refuses the mutating ones); its key then says so through `refused` instead."""
        if action == "core_action":
            return self.backend.allows(str(parameters[0]))
        if action == "refused":
            return not self.backend.allows(str(parameters[0]))
        return True

    def offered(self) -> tuple[registry.UiAction, ...]:
        return registry.offered(self.backend.allows)

    def system_commands(self) -> Iterable[SystemCommand]:
        """The palette's entries for what this screen offers."""
        for a in self.offered():
            yield SystemCommand(
                f"{a.label} ({self._key_for(a.id)})",
                a.description,
                partial(self.run_action, a.action),
            )

    def _key_for(self, action_id: str) -> str:
        return registry.key_for(action_id, self.cfg.keymap)

    # ------------------------------------------------------------------ actions

    def action_refused(self, action_id: str) -> None:
        self.notify(
            f"Read-only: {action_id} is disabled here (it would change the nodes).",
            title="READ-ONLY",
            severity="warning",
        )

    def action_core_action(self, action_id: str) -> None:
        """t / r / s / d: show the plan and confirm (focus on Cancel) where the action asks
        first, then run it."""
        spec = ACTIONS[action_id]
        if self.running_action:
            self.notify(
                f"{self.running_action} is still running; one action at a time.", severity="warning"
            )
            return
        plan = self.backend.plan(action_id)
        if plan.error:
            what = action_id if spec.confirm else f"run {spec.title.lower()}"
            self.notify(f"Cannot {what}: {plan.error}", severity="error", timeout=10)
            return
        if spec.confirm:
            self.app.push_screen(ConfirmScreen(plan), callback=partial(self._confirmed, plan))
        else:
            self._run_action(plan)

    def _confirmed(self, plan: PlanView, ok: bool | None) -> None:
        if not ok:
            self.notify(f"{plan.action} cancelled — nothing was run.")
            return
        self._run_action(plan)

    def _run_action(self, plan: PlanView) -> None:
        self.running_action = plan.action
        self.header.action_text = f"▸ {plan.action} running"
        self._progress = ProgressScreen(plan)
        self.app.push_screen(self._progress)
        self.run_worker(
            self._execute(plan.action),
            name=f"action:{plan.action}",
            group="action",
            exit_on_error=False,
        )

    async def _execute(self, action: str) -> None:
        def emit(p: Progress) -> None:
            self.post_message(ActionProgress(p))

        outcome = await self.backend.execute(action, emit)
        self.post_message(
            ActionFinished(
                action, outcome.ok, outcome.summary, list(outcome.findings), outcome.matrix
            )
        )

    def on_action_progress(self, message: ActionProgress) -> None:
        if self._progress is not None:
            self._progress.update_progress(message.progress)

    def on_action_finished(self, message: ActionFinished) -> None:
        self.running_action = None
        self.header.action_text = ""
        if self._progress is not None:
            self._progress.finish(message.ok, message.summary)
        if message.action == "doctor":
            self.doctor_findings = list(message.findings)
            self._show_findings()
            # the matrix replaces the finished progress; a progress the operator hid stays
            # hidden (the findings are in the list, d runs the doctor again)
            if (
                message.matrix
                and self._progress is not None
                and (self.app.screen is self._progress)
            ):
                self._progress.dismiss()
                self.app.push_screen(DoctorScreen(message.matrix, list(message.findings)))
        self.notify(
            f"{message.action}: {message.summary}",
            severity="information" if message.ok else "error",
            timeout=10,
        )
        if self._poll_enabled and self._poll_timer is not None:  # refresh soon after
            self._poll_timer.stop()
            self._poll_timer = self.set_timer(0.2, self._poll)

    def action_filter_log(self) -> None:
        self.query_one(LogPane).open_filter()

    def action_toggle_findings_only(self) -> None:
        view = self.log_view
        view.set_findings_only(not view.findings_only)
        self.notify(
            "Log: only lines with findings." if view.findings_only else "Log: every line.",
            timeout=3,
        )

    def action_toggle_follow(self) -> None:
        view = self.log_view
        view.set_follow(not view.follow)

    def action_copy(self) -> None:
        flist = self.findings_list
        selected = flist.selected
        in_findings = flist.has_focus or self.query_one(FindingDetail).has_focus_within
        if in_findings and selected is not None:
            self.app.copy_to_clipboard(finding_text(selected))
            self.notify(f"Copied finding '{selected.title or selected.id}' to the clipboard.")
            return
        lines = [e.text for e in self.log_view.view[-COPY_MAX_LINES:]]
        self.app.copy_to_clipboard("\n".join(lines))
        self.notify(
            f"Copied {len(lines)} log line{'s' if len(lines) != 1 else ''} to the clipboard."
        )

    def action_save_log(self) -> None:
        self._save(self.log_view.visible_text())

    def action_log_node(self) -> None:
        """Every node's lines -> the first node's only -> the next ... -> every node's."""
        self.backend.want_all_logs()
        view = self.log_view
        order = [n.name for n in self.cfg.nodes if n.name in view.sources]
        order += [s for s in view.sources if s not in order]
        if not order:
            self.notify("No log lines yet.")
            return
        cur = view.node_filter
        nxt = (
            order[0]
            if cur is None
            else (
                order[order.index(cur) + 1]
                if cur in order and order.index(cur) + 1 < len(order)
                else None
            )
        )
        view.set_node_filter(nxt)
        self.query_one(LogPane).update_status()

    def action_open_finding_log(self) -> None:
        """The selected finding's node's log, at the finding's line when it has one."""
        f = self.findings_list.selected
        if f is None or f.node is None:
            self.notify("Select a finding that names a node first.")
            return
        self.backend.want_all_logs()
        view = self.log_view
        view.set_node_filter(f.node)
        self.query_one(LogPane).update_status()
        if f.source == "log" and f.line is not None and not view.show_line(f.line):
            self.notify(f"Line {f.line} is no longer in the pane; showing {f.node}'s log.")
        view.focus()

    def action_bundle(self) -> None:
        self.notify("Writing the bundle (status, doctor, every node's logs) …")
        self._bundle()

    @work(group="bundle", exit_on_error=False)
    async def _bundle(self) -> None:
        try:
            path = await self.backend.bundle(str(locations.state_dir() / "bundles"))
        except Exception as e:  # one notification, the console goes on
            self.notify(f"No bundle: {e}", severity="error", timeout=10)
            return
        self.notify(f"Bundle written: {path}", timeout=15)

    @work(thread=True, group="save", exit_on_error=False)
    def _save(self, text: str) -> None:
        directory = locations.state_dir() / "logs"
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = directory / f"{self.cfg.cluster_name}-vllm-{stamp}.log"
        path.write_text(text + ("\n" if text else ""), encoding="utf-8")
        lines = text.count("\n") + 1 if text else 0
        self.app.call_from_thread(self.notify, f"Saved {lines} lines to {path}", timeout=10)

    def action_help(self) -> None:
        if isinstance(self.app.screen, HelpScreen):
            return
        rows = [(self._key_for(a.id), a.id, a.description, a.mutating) for a in self.offered()]
        refused = [
            a.id
            for a in registry.REGISTRY
            if a.core is not None and not self.backend.allows(a.core)
        ]
        self.app.push_screen(HelpScreen(rows, refused))


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
