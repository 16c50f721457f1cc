"""`?`: every key and action the console offers (read-only mode lists no mutating ones)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

LOG_KEYS = (
    ("↑ ↓ PgUp PgDn", "scroll the focused pane (scrolling up pauses the log)"),
    ("End / G", "jump to the newest log line and follow again"),
    ("Tab", "move between node panes, findings, detail and log"),
    ("Enter", "in the findings list: show the finding's detail"),
    ("Esc", "clear the log filter, close a dialog"),
    ("Ctrl+P", "command palette (every action below, by name)"),
)


def _words(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}"


def help_content(rows: list[tuple[str, str, str, bool]], refused: list[str]) -> Content:
    """rows: (key, action id, description, mutating); refused: the action ids the core
    refuses here (read-only mode)."""
    parts: list[str | tuple[str, str]] = [("Actions", "bold"), "\n"]
    for key, action_id, description, mutating in rows:
        parts += [
            (f" {key:<8}", "bold $accent"),
            (f"{action_id:<10}", ""),
            (description, ""),
            ("  (changes nodes)" if mutating else "", "$log-warning"),
            "\n",
        ]
    if refused:
        parts += [
            "\n",
            (" READ-ONLY ", "bold reverse $badge-readonly"),
            f" {_words(refused)} {'is' if len(refused) == 1 else 'are'} disabled; the "
            "transport refuses any command that changes a node.\n",
        ]
    parts += ["\n", ("Navigation", "bold"), "\n"]
    for key, text in LOG_KEYS:
        parts += [(f" {key:<16}", "bold $accent"), text, "\n"]
    parts += [
        "\n",
        (
            "Quitting never stops anything on the nodes. Remap keys with `keymap:` "
            "in the config (action id: key).",
            "$muted",
        ),
    ]
    return Content.assemble(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss_help", "Close", show=False),
    ]

    def __init__(self, rows: list[tuple[str, str, str, bool]], refused: list[str]) -> None:
        super().__init__(id="help-screen")
        self.rows = rows
        self.refused = refused

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box") as box:
            box.border_title = "help"
            box.border_subtitle = "Esc closes"
            with VerticalScroll():
                yield Static(help_content(self.rows, self.refused), id="help-text", markup=False)

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
