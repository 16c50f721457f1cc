"""The executor on real local processes: progress events, parallel stages, bounded waits,
failure reporting with the failing step's node and output tail, read-only refusal, the
audit log (masked), cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from sparktui.core.actions import audit
from sparktui.core.actions.executor import execute
from sparktui.core.actions.plan import Plan, Stage, Step
from sparktui.core.command import cmd, sh
from sparktui.core.transport import LocalTransport


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def transports(*names, read_only=False):
    return {n: LocalTransport(n, read_only=read_only) for n in names}


def touch_plan(tmp_path, name="x"):
    return Plan(
        name,
        [
            Stage(
                "one",
                (
                    Step("a", "touch a", (cmd("touch", str(tmp_path / "a"), mutating=True),)),
                    Step("b", "touch b", (cmd("touch", str(tmp_path / "b"), mutating=True),)),
                ),
            ),
            Stage(
                "two", (Step("a", "touch c", (cmd("touch", str(tmp_path / "c"), mutating=True),)),)
            ),
        ],
    )


async def test_runs_stages_in_order_and_reports_events(tmp_path):
    events = []
    result = await execute(touch_plan(tmp_path), transports("a", "b"), events.append)
    assert result.ok and result.state == "ok"
    assert all((tmp_path / f).exists() for f in "abc")
    by_step = {}
    for ev in events:
        by_step.setdefault(ev.step, []).append(ev.state)
    assert by_step == {
        0: ["pending", "running", "ok"],
        1: ["pending", "running", "ok"],
        2: ["pending", "running", "ok"],
    }
    assert [s.commands[0].exit_status for s in result.steps] == [0, 0, 0]


async def test_steps_of_a_stage_run_in_parallel():
    plan = Plan(
        "p",
        [Stage("sleep", tuple(Step(n, "sleep", (cmd("sleep", "0.5"),)) for n in ("a", "b", "c")))],
    )
    t0 = time.monotonic()
    result = await execute(plan, transports("a", "b", "c"))
    assert result.ok and time.monotonic() - t0 < 1.2


async def test_failure_names_step_node_and_tail_and_stops(tmp_path):
    failing = sh('echo "loading weights"; echo "boom: disk full" >&2; exit 7', mutating=True)
    plan = Plan(
        "restart",
        [
            Stage(
                "start",
                (
                    Step("a", "touch a", (cmd("touch", str(tmp_path / "a"), mutating=True),)),
                    Step("b", "start the head", (failing,)),
                ),
            ),
            Stage(
                "later",
                (Step("a", "touch c", (cmd("touch", str(tmp_path / "c"), mutating=True),)),),
            ),
        ],
    )
    events = []
    result = await execute(plan, transports("a", "b"), events.append)
    assert not result.ok and result.state == "failed"
    assert result.message.startswith("step 'start the head' on node b failed: exit 7")
    assert "boom: disk full" in result.message
    assert result.failed_step.node == "b" and "loading weights" in result.failed_step.output
    assert not (tmp_path / "c").exists()
    assert [s.state for s in result.steps] == ["ok", "failed", "skipped"]
    assert ("b", "failed") in [(e.node, e.state) for e in events]


async def test_node_output_in_messages_and_events_is_terminal_safe():
    from sparktui.core.safe_text import CONTROL_RE

    noisy = sh(
        r"printf 'ok\033]0;title\007\033[2J\n'; printf 'boom\033[31m red\n' >&2; exit 3",
        mutating=True,
    )
    plan = Plan("restart", [Stage("start", (Step("b", "start the head", (noisy,)),))])
    events = []
    result = await execute(plan, transports("b"), events.append)
    assert not result.ok and "boom red" in result.message
    texts = [
        result.message,
        result.failed_step.output,
        *(e.message for e in events),
        *(e.output for e in events),
    ]
    assert "ok" in result.failed_step.output
    assert [t for t in texts if "\x1b" in t or CONTROL_RE.search(t)] == []


async def test_wait_polls_until_ready(tmp_path):
    flag = tmp_path / "ready"
    plan = Plan(
        "w",
        [
            Stage(
                "wait",
                (
                    Step(
                        "a",
                        "wait for the flag",
                        (sh('test -e "$1"', str(flag)),),
                        kind="wait",
                        timeout=5,
                        interval=0.1,
                    ),
                ),
            )
        ],
    )
    task = asyncio.ensure_future(execute(plan, transports("a")))
    await asyncio.sleep(0.4)
    flag.touch()
    result = await task
    assert result.ok and result.steps[0].polls >= 2
    assert len(result.steps[0].commands) == 1  # only the last poll is kept


async def test_wait_times_out_with_last_message():
    plan = Plan(
        "w",
        [
            Stage(
                "wait",
                (
                    Step(
                        "a",
                        "wait for godot",
                        (sh('echo "still waiting"; exit 1'),),
                        kind="wait",
                        timeout=0.6,
                        interval=0.1,
                        until="godot arrives",
                    ),
                ),
            )
        ],
    )
    t0 = time.monotonic()
    result = await execute(plan, transports("a"))
    assert time.monotonic() - t0 < 2
    assert not result.ok
    assert "timed out after 0.6s waiting for godot arrives" in result.message
    assert "still waiting" in result.message


async def test_wait_fails_fast_and_cancels_sibling_waits():
    plan = Plan(
        "w",
        [
            Stage(
                "wait",
                (
                    Step("a", "forever", (sh("exit 1"),), kind="wait", timeout=30, interval=0.1),
                    Step(
                        "b",
                        "container",
                        (sh('echo "container gone"; exit 3'),),
                        kind="wait",
                        timeout=30,
                        interval=0.1,
                    ),
                ),
            )
        ],
    )
    t0 = time.monotonic()
    result = await execute(plan, transports("a", "b"))
    assert time.monotonic() - t0 < 3
    assert result.failed_step.node == "b" and "container gone" in result.message
    assert result.steps[0].state == "cancelled"


async def test_command_timeout_is_enforced():
    plan = Plan("t", [Stage("s", (Step("a", "hang", (cmd("sleep", "10", timeout=0.3),)),))])
    result = await execute(plan, transports("a"))
    assert not result.ok and "timed out" in result.message


async def test_read_only_refuses_up_front_and_sends_nothing(tmp_path, state_home):
    ts = transports("a", "b", read_only=True)
    events = []
    result = await execute(touch_plan(tmp_path, "teardown"), ts, events.append)
    assert result.state == "refused" and "read-only" in result.message
    assert not any((tmp_path / f).exists() for f in "abc")
    assert [s for t in ts.values() for s in t.sent if s.mutating] == []
    assert {e.state for e in events} == {"pending", "refused"}
    lines = audit.read(state_home / "sparktui" / "audit.log")
    assert len(lines) == 3 and {ln["status"] for ln in lines} == {"refused"}
    assert lines[0]["action"] == "teardown" and lines[0]["node"] == "a"


async def test_read_only_flag_refuses_even_with_writable_transports(tmp_path):
    result = await execute(touch_plan(tmp_path), transports("a", "b"), read_only=True)
    assert result.state == "refused" and not (tmp_path / "a").exists()


async def test_read_only_allows_read_only_plans():
    plan = Plan("doctor", [Stage("s", (Step("a", "look", (cmd("true"),)),))])
    result = await execute(plan, transports("a", read_only=True))
    assert result.ok


async def test_audit_lines_for_mutating_commands_only_with_secrets_masked(tmp_path, state_home):
    plan = Plan(
        "restart",
        [
            Stage(
                "s",
                (
                    Step(
                        "a",
                        "secret",
                        (cmd("true", "-e", "HF_TOKEN=hf_abc", "--api-key", "sk-1", mutating=True),),
                    ),
                    Step("b", "look", (cmd("true"),)),
                    Step("c", "fail", (cmd("false", mutating=True),)),
                ),
            )
        ],
    )
    await execute(plan, transports("a", "b", "c"))
    log = state_home / "sparktui" / "audit.log"
    text = log.read_text()
    assert "hf_abc" not in text and "sk-1" not in text
    lines = audit.read(log)
    assert [
        (ln["node"], ln["status"], ln["exit"]) for ln in sorted(lines, key=lambda x: x["node"])
    ] == [("a", "ok", 0), ("c", "failed", 1)]
    a = next(ln for ln in lines if ln["node"] == "a")
    assert a["argv"] == ["true", "-e", "HF_TOKEN=****", "--api-key", "****"]
    assert a["user"] and a["time"] and a["action"] == "restart"
    assert oct(log.stat().st_mode & 0o777) == "0o600"


async def test_cancel_stops_waiting_not_the_work(tmp_path):
    out = tmp_path / "out"
    # detached work on the "node": it must finish although we cancel
    start = sh('(sleep 0.5; touch "$1") </dev/null >/dev/null 2>&1 &', str(out), mutating=True)
    plan = Plan(
        "p",
        [
            Stage("start", (Step("a", "start", (start,)),)),
            Stage(
                "wait", (Step("a", "wait", (sh("exit 1"),), kind="wait", timeout=30, interval=0.1),)
            ),
        ],
    )
    events = []
    task = asyncio.ensure_future(execute(plan, transports("a"), events.append))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events[-1].state == "cancelled" and "keeps running" in events[-1].message
    await asyncio.sleep(0.6)
    assert out.exists()


async def test_async_event_callbacks_and_broken_callbacks(tmp_path):
    seen = []

    async def cb(ev):
        seen.append(ev.state)
        if ev.state == "running":
            raise RuntimeError("UI bug")

    result = await execute(touch_plan(tmp_path), transports("a", "b"), cb)
    assert result.ok and seen.count("ok") == 3


async def test_unreachable_node_fails_with_its_name():
    plan = Plan("p", [Stage("s", (Step("ghost", "do", (cmd("true", mutating=True),)),))])
    result = await execute(plan, transports("a"))
    assert not result.ok and "ghost" in result.message


async def test_a_sufficient_wait_covers_the_other_waits_of_its_stage():
    plan = Plan(
        "w",
        [
            Stage(
                "wait",
                (
                    Step(
                        "a",
                        "whole cluster",
                        (sh("sleep 0.2"),),
                        kind="wait",
                        timeout=10,
                        interval=0.1,
                        sufficient=True,
                    ),
                    Step("b", "raylet", (sh("exit 1"),), kind="wait", timeout=10, interval=0.1),
                ),
            )
        ],
    )
    t0 = time.monotonic()
    result = await execute(plan, transports("a", "b"))
    assert result.ok and time.monotonic() - t0 < 2
    assert result.steps[1].state == "ok" and "covered by: whole cluster" in result.steps[1].message


def _stub_docker(tmp_path, state: str, logs: str = "") -> dict:
    """A `docker` on PATH that answers inspect with `state` and logs with `logs`."""
    import os

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    stub = bindir / "docker"
    stub.write_text(
        f'#!/bin/sh\ncase "$1" in inspect) echo {state};; logs) printf "%s\\n" "{logs}";; esac\n'
    )
    stub.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


@pytest.mark.parametrize(
    "listening,state,logs,expect",
    [
        (True, "running", "", 0),
        (False, "running", "", 1),
        (False, "running", "Ray runtime started.", 0),
        (False, "exited", "", 3),
    ],
)
def test_gcs_wait_script_on_real_sockets(tmp_path, listening, state, logs, expect):
    import socket
    import subprocess

    from sparktui.core.actions.builtin import GCS_SCRIPT

    env = _stub_docker(tmp_path, state, logs)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    if listening:
        srv.listen()
    try:
        r = subprocess.run(
            ["sh", "-c", GCS_SCRIPT, "sh", "c", f"{port:04X}", str(port)],
            capture_output=True,
            text=True,
            env=env,
            timeout=10,
        )
    finally:
        srv.close()
    assert r.returncode == expect, r.stdout + r.stderr
