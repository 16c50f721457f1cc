"""The action subcommands (`teardown`, `restart`, `serve`: one per entry of the core's
registry without a module of its own, wired by `sparktui.cli`) and what `doctor` shares
with them: plan, dry-run, confirmation, progress on stderr, JSON on stdout, exit codes
(0 ok, 1 failed action or error finding, 2 usage/config error or refusal before anything
ran: read-only, no confirmation)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparktui.core.actions import ActionEvent, Plan
    from sparktui.core.model import Finding


def add_arguments(p: argparse.ArgumentParser, action: str) -> None:
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask for confirmation (needed without a terminal)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the exact commands, per node) and run nothing",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a machine-readable result (steps, exit statuses, findings)",
    )
    if action == "serve":
        p.add_argument(
            "--force", action="store_true", help="serve even if the preflight checks find errors"
        )


def _confirm(plan_text: str) -> bool | None:
    """True/False from the operator, None when there is no terminal to ask on."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    print(plan_text, file=sys.stderr)
    sys.stderr.write("Proceed? [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        return False
    return answer.strip().lower() in ("y", "yes")


class _Progress:
    """One line per step state change on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.t0 = time.monotonic()
        self.quiet = quiet

    def __call__(self, ev: ActionEvent) -> None:
        if self.quiet or ev.state == "pending":
            return
        t = time.monotonic() - self.t0
        msg = ev.message if ev.message and ev.message != ev.description else ""
        line = f"[{t:6.1f}s] {ev.node:<12} {ev.state:<9} {ev.description}"
        if msg:
            line += f": {msg.splitlines()[0] if ev.state == 'running' else msg}"
        print(line, file=sys.stderr, flush=True)


def print_dry_run(plan: Plan, as_json: bool) -> int:
    """Show the plan and run nothing."""
    from sparktui.commands.common import print_json

    if as_json:
        print_json({"dry_run": True, "plan": plan.to_dict()})
    else:
        print(plan.render())
        print("(dry run: nothing was run)")
    return 0


def _print_findings(findings: Iterable[Finding]) -> None:
    for f in findings:
        node = f" [{f.node}]" if f.node else ""
        print(f"{f.severity.upper():7} {f.id}{node}: {f.message}")
        if f.fix:
            print(f"        fix: {f.fix}")


def run(args: argparse.Namespace, action: str) -> int:
    import asyncio

    from sparktui.commands.common import load_config, print_json
    from sparktui.core.actions import ACTIONS, PlanError, build_plan, refusal, run_action

    cfg = load_config(args)
    if cfg is None:
        return 2
    spec = ACTIONS[action]
    try:
        plan = build_plan(action, cfg)
    except PlanError as e:
        print(f"sparktui {action}: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return print_dry_run(plan, args.json)
    # refused here (read-only): not asked, run to be refused step by step and audited
    if spec.confirm and refusal(action, cfg.read_only) is None and not args.yes:
        answer = _confirm(plan.render(full=False))
        if answer is None:
            print(
                f"sparktui {action}: refusing to change nodes without confirmation: run it "
                f"on a terminal, or pass --yes (see the plan with --dry-run)",
                file=sys.stderr,
            )
            return 2
        if not answer:
            print(f"sparktui {action}: cancelled; nothing was run", file=sys.stderr)
            return 2
    result = asyncio.run(
        run_action(
            action, cfg, on_event=_Progress(quiet=False), force=getattr(args, "force", False)
        )
    )
    if args.json:
        print_json(result.to_dict())
    else:
        if result.findings:
            _print_findings(result.findings)
        if result.failed_step is not None and result.failed_step.output:
            print(f"output of the failed step on {result.failed_step.node}:", file=sys.stderr)
            for line in result.failed_step.output.splitlines():
                print(f"  | {line}", file=sys.stderr)
        if result.log_tail:
            print(f"last lines of {cfg.vllm.log} on {cfg.head.name}:", file=sys.stderr)
            for line in result.log_tail.splitlines():
                print(f"  | {line}", file=sys.stderr)
        print(
            f"{action}: {result.state}: {result.message}",
            file=sys.stdout if result.ok else sys.stderr,
        )
    if result.state == "refused":
        return 2
    return 0 if result.ok else 1
