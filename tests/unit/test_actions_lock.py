"""One action at a time: in this process, and across processes through the lock file."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sparktui import config as config_mod
from sparktui.core.actions import ActionBusy, action_lock, run_action, running_action
from sparktui.core.transport import LocalTransport


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def test_second_action_in_process_is_refused_naming_the_first():
    with action_lock("restart"):
        assert running_action() == "restart"
        with pytest.raises(ActionBusy, match="another action is running: restart"):
            with action_lock("teardown"):
                pass
        assert running_action() == "restart"  # the refused one did not release it
    assert running_action() is None
    with action_lock("teardown"):  # free again
        pass


def test_second_action_in_another_process_is_refused(state_home):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import sys, time
        from sparktui.core.actions.lock import action_lock
        with action_lock("serve"):
            print("held", flush=True)
            sys.stdin.readline()
    """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ActionBusy) as e:
            with action_lock("restart"):
                pass
        assert e.value.running == "serve"
        assert f"pid {holder.pid}" in str(e.value) and "another sparktui" in str(e.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    with action_lock("restart"):  # released when the holder exited
        pass


async def test_run_action_returns_busy(tmp_path):
    cfg = config_mod.parse(
        textwrap.dedent("""\
        nodes: [{name: n1, host: local, ip: 127.0.0.1, role: head}]
        container: {name: sparktui-test-nothing}
    """),
        "t.yaml",
    )
    t = {"n1": LocalTransport("n1")}
    with action_lock("restart"):
        result = await run_action("teardown", cfg, t)
    assert result.state == "busy" and "restart" in result.message
    assert list(t["n1"].sent) == []
