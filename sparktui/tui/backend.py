"""What the console needs from the core, in one small interface.

The app never talks to transports, probes or the knowledge base directly: it asks a
Backend for snapshots, log batches, diagnoses, plans and action runs. `LiveBackend`
(sparktui.tui.live) wires the real core pieces; the demo and the tests supply their own
sources through the same interface, so every screen path is the one used live.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparktui.core.actions import refusal
from sparktui.core.actions.executor import StepState
from sparktui.core.model import ClusterSnapshot, Finding

if TYPE_CHECKING:
    from sparktui.config import Config

__all__ = [
    "ActionOutcome",
    "Backend",
    "Emit",
    "LogMark",
    "PlanLine",
    "PlanView",
    "Progress",
    "StepState",
]


@dataclass(frozen=True)
class PlanLine:
    """One node's part of a plan step, as the confirmation shows it."""

    stage: str
    node: str
    description: str
    commands: tuple[str, ...]  # exact command lines (secrets masked)


@dataclass
class PlanView:
    """A printable plan: exactly what will run on which node."""

    action: str
    title: str
    mutating: bool
    lines: list[PlanLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    preflight: bool = False
    error: str | None = None  # the plan cannot be built (config lacks something)

    @property
    def nodes(self) -> list[str]:
        seen: list[str] = []
        for pl in self.lines:
            if pl.node not in seen:
                seen.append(pl.node)
        return seen


@dataclass(frozen=True)
class LogMark:
    """A log line the crash matcher recognised."""

    line: int
    severity: str
    pattern: str


@dataclass(frozen=True)
class Progress:
    """A step of a running action, on one node, changed state."""

    action: str
    index: int  # position in PlanView.lines (-1: the action as a whole)
    node: str
    description: str
    state: StepState
    detail: str = ""


@dataclass
class ActionOutcome:
    ok: bool
    summary: str
    findings: list[Finding] = field(default_factory=list)
    matrix: dict[str, Any] | None = None  # doctor's checks x nodes


Emit = Callable[[Progress], None]


class Backend:
    """The console's source of truth. Subclasses override what they support."""

    demo: bool = False

    def __init__(self, cfg: Config, *, read_only: bool = False) -> None:
        self.cfg = cfg
        if read_only:  # read-only lives in one place, the config: the core reads it there
            cfg.read_only = True

    @property
    def read_only(self) -> bool:
        """Watch only: mutating actions are refused (by the core; the console only asks)."""
        return self.cfg.read_only

    def allows(self, action: str) -> bool:
        """Whether the core would run action `action` here (it refuses the mutating ones in
        read-only mode); the console hides what it would refuse."""
        return refusal(action, self.read_only) is None

    @property
    def log_label(self) -> str:
        """Where the log pane's lines come from, in words."""
        return f"{self.cfg.head.name}:{self.cfg.vllm.log}"

    async def refresh(self) -> ClusterSnapshot:
        """One monitor tick (async I/O only; called from a worker)."""
        raise NotImplementedError

    async def probe_now(self, node: str) -> ClusterSnapshot | None:
        """Probe one node at once (selected in the console) and return the snapshot with
        its answer; None where the backend cannot."""
        return None

    async def follow_log(self) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        """Batches of (node, lines, events) from the followed vLLM log, forever. Events say
        what happened to the stream itself ("connection lost: ...", "resumed ...")."""
        if False:  # pragma: no cover - an async generator that yields nothing
            yield "", [], []

    def scan_log(self, lines: list[str], node: str | None = None) -> list[LogMark]:
        """Feed new log lines (in order; the first line ever fed is line 1) to the crash
        matcher; returns the lines that matched, as (line number, severity, pattern id).
        `node`: whose log they are (its findings then name that node)."""
        return []

    def log_findings(self, snapshot: ClusterSnapshot | None) -> list[Finding]:
        """Every finding from the log so far, root cause first, fixes joined with the
        snapshot (live names and IPs) when one is known."""
        return []

    def want_all_logs(self) -> None:
        """Follow every node's logs, not only the head's vLLM log (where there are more)."""

    async def bundle(self, directory: str) -> str:
        """Write a bug-report bundle (core/bundle.py) into `directory`; its path."""
        raise RuntimeError("no bundle here: nothing real runs in this console")

    def plan(self, action: str) -> PlanView:
        """The plan for an action, without running anything."""
        return PlanView(action, action, False, error=f"'{action}' is not available")

    async def execute(self, action: str, emit: Emit) -> ActionOutcome:
        """Run an action through the core actions layer, reporting each step."""
        return ActionOutcome(False, f"'{action}' is not available")

    async def close(self) -> None:
        """Close connections. Never stops anything on the nodes."""
