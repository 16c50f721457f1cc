"""Runs a Plan over the nodes' transports: stage after stage, the steps of a stage in
parallel, with progress events per step and node, bounded waits, an audit line for every
command that changes a node, and a clear failure: which step on which node, with the tail
of its output. Read-only is refused up front (and again by the transport).

Cancelling the task that runs `execute` stops the waiting, never the nodes' work (every
built-in step starts detached work: `docker run -d`, `docker exec -d`, setsid)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparktui.core.actions import audit
from sparktui.core.actions.plan import Plan, Stage, Step
from sparktui.core.command import Command, Result
from sparktui.core.model import Finding
from sparktui.core.safe_text import clean_text
from sparktui.core.secrets import mask_argv
from sparktui.core.transport import ReadOnlyError, Transport, TransportError

log = logging.getLogger(__name__)

StepState = Literal["pending", "running", "ok", "failed", "skipped", "refused", "cancelled"]
ActionState = Literal["ok", "failed", "refused", "busy", "cancelled", "aborted"]


@dataclass(frozen=True)
class ActionEvent:
    """Progress of one step on one node. `stage` counts from 0; `step` is the step's index
    in the whole plan (stable id for a UI row); `output` is the tail of its output."""

    action: str
    stage: int
    stage_name: str
    step: int
    node: str
    description: str
    state: StepState
    message: str = ""
    output: str = ""
    elapsed: float = 0.0


@dataclass
class CommandRecord:
    argv: list[str]  # masked
    mutating: bool
    exit_status: int | None
    duration: float
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "mutating": self.mutating,
            "exit_status": self.exit_status,
            "duration_s": round(self.duration, 3),
            "timed_out": self.timed_out,
        }


@dataclass
class StepResult:
    stage: int
    stage_name: str
    step: int
    node: str
    description: str
    kind: str
    state: StepState = "pending"
    message: str = ""
    output: str = ""
    duration: float = 0.0
    commands: list[CommandRecord] = field(default_factory=list)  # waits: the last poll only
    polls: int = 0
    started: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "stage_name": self.stage_name,
            "step": self.step,
            "node": self.node,
            "description": self.description,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
            "output": self.output,
            "duration_s": round(self.duration, 3),
            "polls": self.polls,
            "commands": [c.to_dict() for c in self.commands],
        }


@dataclass
class ActionResult:
    action: str
    ok: bool
    state: ActionState
    message: str = ""
    steps: list[StepResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    duration: float = 0.0
    failed_step: StepResult | None = None
    log_tail: str = ""  # serve: the end of this run's vLLM log, when it failed
    matrix: dict[str, Any] | None = None  # doctor: checks x nodes (core/actions/fabric.py)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "ok": self.ok,
            "state": self.state,
            "message": self.message,
            "duration_s": round(self.duration, 3),
            "log_tail": self.log_tail or None,
            "failed": None
            if self.failed_step is None
            else {
                "node": self.failed_step.node,
                "step": self.failed_step.description,
                "stage": self.failed_step.stage_name,
                "output": self.failed_step.output,
            },
            "steps": [s.to_dict() for s in self.steps],
            "findings": [f.to_dict() for f in self.findings],
        }


EventCallback = Callable[[ActionEvent], "Awaitable[None] | None"]


class _Failed(Exception):
    pass


class Executor:
    """One run of one plan. Use `await Executor(plan, transports, on_event).run()`."""

    def __init__(
        self,
        plan: Plan,
        transports: dict[str, Transport],
        on_event: EventCallback | None = None,
        *,
        read_only: bool = False,
        audit_log: bool = True,
    ) -> None:
        self.plan = plan
        self.transports = transports
        self.on_event = on_event
        self.read_only = read_only
        self.audit_log = audit_log
        self.results: list[StepResult] = []
        self._by_step: dict[int, tuple[Stage, Step, StepResult]] = {}
        for idx, (si, st, s) in enumerate(plan.steps):
            r = StepResult(si, st.name, idx, s.node, s.description, s.kind)
            self.results.append(r)
            self._by_step[idx] = (st, s, r)

    # ----------------------------------------------------------------- events and audit

    async def _emit(
        self,
        r: StepResult,
        state: StepState,
        message: str = "",
        output: str = "",
        elapsed: float = 0.0,
    ) -> None:
        r.state = state
        message = clean_text(message)  # may quote a node (outputs come cleaned by _tail)
        if message:
            r.message = message
        if output:
            r.output = output
        if self.on_event is None:
            return
        ev = ActionEvent(
            self.plan.action,
            r.stage,
            r.stage_name,
            r.step,
            r.node,
            r.description,
            state,
            message,
            output,
            elapsed,
        )
        try:
            out = self.on_event(ev)
            if inspect.isawaitable(out):
                await out
        except Exception:  # a UI bug must not break the action half-way
            log.exception(
                "progress callback failed on %s step %d (%s)", self.plan.action, r.step, state
            )

    def _audit(
        self, node: str, c: Command, status: str, result: Result | None = None, message: str = ""
    ) -> None:
        if not self.audit_log or not c.mutating:
            return
        audit.append(
            audit.audit_record(
                action=self.plan.action,
                node=node,
                argv=c.argv,
                status=status,
                exit_status=result.exit_status if result else None,
                duration=result.duration if result else None,
                env=c.env,
                message=message,
            )
        )

    # ----------------------------------------------------------------- read-only

    def refusal(self) -> str | None:
        """Why this plan may not run here (read-only), or None."""
        if not self.plan.mutating:
            return None
        ro_nodes = sorted(
            {
                s.node
                for _i, _st, s in self.plan.steps
                if s.mutating
                and (
                    self.read_only
                    or (s.node in self.transports and self.transports[s.node].read_only)
                )
            }
        )
        if not ro_nodes:
            return None
        return (
            f"read-only mode: '{self.plan.action}' changes nodes "
            f"({', '.join(ro_nodes)}) and was refused; nothing was run"
        )

    # ----------------------------------------------------------------- running

    async def run(self) -> ActionResult:
        start = time.monotonic()
        for r in self.results:
            await self._emit(r, "pending")
        why = self.refusal()
        if why is not None:
            for _idx, (_st, s, r) in self._by_step.items():
                for c in s.commands:
                    self._audit(s.node, c, "refused", message="read-only")
                await self._emit(r, "refused", "refused: read-only mode")
            return ActionResult(
                self.plan.action,
                False,
                "refused",
                why,
                self.results,
                duration=time.monotonic() - start,
            )
        failed: StepResult | None = None
        try:
            for si, stage in enumerate(self.plan.stages):
                failed = await self._run_stage(si, stage)
                if failed is not None:
                    break
        except asyncio.CancelledError:
            for r in self.results:
                if r.state in ("pending", "running"):
                    await self._emit(
                        r,
                        "cancelled",
                        "stopped waiting; work already started on the node keeps running",
                    )
            raise
        for r in self.results:
            if r.state == "pending":
                await self._emit(r, "skipped", "an earlier step failed")
        duration = time.monotonic() - start
        if failed is not None:
            state: ActionState = "refused" if failed.state == "refused" else "failed"
            msg = f"step '{failed.description}' on node {failed.node} failed: {failed.message}"
            return ActionResult(
                self.plan.action,
                False,
                state,
                msg,
                self.results,
                duration=duration,
                failed_step=failed,
            )
        return ActionResult(
            self.plan.action,
            True,
            "ok",
            f"{self.plan.action} done in {duration:.1f}s",
            self.results,
            duration=duration,
        )

    async def _run_stage(self, si: int, stage: Stage) -> StepResult | None:
        entries = [(idx, s, r) for idx, (st, s, r) in self._by_step.items() if r.stage == si]
        tasks = {asyncio.ensure_future(self._run_step(s, r)): (s, r) for _i, s, r in entries}
        first_failure: StepResult | None = None
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                covered_by = None
                for t in done:
                    s, r = tasks[t]
                    if r.state in ("failed", "refused") and first_failure is None:
                        first_failure = r
                    if r.state == "ok" and s.sufficient:
                        covered_by = r
                if covered_by is not None and first_failure is None:
                    for t in pending:
                        if tasks[t][0].kind == "wait":
                            t.cancel()
                            await asyncio.gather(t, return_exceptions=True)
                            r = tasks[t][1]
                            r.duration = time.monotonic() - r.started
                            await self._emit(
                                r, "ok", f"covered by: {covered_by.description}", elapsed=r.duration
                            )
                if first_failure is not None:
                    # Waits are only watching: stop them. Started commands run to the end.
                    for t in pending:
                        if tasks[t][0].kind == "wait":
                            t.cancel()
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        await asyncio.gather(*tasks, return_exceptions=True)
        for _t, (_s, r) in tasks.items():
            if r.state == "running":
                await self._emit(r, "cancelled", "stopped waiting: another step failed")
        return first_failure

    async def _run_step(self, s: Step, r: StepResult) -> None:
        t0 = time.monotonic()
        r.started = t0
        await self._emit(r, "running", s.description)
        transport = self.transports.get(s.node)
        try:
            if transport is None:
                raise _Failed(f"no transport for node {s.node}")
            if s.kind == "wait":
                message, output = await self._wait(s, r, transport, t0)
            else:
                message, output = "", ""
                for c in s.commands:
                    result = await self._one(s, r, transport, c)
                    verdict, msg = s.judge(result)
                    output = _tail(result)
                    if verdict != "ok":
                        r.duration = time.monotonic() - t0
                        raise _Failed(msg or f"exit {result.exit_status}")
                    message = msg
        except _Failed as e:
            r.duration = time.monotonic() - t0
            await self._emit(
                r, r.state if r.state == "refused" else "failed", str(e), r.output, r.duration
            )
            return
        r.duration = time.monotonic() - t0
        await self._emit(r, "ok", message or "done", output, r.duration)

    async def _one(
        self, s: Step, r: StepResult, transport: Transport, c: Command, timeout: float | None = None
    ) -> Result:
        """Run one command; audit it; turn refusal/unreachability into _Failed."""
        if timeout is not None and c.timeout is not None and timeout < c.timeout:
            from dataclasses import replace

            c = replace(c, timeout=max(0.5, timeout))
        try:
            result = await transport.run(c)
        except ReadOnlyError as e:
            self._audit(s.node, c, "refused", message=str(e))
            r.state = "refused"
            raise _Failed(str(e)) from None
        except TransportError as e:
            self._audit(s.node, c, "unreachable", message=str(e))
            raise _Failed(str(e)) from None
        status = "ok" if result.ok else ("timeout" if result.timed_out else "failed")
        self._audit(s.node, c, status, result)
        r.commands.append(
            CommandRecord(
                mask_argv(c.argv), c.mutating, result.exit_status, result.duration, result.timed_out
            )
        )
        r.output = _tail(result)
        return result

    async def _wait(
        self, s: Step, r: StepResult, transport: Transport, t0: float
    ) -> tuple[str, str]:
        c = s.commands[0]
        deadline = t0 + s.timeout
        last = ""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Failed(
                    f"timed out after {s.timeout:g}s waiting for "
                    f"{s.until or s.description}" + (f"; last: {last}" if last else "")
                )
            r.polls += 1
            if r.commands:
                r.commands.clear()  # keep the last poll's record only
            try:
                result = await self._one(s, r, transport, c, timeout=remaining)
                verdict, msg = s.judge(result)
                out = _tail(result)
            except _Failed as e:
                if r.state == "refused":
                    raise
                verdict, msg, out = "pending", str(e), ""  # the node may come back
            elapsed = time.monotonic() - t0
            if verdict == "ok":
                return msg or f"ready after {elapsed:.1f}s", out
            if verdict == "failed" and elapsed >= s.grace:
                r.output = out
                raise _Failed(msg or "failed")
            if msg and msg != last:
                last = msg
                await self._emit(r, "running", msg, out, elapsed)
            await asyncio.sleep(min(s.interval, max(0.0, deadline - time.monotonic())))


def _tail(result: Result, n: int = 15) -> str:
    text = (result.stdout.strip() + "\n" + result.stderr.strip()).strip()
    return clean_text("\n".join(text.splitlines()[-n:]))


async def execute(
    plan: Plan,
    transports: dict[str, Transport],
    on_event: EventCallback | None = None,
    *,
    read_only: bool = False,
    audit_log: bool = True,
) -> ActionResult:
    """Run `plan` (see Executor)."""
    return await Executor(
        plan, transports, on_event, read_only=read_only, audit_log=audit_log
    ).run()
