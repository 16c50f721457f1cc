"""sparktui's own log: `$XDG_STATE_HOME/sparktui/sparktui.log`, and stderr with `--debug`.

Every failure the program survives is logged here with its traceback, so the one line the
user sees can stay short ("details in ..."). The file rotates at 1 MiB (two old copies).
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from sparktui import locations

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_installed: list[logging.Handler] = []


def log_path() -> Path:
    return locations.state_dir() / "sparktui.log"


def setup(*, debug: bool = False, stderr: bool = False) -> Path | None:
    """Send the `sparktui` loggers to the log file (and to stderr when `stderr`).

    Returns the file's path, or None when it cannot be written (then only stderr, if asked).
    Calling it again replaces the handlers it installed before.
    """
    root = logging.getLogger("sparktui")
    for h in _installed:
        root.removeHandler(h)
        h.close()
    _installed.clear()
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
    path: Path | None = log_path()
    assert path is not None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=1 << 20, backupCount=2, encoding="utf-8"
        )
    except OSError:
        path = None
    else:
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
        _installed.append(handler)
    if stderr:
        err = logging.StreamHandler(sys.stderr)
        err.setFormatter(logging.Formatter("sparktui: %(levelname)s %(name)s: %(message)s"))
        root.addHandler(err)
        _installed.append(err)
    return path
