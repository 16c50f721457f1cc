"""Actions: tear down, restart, serve, doctor. The one registry of what can be done.

Public API (the CLI and the TUI use only this):

- `ACTIONS` / `available_actions(read_only)`: the registry, with a `mutating` flag each.
- `build_plan(name, cfg) -> Plan`: what the action would run (script mode honoured);
  `Plan.render()` is the dry-run text, `Plan.to_dict()` its JSON.
- `await run_action(name, cfg, transports=None, on_event=None, force=False) -> ActionResult`:
  preflight (serve), lock, execute with progress events (`ActionEvent`), audit.
"""

from __future__ import annotations

from dataclasses import dataclass

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

__all__ = [
    "ACTIONS", "ActionBusy", "ActionEvent", "ActionResult", "ActionSpec", "EventCallback",
    "Executor", "Plan", "PlanError", "Stage", "Step", "StepResult", "action_lock",
    "available_actions", "build_plan", "execute", "run_action", "running_action",
]


@dataclass(frozen=True)
class ActionSpec:
    name: str
    title: str
    description: str
    mutating: bool
    key: str  # default console key (the user's keymap may remap it by `name`)
    confirm: bool  # ask before running


ACTIONS: dict[str, ActionSpec] = {a.name: a for a in (
    ActionSpec("teardown", "Tear down", "stop and remove the container on every node "
               "(serve process included)", True, "t", True),
    ActionSpec("restart", "Restart", "tear down, start the Ray head then the workers pinned "
               "to the configured IPs, wait until every node is alive", True, "r", True),
    ActionSpec("serve", "Serve", "preflight, then vllm serve on the head (detached, output to "
               "the log), wait for /health", True, "s", True),
    ActionSpec("doctor", "Doctor", "preflight checks: reachability, image, Ray nodes and IPs, "
               "interfaces, GPUs, model path, memory, stale containers, ports", False, "d", False),
)}


def available_actions(read_only: bool) -> list[ActionSpec]:
    """The actions this console may offer: in read-only mode the mutating ones are dropped."""
    return [a for a in ACTIONS.values() if not (read_only and a.mutating)]


def build_plan(name: str, cfg) -> Plan:
    """The plan for action `name` from the config; script mode when `actions.<name>` is set.
    Raises PlanError (one line for the user) when the config cannot give it."""
    from sparktui.core.actions import builtin, doctor, script

    if name not in ACTIONS:
        raise PlanError(f"unknown action '{name}' (known: {', '.join(ACTIONS)})")
    if name in cfg.actions:
        return script.script_plan(cfg, cfg.actions[name])
    if name == "teardown":
        return builtin.teardown_plan(cfg)
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
    import inspect

    try:
        out = on_event(ev)
        if inspect.isawaitable(out):
            await out
    except Exception:
        pass


async def run_action(name: str, cfg, transports: dict | None = None,
                     on_event: EventCallback | None = None, *, force: bool = False,
                     lock_file=None) -> ActionResult:
    """Run one action to its end and say how it went (never raises for a failed action;
    cancelling the awaiting task stops waiting, never the nodes' work).

    Preflight events (serve) carry stage -1 and node "cluster"."""
    import asyncio
    import time

    from sparktui.core.actions.doctor import run_doctor
    from sparktui.core.ssh import transport_for

    start = time.monotonic()
    own = transports is None
    if transports is None:
        transports = {n.name: transport_for(n, read_only=cfg.read_only) for n in cfg.nodes}
    try:
        if name == "doctor":
            report = await run_doctor(cfg, transports)
            errors = report.errors
            return ActionResult("doctor", not errors, "failed" if errors else "ok",
                                f"{len(errors)} error(s), {len(report.findings)} finding(s)",
                                findings=report.findings, duration=time.monotonic() - start)
        try:
            plan = build_plan(name, cfg)
        except PlanError as e:
            return ActionResult(name, False, "aborted", str(e))
        executor = Executor(plan, transports, on_event, read_only=cfg.read_only)
        if executor.refusal() is not None:
            return await executor.run()
        try:
            with action_lock(name, lock_file):
                findings = []
                if plan.preflight:
                    pre = ActionEvent(name, -1, "preflight", -1, "cluster",
                                      "preflight checks (doctor)", "running")
                    await _notify(on_event, pre)
                    report = await run_doctor(cfg, transports)
                    findings = report.findings
                    blocking = [f for f in findings
                                if f.severity == "error" or f.id in SERVE_BLOCKERS]
                    if blocking and not force:
                        msg = (f"preflight found {len(blocking)} problem(s), first: "
                               f"{blocking[0].message}")
                        await _notify(on_event, ActionEvent(
                            name, -1, "preflight", -1, "cluster", pre.description, "failed",
                            msg))
                        return ActionResult(name, False, "aborted", msg, findings=findings,
                                            duration=time.monotonic() - start)
                    await _notify(on_event, ActionEvent(
                        name, -1, "preflight", -1, "cluster", pre.description, "ok",
                        f"{len(findings)} finding(s), none blocking" if not blocking
                        else f"{len(blocking)} problem(s) ignored (--force)"))
                result = await executor.run()
                result.findings = findings + result.findings
                if name == "serve" and not result.ok and plan.source == "builtin":
                    diag, result.log_tail = await _diagnose_serve(cfg, transports)
                    result.findings = diag + result.findings
                result.duration = time.monotonic() - start
                return result
        except ActionBusy as e:
            return ActionResult(name, False, "busy", str(e))
    finally:
        if own:
            await asyncio.gather(*(t.close() for t in transports.values()),
                                 return_exceptions=True)


async def _diagnose_serve(cfg, transports: dict) -> tuple[list, str]:
    """Read this run's part of the vLLM log on the head and diagnose it, with live state
    joined in (the fix names the node and the IP)."""
    from sparktui.core.actions.builtin import SERVE_MARKER_PREFIX
    from sparktui.core.command import cmd

    head = cfg.head
    t = transports.get(head.name)
    if t is None:
        return [], ""
    text = ""
    for c in (cmd("docker", "exec", head.container.name, "tail", "-n", "5000", cfg.vllm.log),
              cmd("tail", "-n", "5000", cfg.vllm.log)):
        try:
            r = await t.run(c)
        except Exception:
            continue
        if r.ok and r.stdout:
            text = r.stdout
            break
    if SERVE_MARKER_PREFIX in text:
        text = text[text.rindex(SERVE_MARKER_PREFIX):]
    snapshot = None
    if text:
        try:
            from sparktui.core.monitor import Monitor

            snapshot = await Monitor(cfg, transports).refresh(wait=None, with_ray=True)
        except Exception:
            snapshot = None
    from sparktui.core.safe_text import clean

    tail = "\n".join(clean(ln) for ln in text.splitlines()[-LOG_TAIL_LINES:])
    return diagnose_log_text(text, cfg, snapshot), tail


def diagnose_log_text(text: str, cfg, snapshot=None) -> list:
    """The knowledge base's findings on a log text, root cause first (the one call site of
    sparktui.knowledge here). A broken knowledge base never hides the failure itself."""
    if not text:
        return []
    try:
        from sparktui.knowledge import Matcher, diagnose_bytes, join, load_for_config

        findings = diagnose_bytes(text.encode("utf-8", "replace"), Matcher(load_for_config(cfg)))
        return list(join(findings, snapshot)) if snapshot is not None else list(findings)
    except Exception:  # diagnosis is a help, never a reason to crash the report
        return []
