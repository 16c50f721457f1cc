"""Messages the collectors (workers) post to the main screen: plain dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from sparktui.core.model import ClusterSnapshot, Finding
from sparktui.tui.backend import Progress


@dataclass
class SnapshotUpdated(Message):
    """A fresh ClusterSnapshot from the monitor."""

    snapshot: ClusterSnapshot


@dataclass
class LogArrived(Message):
    """New lines from a followed log, in order (carries a core.logs.LogBatch's content)."""

    node: str
    lines: list[str]
    events: list[str] = field(default_factory=list)  # what happened to the stream itself


@dataclass
class ActionProgress(Message):
    """One step of a running action changed state."""

    progress: Progress


@dataclass
class ActionFinished(Message):
    """A running action ended (ok or not)."""

    action: str
    ok: bool
    summary: str
    findings: list[Finding] = field(default_factory=list)
    matrix: dict[str, Any] | None = None  # doctor's checks x nodes
