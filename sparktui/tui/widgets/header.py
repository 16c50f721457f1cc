"""The header bar: cluster name, DEMO and READ-ONLY badges, refresh state."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label

from sparktui.tui.widgets.text import set_text


class HeaderBar(Horizontal):
    """One line: `sparktui · cluster <name>  [DEMO] [READ-ONLY]  refresh …`. The screen
    sets `refresh_text`, `stale` and `action_text`; the labels follow."""

    refresh_text: reactive[str] = reactive("", init=False)
    stale: reactive[bool] = reactive(False, init=False)
    action_text: reactive[str] = reactive("", init=False)

    def __init__(self, cluster: str, *, read_only: bool, demo: bool, interval: float) -> None:
        super().__init__(id="header")
        self.cluster = cluster
        self.read_only = read_only
        self.demo = demo
        self.set_reactive(HeaderBar.refresh_text, f"refresh {interval:g}s · starting")

    def compose(self) -> ComposeResult:
        yield Label(
            Content.assemble(("sparktui", "bold"), " · cluster ", (self.cluster, "bold")),
            id="title",
            markup=False,
        )
        if self.demo:
            yield Label(" DEMO ", id="badge-demo", classes="badge", markup=False)
        if self.read_only:
            yield Label(" READ-ONLY ", id="badge-readonly", classes="badge", markup=False)
        yield Label(self.action_text, id="action-state", markup=False)
        yield Label(self.refresh_text, id="refresh", markup=False)

    def watch_refresh_text(self, text: str) -> None:
        set_text(self.query_one("#refresh", Label), text)

    def watch_stale(self, stale: bool) -> None:
        self.query_one("#refresh", Label).set_class(stale, "-stale")

    def watch_action_text(self, text: str) -> None:
        set_text(self.query_one("#action-state", Label), text)
