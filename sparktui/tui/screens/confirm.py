"""Confirmation for actions that change nodes: exactly what runs on which node; focus
starts on Cancel, so a stray Enter does nothing."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from sparktui.tui.backend import PlanView


def plan_content(plan: PlanView) -> Content:
    parts: list[str | tuple[str, str]] = []
    nodes = ", ".join(plan.nodes) or "no node"
    parts += [("This runs on ", ""), (nodes, "bold"), (":", ""), "\n"]
    for w in plan.warnings:
        parts += [("warning: ", "bold $log-warning"), w, "\n"]
    if plan.preflight:
        parts += [("0. preflight checks first (stops on errors)", "$muted"), "\n"]
    stage = None
    for line in plan.lines:
        if line.stage != stage:
            stage = line.stage
            parts += ["\n", (stage, "bold"), "\n"]
        parts += [(f" [{line.node}] ", "bold $accent"), line.description, "\n"]
        for c in line.commands:
            parts += [("   $ ", "$muted"), c, "\n"]
    return Content.assemble(*parts)


class ConfirmScreen(ModalScreen[bool]):
    """Returns True only when the operator presses the action's own button."""

    AUTO_FOCUS = "#cancel"
    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]

    def __init__(self, plan: PlanView) -> None:
        super().__init__(id="confirm-screen")
        self.plan = plan

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box") as box:
            box.border_title = f"{self.plan.title} — confirm"
            with VerticalScroll(id="confirm-plan"):
                yield Static(plan_content(self.plan), id="confirm-text", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(f"Run {self.plan.action}", id="confirm", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_cancel(self) -> None:
        self.dismiss(False)
