"""Actions: tear down, restart, serve, doctor. The one registry of what can be done.

Public API (the CLI and the TUI use only this):

- `ACTIONS`: the registry (id, title, description, mutating, default key, confirm). The
  console builds its bindings, help and palette from it, the CLI its action subcommands
  and their help.
- `refusal(name, read_only)` / `available_actions(read_only)`: the one read-only decision
  (a mutating action is refused in read-only mode); the executor and the transport refuse
  again below it.
- `build_plan(name, cfg) -> Plan`: what the action would run (script mode honoured);
  `Plan.render()` is the dry-run text, `Plan.to_dict()` its JSON.
- `await run_action(name, cfg, transports=None, on_event=None, force=False) -> ActionResult`:
  preflight (serve), lock, execute with progress events (`ActionEvent`), audit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparktui.core.actions.doctor import run_doctor
from sparktui.core.actions.executor import (
    ActionEvent,
    ActionResult,
    EventCallback,
    Executor,
    StepResult,
    execute,
)
from sparktui.core.actions.lock import ActionBusy, action_lock, running_action
from sparktui.core.actions.plan import Plan, PlanError, Stage, Step
from sparktui.core.model import ClusterSnapshot, Finding
from sparktui.core.transport import Transport

if TYPE_CHECKING:
    from sparktui.config import Config

__all__ = [
    "ACTIONS",
    "ActionBusy",
    "ActionEvent",
    "ActionResult",
    "ActionSpec",
    "EventCallback",
    "Executor",
    "Plan",
    "PlanError",
    "Stage",
    "Step",
    "StepResult",
    "action_lock",
    "available_actions",
    "build_plan",
    "execute",
    "refusal",
    "run_action",
    "running_action",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActionSpec:
    """One action, as every front end describes and offers it."""

    id: str  # CLI subcommand; console keymap id (the console calls doctor "preflight")
    title: str  # console footer and palette
    description: str  # console help and palette, CLI help
    mutating: bool  # changes the nodes: refused in read-only mode
    key: str  # default console key (the user's keymap may remap it)
    confirm: bool  # ask before running (console dialog, CLI prompt or --yes)

    @property
    def name(self) -> str:
        return self.id


ACTIONS: dict[str, ActionSpec] = {
    a.id: a
    for a in (
        ActionSpec(
            "teardown",
            "Teardown",
            "Stop and remove the configured container on every node (vLLM and Ray, the "
            "serve process included); asks first",
            True,
            "t",
            True,
        ),
        ActionSpec(
            "restart",
            "Restart",
            "Tear down, then start the Ray head and then the workers pinned to the "
            "configured IPs (native backend: the containers, no Ray), and wait until every "
            "node is up; asks first",
            True,
            "r",
            True,
        ),
        ActionSpec(
            "serve",
            "Serve",
            "Preflight, then start vLLM on the head (native backend: one rank on every "
            "node), detached, output to the log, and wait until /health answers; asks "
            "first",
            True,
            "s",
            True,
        ),
        ActionSpec(
            "doctor",
            "Preflight",
            "Preflight checks, changing nothing: reachability, image, Ray nodes and IPs, "
            "interfaces, GPUs, model path, memory, stale containers, ports",
            False,
            "d",
            False,
        ),
    )
}


def refusal(name: str, read_only: bool) -> str | None:
    """Why action `name` may not run in this mode, or None when it may. The one place that
    decides it: front ends ask here (the executor and the transport refuse again)."""
    spec = ACTIONS.get(name)
    if spec is None:
        return f"unknown action '{name}' (known: {', '.join(ACTIONS)})"
    if read_only and spec.mutating:
        return f"read-only mode: '{name}' changes nodes and is refused"
    return None


def available_actions(read_only: bool) -> list[ActionSpec]:
    """The actions this mode offers: in read-only mode the mutating ones are dropped."""
    return [a for a in ACTIONS.values() if refusal(a.id, read_only) is None]


def build_plan(name: str, cfg: Config) -> Plan:
    """The plan for action `name` from the config; script mode when `actions.<name>` is set.
    Raises PlanError (one line for the user) when the config cannot give it."""
    from sparktui.core.actions import builtin, doctor, script

    if name not in ACTIONS:
        raise PlanError(f"unknown action '{name}' (known: {', '.join(ACTIONS)})")
    if name in cfg.actions:
        return script.script_plan(cfg, cfg.actions[name])
    if name == "teardown":
        return builtin.teardown_plan(cfg)
    if cfg.backend == "native" and name in ("restart", "serve"):
        from sparktui.core.actions import native

        return native.restart_plan(cfg) if name == "restart" else native.serve_plan(cfg)
    if name == "restart":
        return builtin.restart_plan(cfg)
    if name == "serve":
        return builtin.serve_plan(cfg)
    return doctor.doctor_plan(cfg)


LOG_TAIL_LINES = 25

# Findings that stop serve's preflight (besides every error).
SERVE_BLOCKERS = ("vllm-already-serving",)


async def _notify(on_event: EventCallback | None, ev: ActionEvent) -> None:
    if on_event is None:
        return
    try:
        out = on_event(ev)
        if inspect.isawaitable(out):
            await out
    except Exception:  # a front end's bug must not break the action half-way
        log.exception("progress callback failed on %s %s", ev.action, ev.state)


async def run_action(
    name: str,
    cfg: Config,
    transports: dict[str, Transport] | None = None,
    on_event: EventCallback | None = None,
    *,
    force: bool = False,
    lock_file: Path | None = None,
) -> ActionResult:
    """Run one action to its end and say how it went (never raises for a failed action;
    cancelling the awaiting task stops waiting, never the nodes' work).

    Preflight events (serve) carry stage -1 and node "cluster"."""
    from sparktui.core.ssh import transport_for

    start = time.monotonic()
    own = transports is None
    if transports is None:
        transports = {n.name: transport_for(n, read_only=cfg.read_only) for n in cfg.nodes}
    try:
        if name == "doctor":
            return await _doctor(cfg, transports, start)
        try:
            plan = build_plan(name, cfg)
        except PlanError as e:
            return ActionResult(name, False, "aborted", str(e))
        executor = Executor(plan, transports, on_event, read_only=cfg.read_only)
        if executor.refusal() is not None:
            return await executor.run()  # refused step by step, audited, nothing sent
        try:
            with action_lock(name, lock_file):
                return await _locked(plan, executor, cfg, transports, on_event, force, start)
        except ActionBusy as e:
            return ActionResult(name, False, "busy", str(e))
    finally:
        if own:
            await asyncio.gather(*(t.close() for t in transports.values()), return_exceptions=True)


async def _doctor(cfg: Config, transports: dict[str, Transport], start: float) -> ActionResult:
    report = await run_doctor(cfg, transports)
    errors = report.errors
    return ActionResult(
        "doctor",
        not errors,
        "failed" if errors else "ok",
        f"{len(errors)} error(s), {len(report.findings)} finding(s)",
        findings=report.findings,
        duration=time.monotonic() - start,
        matrix=report.matrix,
    )


async def _locked(
    plan: Plan,
    executor: Executor,
    cfg: Config,
    transports: dict[str, Transport],
    on_event: EventCallback | None,
    force: bool,
    start: float,
) -> ActionResult:
    """With the action lock held: preflight (when the plan asks for it), execute, and on a
    failed built-in serve the diagnosis of its log."""
    findings: list[Finding] = []
    if plan.preflight:
        findings, stop = await preflight(plan.action, cfg, transports, on_event, force=force)
        if stop is not None:
            stop.duration = time.monotonic() - start
            return stop
    result = await executor.run()
    result.findings = findings + result.findings
    if plan.action == "serve" and not result.ok and plan.source == "builtin":
        diag, result.log_tail = await _diagnose_serve(cfg, transports)
        result.findings = diag + result.findings
    result.duration = time.monotonic() - start
    return result


async def preflight(
    name: str,
    cfg: Config,
    transports: dict[str, Transport],
    on_event: EventCallback | None,
    *,
    force: bool = False,
) -> tuple[list[Finding], ActionResult | None]:
    """The doctor before an action: its findings, and the result to stop with when one of
    them blocks (an error, or a SERVE_BLOCKERS finding) and `force` is not given."""
    what = "preflight checks (doctor)"
    await _notify(on_event, ActionEvent(name, -1, "preflight", -1, "cluster", what, "running"))
    findings = (await run_doctor(cfg, transports)).findings
    blocking = [f for f in findings if f.severity == "error" or f.id in SERVE_BLOCKERS]
    if blocking and not force:
        named = ", ".join(f"{f.id} ({f.node})" if f.node else f.id for f in blocking)
        msg = f"preflight found {len(blocking)} problem(s): {named}; first: {blocking[0].message}"
        await _notify(
            on_event, ActionEvent(name, -1, "preflight", -1, "cluster", what, "failed", msg)
        )
        return findings, ActionResult(name, False, "aborted", msg, findings=findings)
    await _notify(
        on_event,
        ActionEvent(
            name,
            -1,
            "preflight",
            -1,
            "cluster",
            what,
            "ok",
            f"{len(findings)} finding(s), none blocking"
            if not blocking
            else f"{len(blocking)} problem(s) ignored (--force)",
        ),
    )
    return findings, None


async def _diagnose_serve(
    cfg: Config, transports: dict[str, Transport]
) -> tuple[list[Finding], str]:
    """Read this run's part of the vLLM log on the head and diagnose it, with live state
    joined in (the fix names the node and the IP)."""
    from sparktui.core.safe_text import clean

    head = cfg.head
    if cfg.backend == "native":  # every rank writes its own log on its own node
        return await _diagnose_native_serve(cfg, transports)
    text = await serve_log_text(cfg, transports, head.name)
    snapshot = await _snapshot_for_diagnosis(cfg, transports) if text else None
    tail = "\n".join(clean(ln) for ln in text.splitlines()[-LOG_TAIL_LINES:])
    return diagnose_log_text(text, cfg, snapshot), tail


async def serve_log_text(cfg: Config, transports: dict[str, Transport], node: str) -> str:
    """This run's part (from the last serve marker) of the vLLM log on `node`: inside its
    container, else on the node itself; "" when neither has it."""
    from sparktui.core.actions.builtin import SERVE_MARKER_PREFIX
    from sparktui.core.command import cmd

    ncfg = cfg.node(node)
    t = transports.get(node)
    if t is None or ncfg is None:
        return ""
    text = ""
    for c in (
        cmd("docker", "exec", ncfg.container.name, "tail", "-n", "5000", cfg.vllm.log),
        cmd("tail", "-n", "5000", cfg.vllm.log),
    ):
        try:
            r = await t.run(c)
        except Exception:  # the other place may still have it; the failure is reported anyway
            log.warning("reading the vLLM log on %s failed (%s)", node, c.argv[0], exc_info=True)
            continue
        if r.ok and r.stdout:
            text = r.stdout
            break
    if SERVE_MARKER_PREFIX in text:
        text = text[text.rindex(SERVE_MARKER_PREFIX) :]
    return text


async def _diagnose_native_serve(
    cfg: Config, transports: dict[str, Transport]
) -> tuple[list[Finding], str]:
    """Native backend: every rank's log, diagnosed on its own (a finding without a node
    gets that rank's node), plus whether the ranks agree on the rendezvous. The tail shown
    is each node's last lines, tagged `[node]`."""
    from dataclasses import replace

    from sparktui.core import native
    from sparktui.core.model import sort_findings
    from sparktui.core.safe_text import clean

    names = [cfg.head.name] + [w.name for w in cfg.workers]
    texts = dict(
        zip(
            names,
            await asyncio.gather(*(serve_log_text(cfg, transports, n) for n in names)),
            strict=True,
        )
    )
    snapshot = await _snapshot_for_diagnosis(cfg, transports) if any(texts.values()) else None
    findings: list[Finding] = native.rendezvous_findings(
        cfg, {n: native.rendezvous_of(t.splitlines()) for n, t in texts.items()}
    )
    tails = []
    per = max(8, LOG_TAIL_LINES // max(1, len(names)))
    for n, text in texts.items():
        for f in diagnose_log_text(text, cfg, snapshot):
            findings.append(f if f.node else replace(f, node=n))
        tails += [f"[{n}] {clean(ln)}" for ln in text.splitlines()[-per:]]
    return sort_findings(findings), "\n".join(tails)


async def _snapshot_for_diagnosis(
    cfg: Config, transports: dict[str, Transport]
) -> ClusterSnapshot | None:
    """Live state to join into the diagnosis; without it the fixes name no live IPs."""
    from sparktui.core.monitor import Monitor

    try:
        return await Monitor(cfg, transports).refresh(wait=None, with_ray=True)
    except Exception:  # the diagnosis still stands without live names and IPs
        log.warning("no live snapshot for the serve diagnosis", exc_info=True)
        return None


def diagnose_log_text(
    text: str, cfg: Config, snapshot: ClusterSnapshot | None = None
) -> list[Finding]:
    """The knowledge base's findings on a log text, root cause first (the one call site of
    sparktui.knowledge here). A broken knowledge base never hides the failure itself."""
    if not text:
        return []
    try:
        from sparktui.knowledge import Matcher, diagnose_bytes, join, load_for_config

        findings = diagnose_bytes(text.encode("utf-8", "replace"), Matcher(load_for_config(cfg)))
        return list(join(findings, snapshot)) if snapshot is not None else list(findings)
    except Exception:  # diagnosis is a help, never a reason to crash the report
        log.exception("diagnosing the serve log failed")
        return []
