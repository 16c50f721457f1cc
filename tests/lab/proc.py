"""Running commands, and finding this lab's processes by host PID (never by name host-wide)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from tests.lab.state import NODE_PATH


class LabError(RuntimeError):
    """A lab step failed; the message says which and why."""


def clean_env(**extra: str) -> dict[str, str]:
    """A minimal environment for node-side commands (no pyenv, no host PATH)."""
    env = {
        "PATH": NODE_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/bash",
    }
    env.update(extra)
    return env


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | bytes | None = None,
    timeout: float | None = 120,
    env: dict[str, str] | None = None,
    text: bool = True,
    stdin: Any = None,
) -> subprocess.CompletedProcess:
    """Run argv, capture output; on failure raise LabError with the command and its stderr."""
    if isinstance(input, str) and not text:
        input = input.encode()
    try:
        cp = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=text,
            timeout=timeout,
            env=env,
            stdin=stdin,
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout}s: {' '.join(argv)}") from e
    if check and cp.returncode != 0:
        err = cp.stderr if text else cp.stderr.decode(errors="replace")
        raise LabError(f"exit {cp.returncode}: {' '.join(argv)}\n{(err or '').strip()[-2000:]}")
    return cp


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _ppid_map() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # comm may contain spaces/parens: the fields after the last ')' are fixed.
        rest = stat.rsplit(")", 1)[1].split()
        out[int(entry)] = int(rest[1])
    return out


def descendants(root: int) -> list[int]:
    """Host PIDs of every process below `root` (root excluded)."""
    by_parent: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        by_parent.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def find(root: int, name: str, arg: str | None = None) -> list[int]:
    """Live descendants of `root` whose comm is `name` (and whose cmdline has `arg`)."""
    return [
        p
        for p in descendants(root)
        if comm(p) == name and alive(p) and (arg is None or any(arg in a for a in cmdline(p)))
    ]


def kill(pid: int, sig: int = signal.SIGTERM) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_gone(pids: Sequence[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll `predicate()` until it returns something truthy; LabError after `timeout`."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - polled probes fail until ready
            last_exc = e
        if time.monotonic() > deadline:
            detail = f" (last error: {last_exc})" if last_exc else ""
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
