"""The audit log: one JSON line per command that changes a node (run, failed or refused),
appended to `$XDG_STATE_HOME/sparktui/audit.log`, with secret values masked."""

from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import Any

from sparktui import locations
from sparktui.core.secrets import mask_argv


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME: still audit
        return str(os.getuid())


def audit_record(
    *,
    action: str,
    node: str,
    argv: tuple[str, ...] | list[str],
    status: str,
    exit_status: int | None = None,
    duration: float | None = None,
    env: tuple[tuple[str, str], ...] = (),
    message: str = "",
) -> dict[str, Any]:
    """One audit entry. `status`: ok, failed, timeout, unreachable, refused."""
    rec: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "user": _user(),
        "action": action,
        "node": node,
        "argv": mask_argv(list(argv)),
        "exit": exit_status,
        "status": status,
    }
    if env:
        rec["env"] = mask_argv([f"{k}={v}" for k, v in env])
    if duration is not None:
        rec["duration_s"] = round(duration, 3)
    if message:
        rec["message"] = message[:500]
    return rec


def append(record: dict[str, Any], path: Path | None = None) -> None:
    """Append one line (O_APPEND, file mode 0600). Never raises: an unwritable audit log is
    reported on stderr, not allowed to break an action half-way."""
    path = path or locations.audit_log_path()
    line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as e:
        import sys

        print(f"sparktui: cannot write the audit log {path}: {e}", file=sys.stderr)


def read(path: Path | None = None) -> list[dict[str, Any]]:
    """Every entry (tests, the TUI's history view)."""
    path = path or locations.audit_log_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
