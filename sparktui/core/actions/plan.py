"""Plans: what an action will do, as data. A Plan is an ordered list of Stages; the steps
of one stage may run in parallel (one per node, usually); a Step is one node's commands,
either run once (`run`) or polled until a condition holds (`wait`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparktui.core.command import Command, Result
from sparktui.core.secrets import mask_argv

StepKind = Literal["run", "wait"]
Verdict = tuple[Literal["ok", "pending", "failed"], str]


class PlanError(ValueError):
    """The config cannot give this plan (no image, no head ip, ...). One line for the user."""


def exit_verdict(result: Result) -> Verdict:
    """Default wait condition: exit 0 ready, exit 1 (or a timeout) not yet, else failed."""
    if result.timed_out or result.exit_status == 1:
        return "pending", result.tail(3)
    if result.ok:
        return "ok", result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    return "failed", result.tail(10)


def run_verdict(result: Result) -> Verdict:
    """Default for run steps: exit 0 is success."""
    if result.ok:
        return "ok", ""
    if result.timed_out:
        return "failed", f"timed out: {result.tail(10)}"
    return "failed", f"exit {result.exit_status}: {result.tail(10)}"


@dataclass(frozen=True)
class Step:
    """One node's part of a stage.

    `run`: every command in order, each must pass `verdict` (default: exit 0).
    `wait`: the single command is repeated every `interval` s until `verdict` says ok,
    or says failed (ignored during the first `grace` s), or `timeout` s pass.
    """

    node: str
    description: str
    commands: tuple[Command, ...]
    kind: StepKind = "run"
    timeout: float = 60.0
    interval: float = 1.0
    grace: float = 0.0
    verdict: Callable[[Result], Verdict] | None = None
    until: str = ""  # what a wait waits for, in words (dry-run)
    sufficient: bool = False  # once ok, the other waits of its stage are covered (ok)

    @property
    def mutating(self) -> bool:
        return any(c.mutating for c in self.commands)

    def judge(self, result: Result) -> Verdict:
        if self.verdict is not None:
            return self.verdict(result)
        return exit_verdict(result) if self.kind == "wait" else run_verdict(result)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "description": self.description,
            "kind": self.kind,
            "mutating": self.mutating,
            "commands": [
                {
                    "argv": mask_argv(c.argv),
                    "shell": shell_masked(c),
                    "mutating": c.mutating,
                    "timeout": c.timeout,
                }
                for c in self.commands
            ],
        }
        if self.kind == "wait":
            d.update(timeout=self.timeout, interval=self.interval, until=self.until)
        return d


@dataclass(frozen=True)
class Stage:
    """Steps that may run at the same time (different nodes); the next stage waits for all."""

    name: str
    steps: tuple[Step, ...]


@dataclass
class Plan:
    action: str
    stages: list[Stage]
    title: str = ""
    source: Literal["builtin", "script", "checks"] = "builtin"
    preflight: bool = False  # run doctor before the stages (serve)
    warnings: list[str] = field(default_factory=list)

    @property
    def mutating(self) -> bool:
        return any(s.mutating for st in self.stages for s in st.steps)

    @property
    def steps(self) -> list[tuple[int, Stage, Step]]:
        return [(i, st, s) for i, st in enumerate(self.stages) for s in st.steps]

    @property
    def nodes(self) -> list[str]:
        seen: list[str] = []
        for _i, _st, s in self.steps:
            if s.node not in seen:
                seen.append(s.node)
        return seen

    def render(self, full: bool = True) -> str:
        """The plan as an operator reads it: per stage, per node, the exact command lines
        (secret values masked). `full=False` shortens inline `sh -c` scripts to their
        first line (for a confirmation prompt)."""
        lines = [
            f"{self.title or self.action} ({'changes nodes' if self.mutating else 'read-only'}"
            f", {self.source})"
        ]
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        if self.preflight:
            lines.append(
                "  0. preflight: `sparktui doctor` checks (abort on errors unless --force)"
            )
        for i, st in enumerate(self.stages, 1):
            par = " (in parallel)" if len(st.steps) > 1 else ""
            lines.append(f"  {i}. {st.name}{par}")
            for s in st.steps:
                lines.append(f"     [{s.node}] {s.description}")
                for c in s.commands:
                    prefix = ""
                    if s.kind == "wait":
                        prefix = f"until ok, every {s.interval:g}s for up to {s.timeout:g}s: "
                    lines.append(f"       $ {prefix}{shell_masked(c, full)}")
                if s.kind == "wait" and s.until:
                    lines.append(f"       (waits for: {s.until})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "title": self.title,
            "source": self.source,
            "mutating": self.mutating,
            "preflight": self.preflight,
            "warnings": self.warnings,
            "stages": [
                {"name": st.name, "steps": [s.to_dict() for s in st.steps]} for st in self.stages
            ],
        }


def shell_masked(c: Command, full: bool = True) -> str:
    """`Command.shell()` with secret-looking values masked; `full=False` abbreviates
    multi-line arguments (inline scripts) to their first line."""
    import shlex

    argv = mask_argv(c.argv)
    if not full:
        argv = [a if "\n" not in a.strip() else a.strip().splitlines()[0] + " …" for a in argv]
    line = shlex.join(argv)
    if c.env:
        env = mask_argv([f"{k}={v}" for k, v in c.env])
        line = shlex.join(["env", *env]) + " " + line
    return line
