"""Where sparktui looks for and keeps files (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path


def _xdg(var: str, default: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value and os.path.isabs(value) else Path.home() / default


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "sparktui"


def data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "sparktui"


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "sparktui"


def user_themes_dir() -> Path:
    return data_dir() / "themes"


def audit_log_path() -> Path:
    return state_dir() / "audit.log"
