"""The header bar: cluster name, DEMO and READ-ONLY badges, refresh state."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Label


class HeaderBar(Horizontal):
    """One line: `sparktui · cluster <name>  [DEMO] [READ-ONLY]  refresh …`."""

    def __init__(self, cluster: str, *, read_only: bool, demo: bool, interval: float) -> None:
        super().__init__(id="header")
        self.cluster = cluster
        self.read_only = read_only
        self.demo = demo
        self.interval = interval

    def compose(self) -> ComposeResult:
        yield Label(Content.assemble(("sparktui", "bold"), " · cluster ",
                                     (self.cluster, "bold")), id="title", markup=False)
        if self.demo:
            yield Label(" DEMO ", id="badge-demo", classes="badge", markup=False)
        if self.read_only:
            yield Label(" READ-ONLY ", id="badge-readonly", classes="badge", markup=False)
        yield Label("", id="action-state", markup=False)
        yield Label(f"refresh {self.interval:g}s · starting", id="refresh", markup=False)

    def set_refresh(self, text: str, *, stale: bool = False) -> None:
        label = self.query_one("#refresh", Label)
        label.update(text)
        label.set_class(stale, "-stale")

    def set_action(self, text: str) -> None:
        self.query_one("#action-state", Label).update(text)
