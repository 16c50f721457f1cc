"""Work done right before a screen draws its next frame.

Textual draws a screen at its update timer's ticks (60 a second at most). A widget that
batches work on its own timer (the log pane under a flood of lines) lands anywhere between
two ticks, and what it did waits for the next one: up to a frame more before the operator
sees it. A `FrameScreen` runs such work at the tick itself, before the frame is worked out,
so it is on that frame.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.screen import Screen

__all__ = ["FrameScreen", "before_next_frame"]


class FrameScreen(Screen[None]):
    """A screen that runs callbacks right before it draws its next frame."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._before_frame: dict[Callable[[], object], None] = {}

    def before_next_frame(self, callback: Callable[[], object]) -> None:
        """Run `callback` at the next frame's tick (once, however often it is asked for).

        The tick comes when something on the screen is dirty: the caller refreshes what it
        will change."""
        self._before_frame[callback] = None
        self.check_idle()

    def cancel_before_frame(self, callback: Callable[[], object]) -> None:
        """Forget `callback` if it has not run yet."""
        self._before_frame.pop(callback, None)

    def _on_timer_update(self) -> None:
        # Textual's own tick (screen.py): it lays out and paints what is dirty by then
        if self._before_frame:
            callbacks = list(self._before_frame)
            self._before_frame.clear()
            for callback in callbacks:
                callback()
        super()._on_timer_update()


def before_next_frame(screen: Screen, callback: Callable[[], object]) -> bool:
    """Ask `screen` to run `callback` before its next frame; False where it cannot (not a
    `FrameScreen`, or not the screen on top, whose frames are not being drawn)."""
    if isinstance(screen, FrameScreen) and screen.is_current:
        screen.before_next_frame(callback)
        return True
    return False
