"""Script mode: `actions: {restart: {run: [...], nodes: [...]}}` runs the user's own launch
script on the named nodes, one node after the other, instead of the built-in plan.

The script is started detached (setsid/nohup, output to a run directory on the node), so
it keeps running if sparktui dies; a wait step then polls for its exit status."""

from __future__ import annotations

import time

from sparktui.config import Config, ScriptAction
from sparktui.core.actions.plan import Plan, Stage, Step, Verdict
from sparktui.core.command import Result, sh
from sparktui.remote import script

RUN_ROOT = "/tmp/sparktui/actions"

# The detached start ($1 run directory, then the user's argv) and the poll for its exit
# status ($1 run directory): sparktui/remote/script_start.sh, script_poll.sh.
START_SCRIPT = script("script_start.sh")
POLL_SCRIPT = script("script_poll.sh")


def script_verdict(result: Result) -> Verdict:
    if result.exit_status == 1 or result.timed_out:
        return "pending", result.tail(3)
    if not result.ok:
        return "failed", result.tail(10)
    lines = result.stdout.splitlines()
    rc = lines[0].removeprefix("@@RC ").strip() if lines and lines[0].startswith("@@RC") else "?"
    tail = "\n".join(lines[1:][-10:])
    if rc == "0":
        return "ok", tail.splitlines()[-1] if tail else "exit 0"
    return "failed", f"the script exited {rc}: {tail}"


def script_plan(
    cfg: Config, action: ScriptAction, *, now: float | None = None, run_root: str | None = None
) -> Plan:
    run_root = run_root or RUN_ROOT
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now if now is not None else time.time()))
    stages = []
    for name in action.nodes:
        run_dir = f"{run_root}/{action.name}-{stamp}-{name}"
        start = sh(
            START_SCRIPT,
            run_dir,
            *action.run,
            mutating=True,
            timeout=30,
            description=f"start {action.run[0]} detached",
        )
        poll = sh(POLL_SCRIPT, run_dir, timeout=20)
        stages.append(
            Stage(
                f"run the {action.name} script on {name}",
                (Step(name, f"start {' '.join(action.run)}", (start,)),),
            )
        )
        stages.append(
            Stage(
                f"wait for the script on {name}",
                (
                    Step(
                        name,
                        f"wait for {action.run[0]} to finish",
                        (poll,),
                        kind="wait",
                        timeout=action.timeout,
                        interval=1.0,
                        verdict=script_verdict,
                        until=f"the script exits (status and output in {run_dir})",
                    ),
                ),
            )
        )
    return Plan(
        action.name,
        stages,
        source="script",
        title=f"{action.name.capitalize()} (script mode): {' '.join(action.run)} on "
        + ", ".join(action.nodes),
    )
