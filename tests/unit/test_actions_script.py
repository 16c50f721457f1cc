"""Script mode on real local processes: the user's script runs detached, its exit status
and output come back through the wait step, and it survives the console giving up."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from sparktui import config as config_mod
from sparktui.core.actions.executor import execute
from sparktui.core.actions.script import script_plan
from sparktui.core.transport import LocalTransport


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def setup(tmp_path, script: str, timeout: int = 20):
    path = tmp_path / "launch.sh"
    path.write_text(script)
    path.chmod(0o755)
    cfg = config_mod.parse(
        textwrap.dedent(f"""\
        nodes:
          - {{name: a, host: local, ip: 127.0.0.1, role: head}}
          - {{name: b, host: local, ip: 127.0.0.2}}
        actions:
          restart: {{run: ["{path}", "--x y"], nodes: all, timeout: {timeout}}}
    """),
        "c.yaml",
    )
    plan = script_plan(cfg, cfg.actions["restart"], run_root=str(tmp_path / "runs"))
    return plan, {"a": LocalTransport("a"), "b": LocalTransport("b")}


async def test_script_runs_on_each_node_in_order_with_args(tmp_path):
    log = tmp_path / "log"
    plan, ts = setup(tmp_path, f'#!/bin/sh\necho "$1 on $(hostname)" >> {log}\necho finished\n')
    result = await execute(plan, ts)
    assert result.ok, result.message
    assert log.read_text().splitlines() == [f"--x y on {__import__('socket').gethostname()}"] * 2
    assert [s.node for s in result.steps] == ["a", "a", "b", "b"]
    assert result.steps[1].message == "finished"


async def test_script_failure_reports_exit_status_and_output(tmp_path):
    plan, ts = setup(
        tmp_path, "#!/bin/sh\necho 'pulling image'\necho 'no space left' >&2\nexit 4\n"
    )
    result = await execute(plan, ts)
    assert not result.ok
    assert result.failed_step.node == "a"
    assert "the script exited 4" in result.message and "no space left" in result.message
    assert [s.state for s in result.steps] == ["ok", "failed", "skipped", "skipped"]


async def test_script_keeps_running_when_waiting_is_cancelled(tmp_path):
    done = tmp_path / "done"
    plan, ts = setup(tmp_path, f"#!/bin/sh\nsleep 0.8\ntouch {done}\n")
    task = asyncio.ensure_future(execute(plan, ts))
    await asyncio.sleep(0.4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not done.exists()
    await asyncio.sleep(1.0)
    assert done.exists()


async def test_script_timeout(tmp_path):
    plan, ts = setup(tmp_path, "#!/bin/sh\nsleep 5\n", timeout=1)
    result = await execute(plan, ts)
    assert not result.ok and "timed out after 1s" in result.message
