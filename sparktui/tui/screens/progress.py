"""Progress of a running action: one row per plan step and node, updated live."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from sparktui.tui.backend import PlanView, Progress

GLYPH = {
    "pending": ("·", "$muted"),
    "running": ("▸", "bold $accent"),
    "ok": ("✓", "$node-ok"),
    "failed": ("✗", "bold $crash"),
    "skipped": ("–", "$muted"),
    "refused": ("⊘", "bold $crash"),
    "cancelled": ("–", "$log-warning"),
}


class ProgressScreen(ModalScreen[None]):
    """Esc hides it; the action keeps running and its end is notified."""

    BINDINGS = [Binding("escape,enter", "close", "Close", show=False)]

    def __init__(self, plan: PlanView) -> None:
        super().__init__(id="progress-screen")
        self.plan = plan
        self.rows: list[Progress] = [
            Progress(plan.action, i, pl.node, pl.description, "pending")
            for i, pl in enumerate(plan.lines)
        ]
        self.extra: list[Progress] = []
        self.summary: tuple[bool, str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="progress-box") as box:
            box.border_title = f"{self.plan.title}"
            box.border_subtitle = "Esc hides (the action keeps running)"
            with VerticalScroll():
                yield Static(self._content(), id="progress-text", markup=False)

    def _content(self) -> Content:
        parts: list[str | tuple[str, str]] = []
        for p in [*self.extra, *self.rows]:
            glyph, style = GLYPH.get(p.state, ("?", ""))
            parts += [(f" {glyph} ", style), (f"{p.node:<10}", "bold"), p.description]
            if p.detail:
                parts += ["\n     ", (p.detail.strip()[:500], "$muted")]
            parts.append("\n")
        if self.summary is not None:
            ok, text = self.summary
            parts += [
                "\n",
                ("done: " if ok else "failed: ", "bold $node-ok" if ok else "bold $crash"),
                text,
            ]
        return Content.assemble(*parts)

    def update_progress(self, p: Progress) -> None:
        if 0 <= p.index < len(self.rows):
            self.rows[p.index] = p
        else:
            self.extra = [
                e for e in self.extra if (e.node, e.description) != (p.node, p.description)
            ]
            self.extra.append(p)
        self._refresh()

    def finish(self, ok: bool, summary: str) -> None:
        self.summary = (ok, summary)
        self._refresh()

    def _refresh(self) -> None:
        # after Esc the screen is gone (children removed) while the action runs on: the
        # updates and the end then have nowhere to go, and must not crash the console
        for text in self.query("#progress-text").results(Static):
            text.update(self._content())

    def action_close(self) -> None:
        self.dismiss(None)
