"""What the console's keys do: the core's actions (`sparktui.core.actions.ACTIONS`: id,
title, description, mutating, default key) plus the UI-only ones below (filter, copy,
help, quit, ...). Footer, help screen, command palette and keymap ids are all built from
`REGISTRY`. Whether an action is offered is not decided here: the main screen's
`check_action` asks the backend, which asks the core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding, BindingType

from sparktui.core.actions import ACTIONS, ActionSpec


@dataclass(frozen=True)
class UiAction:
    id: str  # binding id, keymap name
    key: str  # default key
    label: str  # footer text
    description: str  # help screen and palette
    action: str  # Textual action string (on the main screen unless it names `app.`)
    mutating: bool = False
    show: bool = True  # in the footer
    core: str | None = None  # the core action it runs, if any


#: The console's keymap id of a core action where it is not the core's id (configs say
#: `keymap: {preflight: ...}` for the doctor).
KEYMAP_IDS = {"doctor": "preflight"}


def _from_core(spec: ActionSpec) -> UiAction:
    return UiAction(
        KEYMAP_IDS.get(spec.id, spec.id),
        spec.key,
        spec.title,
        spec.description,
        f"screen.core_action('{spec.id}')",
        spec.mutating,
        core=spec.id,
    )


UI_ONLY: tuple[UiAction, ...] = (
    UiAction("filter", "slash", "Filter", "Filter the log pane (Esc clears)", "screen.filter_log"),
    UiAction(
        "findings",
        "f",
        "Findings only",
        "Show only log lines that matched a finding (toggle)",
        "screen.toggle_findings_only",
    ),
    UiAction(
        "log",
        "l",
        "Follow",
        "Follow the log, or pause it where it is (toggle)",
        "screen.toggle_follow",
    ),
    UiAction(
        "copy",
        "c",
        "Copy",
        "Copy the selected finding, or the log lines in view, to the clipboard (OSC 52)",
        "screen.copy",
    ),
    UiAction(
        "save",
        "w",
        "Save log",
        "Save the log lines in view to a file",
        "screen.save_log",
        show=False,
    ),
    UiAction(
        "log_node",
        "n",
        "Node log",
        "Show one node's log lines (the head's vLLM log and Ray logs, then each node's "
        "docker and Ray worker logs), then every node again (cycles)",
        "screen.log_node",
        show=False,
    ),
    UiAction(
        "open_log",
        "o",
        "Open log",
        "Open the log of the node the selected finding names, at its line",
        "screen.open_finding_log",
        show=False,
    ),
    UiAction(
        "bundle",
        "b",
        "Bundle",
        "Write a bug-report bundle (status, doctor, findings, every node's logs, "
        "versions, config with secrets masked) to $XDG_STATE_HOME/sparktui/bundles/",
        "screen.bundle",
        show=False,
    ),
    UiAction(
        "log_full",
        "z",
        "Full log",
        "Give the log the whole screen, or back to nodes, findings and log (toggle)",
        "screen.toggle_log_full",
    ),
    UiAction(
        "sort_nodes",
        "S",
        "Sort nodes",
        "Sort the node table by its next column (errors first by default; a click "
        "on a column header sorts by it, again reverses)",
        "screen.sort_nodes",
        show=False,
    ),
    UiAction("help", "question_mark", "Help", "List every key and action", "screen.help"),
    UiAction(
        "quit", "q", "Quit", "Quit the console (everything on the nodes keeps running)", "app.quit"
    ),
)

REGISTRY: tuple[UiAction, ...] = (*(_from_core(s) for s in ACTIONS.values()), *UI_ONLY)

KEY_DISPLAY = {"slash": "/", "question_mark": "?"}


def by_id(action_id: str) -> UiAction | None:
    return next((a for a in REGISTRY if a.id == action_id), None)


def offered(allows: Callable[[str], bool]) -> tuple[UiAction, ...]:
    """The actions to list (help, palette): the UI's own, and the core's that `allows`."""
    return tuple(a for a in REGISTRY if a.core is None or allows(a.core))


def bindings() -> list[BindingType]:
    """The main screen's bindings. A mutating action's key has a second, hidden binding
    with the same id (a keymap moves both) that only says it is refused: `check_action`
    enables exactly one of the two, as the backend allows the action or not."""
    out: list[BindingType] = []
    for a in REGISTRY:
        out.append(
            Binding(
                a.key,
                a.action,
                a.label,
                show=a.show,
                id=a.id,
                key_display=KEY_DISPLAY.get(a.key),
                tooltip=a.description,
            )
        )
        if a.mutating:
            out.append(
                Binding(a.key, f"screen.refused('{a.core}')", "", show=False, system=True, id=a.id)
            )
    return out


def key_for(action_id: str, keymap: dict[str, str]) -> str:
    """The key the operator presses for `action_id`, as shown (keymap applied)."""
    a = by_id(action_id)
    key = keymap.get(action_id) or (a.key if a else "?")
    return KEY_DISPLAY.get(key, key)


def unknown_keymap_ids(keymap: dict[str, str]) -> list[str]:
    known = {a.id for a in REGISTRY}
    return [k for k in keymap if k not in known]
