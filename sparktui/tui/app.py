"""The console app: a shell around `MainScreen` (sparktui.tui.screens.main), which holds
the console's state, runs its collectors and handles its keys.

The App owns what is app-wide: themes, the user's keymap, Ctrl+C, the command palette's
list, the garbage collector's tuning, and closing the backend on quit. Quitting closes
connections and never stops anything on the nodes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from sparktui.core.model import ClusterSnapshot, Finding
from sparktui.tui import actions as registry
from sparktui.tui.backend import Backend
from sparktui.tui.screens.main import MainScreen, finding_text
from sparktui.tui.themes import DEFAULT_THEME, load_themes, slot_defaults
from sparktui.tui.widgets.findings import FindingsList
from sparktui.tui.widgets.log_pane import LogView

__all__ = ["MainScreen", "SparkApp", "finding_text"]

log = logging.getLogger(__name__)


class SparkApp(App[int]):
    """The console: themes, keymap and palette around the main screen."""

    CSS_PATH = "app.tcss"
    TITLE = "sparktui"
    BINDINGS = [Binding("ctrl+c", "help_quit", show=False, system=True)]

    def __init__(
        self,
        backend: Backend,
        *,
        theme: str | None = None,
        user_themes_dir: Path | None = None,
        max_log_lines: int = 20000,
        poll: bool = True,
        follow_log: bool = True,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.cfg = backend.cfg
        self.main = MainScreen(
            backend, max_log_lines=max_log_lines, poll=poll, follow_log=follow_log
        )
        self._notes: list[tuple[str, str]] = []  # (message, severity) shown once mounted
        self._wanted_theme = self._load_themes(theme, user_themes_dir)
        self._gc_threshold: tuple[int, int, int] | None = None

    def _load_themes(self, theme: str | None, user_themes_dir: Path | None) -> str:
        """Register the shipped and user themes; the theme to use (notes say what failed)."""
        themes = load_themes(user_themes_dir)
        for t in themes.themes.values():
            self.register_theme(t)
        self.theme_sources = themes.sources
        for err in themes.errors:
            self._notes.append((f"Theme file skipped: {err}", "warning"))
        wanted = theme or self.cfg.theme or DEFAULT_THEME
        if wanted not in themes.themes and wanted not in self.available_themes:
            if not themes.errors:
                self._notes.append(
                    (f"No theme named '{wanted}'; using {DEFAULT_THEME}.", "warning")
                )
            else:
                self._notes[-1] = (self._notes[-1][0] + f"; using {DEFAULT_THEME}.", "warning")
            wanted = DEFAULT_THEME
        return wanted

    # ------------------------------------------------------------------ setup

    def get_theme_variable_defaults(self) -> dict[str, str]:
        theme = self.get_theme(self.theme) if self.is_running else None
        return slot_defaults(theme)

    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        self.theme = self._wanted_theme
        unknown = registry.unknown_keymap_ids(self.cfg.keymap)
        keymap = {k: v for k, v in self.cfg.keymap.items() if k not in unknown}
        if keymap:
            self.set_keymap(keymap)
        if unknown:
            known = ", ".join(a.id for a in registry.REGISTRY)
            self._notes.append(
                (f"keymap: unknown action '{unknown[0]}' (known: {known})", "warning")
            )
        for message, severity in self._notes:
            self.notify(message, severity=severity, timeout=10)  # type: ignore[arg-type]

    @on(MainScreen.Ready)
    def _main_screen_ready(self, _: MainScreen.Ready) -> None:
        self._quiet_gc()
        self.main_ready()

    def main_ready(self) -> None:
        """Hook: the main screen is composed and its collectors started (benches wrap it)."""

    async def on_unmount(self) -> None:
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
            gc.unfreeze()
            self._gc_threshold = None
        try:
            await asyncio.wait_for(self.backend.close(), 5)
        except Exception:  # closing must not turn a quit into a crash
            log.warning("closing the backend failed", exc_info=True)

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

    # ------------------------------------------------------------------ app-wide keys

    def action_help_quit(self) -> None:
        """Ctrl+C: never quits by accident; says how to."""
        key = registry.key_for("quit", self.cfg.keymap)
        self.notify(
            f"Ctrl+C does not quit. Press {key} to quit — everything on the nodes keeps running.",
            title="Quit?",
        )

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for cmd in super().get_system_commands(screen):
            if cmd.title != "Quit":
                yield cmd
        yield from self.main.system_commands()

    # ------------------------------------------------------------------ the main screen's state
    # Read-through views for code that holds the app (the lab tests and benches).

    @property
    def snapshot(self) -> ClusterSnapshot | None:
        return self.main.snapshot

    @property
    def running_action(self) -> str | None:
        return self.main.running_action

    @property
    def log_findings(self) -> dict[str, Finding]:
        return self.main.log_findings

    @property
    def doctor_findings(self) -> list[Finding]:
        return self.main.doctor_findings

    @property
    def log_view(self) -> LogView:
        return self.main.log_view

    @property
    def findings_list(self) -> FindingsList:
        return self.main.findings_list

    def _all_findings(self) -> list[Finding]:
        return self.main.all_findings()
