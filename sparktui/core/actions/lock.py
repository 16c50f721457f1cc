"""One action at a time: an in-process guard plus a cross-process lock file
(`fcntl.flock` on `$XDG_STATE_HOME/sparktui/action.lock`). A second action is refused with
ActionBusy naming the running one. The lock dies with its process (flock), so a crashed
sparktui never leaves it stale."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparktui import locations

_guard = threading.Lock()
_current: dict[str, object] | None = None


class ActionBusy(RuntimeError):
    """Another action is running (here or in another sparktui process)."""

    def __init__(self, running: str, detail: str = "") -> None:
        self.running = running
        super().__init__(
            f"another action is running: {running}{detail}; "
            f"wait for it to finish (one action at a time)"
        )


def lock_path() -> Path:
    return locations.state_dir() / "action.lock"


def running_action() -> str | None:
    """The action this process runs now, if any (the TUI shows it)."""
    cur = _current
    return str(cur["action"]) if cur else None


def _describe(info: dict) -> str:
    started = info.get("started")
    when = time.strftime(" since %H:%M:%S", time.localtime(started)) if started else ""
    return f" (pid {info.get('pid', '?')}, user {info.get('user', '?')}{when})"


@contextmanager
def action_lock(action: str, path: Path | None = None) -> Iterator[None]:
    """Hold the action lock while the block runs; ActionBusy if another action holds it."""
    global _current
    with _guard:
        if _current is not None:
            raise ActionBusy(str(_current["action"]), " in this console")
        _current = {"action": action}
    fh = None
    try:
        path = path or lock_path()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fh = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            try:
                info = json.loads(fh.read() or "{}")
            except ValueError:
                info = {}
            raise ActionBusy(
                str(info.get("action", "an action")), _describe(info) + " in another sparktui"
            ) from None
        from sparktui.core.actions.audit import _user

        fh.seek(0)
        fh.truncate()
        fh.write(
            json.dumps(
                {"action": action, "pid": os.getpid(), "user": _user(), "started": time.time()}
            )
        )
        fh.flush()
        yield
    finally:
        if fh is not None:
            fh.close()  # releases the flock
        with _guard:
            _current = None
