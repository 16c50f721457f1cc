"""The console's one action registry: every key the operator can press, with its binding
id (the name a `keymap:` entry in the config uses), default key, description and whether
it changes the nodes. Footer, help screen and command palette are all built from here;
read-only mode drops the mutating actions in `available()` and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class UiAction:
    id: str  # binding id, keymap name
    key: str  # default key
    label: str  # footer text
    description: str  # help screen and palette
    action: str  # Textual action string
    mutating: bool = False
    show: bool = True  # in the footer


REGISTRY: tuple[UiAction, ...] = (
    UiAction("teardown", "t", "Teardown",
             "Stop and remove the vLLM/Ray container on every node (asks first)",
             "app.core_action('teardown')", mutating=True),
    UiAction("restart", "r", "Restart",
             "Tear down, then start Ray head and workers pinned to the configured IPs (asks first)",
             "app.core_action('restart')", mutating=True),
    UiAction("serve", "s", "Serve",
             "Preflight, then start vLLM on the head and wait for /health (asks first)",
             "app.core_action('serve')", mutating=True),
    UiAction("preflight", "d", "Preflight",
             "Run the doctor checks now (changes nothing)", "app.preflight"),
    UiAction("filter", "slash", "Filter", "Filter the log pane (Esc clears)", "app.filter_log"),
    UiAction("findings", "f", "Findings only",
             "Show only log lines that matched a finding (toggle)", "app.toggle_findings_only"),
    UiAction("log", "l", "Follow",
             "Follow the log, or pause it where it is (toggle)", "app.toggle_follow"),
    UiAction("copy", "c", "Copy",
             "Copy the selected finding, or the log lines in view, to the clipboard (OSC 52)",
             "app.copy"),
    UiAction("save", "w", "Save log", "Save the log lines in view to a file", "app.save_log",
             show=False),
    UiAction("help", "question_mark", "Help", "List every key and action", "app.help"),
    UiAction("quit", "q", "Quit",
             "Quit the console (everything on the nodes keeps running)", "app.quit"),
)

KEY_DISPLAY = {"slash": "/", "question_mark": "?"}


def by_id(action_id: str) -> UiAction | None:
    return next((a for a in REGISTRY if a.id == action_id), None)


def available(read_only: bool) -> tuple[UiAction, ...]:
    """The actions this console offers: in read-only mode, no mutating ones."""
    return tuple(a for a in REGISTRY if not (read_only and a.mutating))


def bindings(read_only: bool) -> list[Binding]:
    """Key bindings for the main screen. In read-only mode a mutating action's key is bound
    to a refusal notice only (hidden from footer, key panel and palette)."""
    out: list[Binding] = []
    for a in REGISTRY:
        if read_only and a.mutating:
            out.append(Binding(a.key, f"app.refused('{a.id}')", "", show=False,
                               system=True, id=a.id))
        else:
            out.append(Binding(a.key, a.action, a.label, show=a.show, id=a.id,
                               key_display=KEY_DISPLAY.get(a.key), tooltip=a.description))
    return out


def unknown_keymap_ids(keymap: dict[str, str]) -> list[str]:
    known = {a.id for a in REGISTRY}
    return [k for k in keymap if k not in known]
