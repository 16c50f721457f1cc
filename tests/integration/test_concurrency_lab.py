"""One action at a time, and quitting mid-action, on the lab.

A restart runs (the real CLI in a subprocess, or the console through Pilot); meanwhile a
second action is refused, from another CLI process and in-process (`run_action`), with a
message naming the running one, and it sends nothing. Then the first is interrupted after
its workers' `docker run -d` (SIGINT and SIGTERM to the CLI, `q` in the console): the work
it started on the nodes goes on (the new containers run, Ray becomes whole with every node
under its configured IP), and the lock is free again: a new action is accepted.

Uses the session lab and puts its Ray containers back as the lab made them afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparktui import config
from sparktui.core.actions import action_lock, run_action, running_action
from sparktui.core.transport import Transport
from sparktui.tui.app import SparkApp
from sparktui.tui.live import LiveBackend
from sparktui.tui.screens.confirm import ConfirmScreen
from sparktui.tui.screens.progress import ProgressScreen
from tests.lab import faults
from tests.lab import ray as raymod
from tests.tui.support import started, wait_until

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clab(lab):
    faults.heal(lab)
    yield lab
    raymod.stop(lab)  # the session lab's own Ray containers again
    raymod.start(lab)
    raymod.wait_alive(lab)


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    """One XDG state dir (action lock, audit log) for this test's processes and for this
    process (in-process actions, the console)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def env_for(state: Path) -> dict[str, str]:
    env = dict(os.environ, XDG_STATE_HOME=str(state), PYTHONPATH=str(ROOT))
    env.pop("SPARKTUI_CONFIG", None)
    return env


def sparktui(state: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        capture_output=True,
        text=True,
        env=env_for(state),
        timeout=timeout,
        cwd=ROOT,
    )


class Cli:
    """A `sparktui` subprocess whose stderr (progress lines) is read as it comes."""

    def __init__(self, state: Path, *args: str) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "sparktui", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env_for(state),
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pred, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((ln for ln in self.lines if pred(ln)), None)
            if hit is not None:
                return hit
            if self.p.poll() is not None and not self._t.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(
            f"no {what} in {timeout:g}s; stderr so far:\n" + "\n".join(self.lines[-30:])
        )

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        # not communicate(): it would read stderr too, racing the reader thread for the
        # last lines (stdout carries one summary line, so waiting first cannot fill its pipe)
        self.p.wait(timeout=timeout)
        out = self.p.stdout.read() if self.p.stdout else ""
        self._t.join(5)
        return self.p.returncode, out, "\n".join(self.lines)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


def ray_whole_pinned(lab, timeout: float = 180) -> float:
    """Seconds until every node is alive in Ray under its interconnect (configured) IP."""
    t0 = time.monotonic()
    want = sorted(n.ic_ip for n in lab.nodes)
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = raymod.alive_addresses(raymod.node_table(lab, timeout=30))
            if last == want:
                return time.monotonic() - t0
        except Exception as e:  # noqa: BLE001 - the head may still be starting
            last = str(e)[:200]
        time.sleep(1.0)
    raise AssertionError(f"Ray not whole after {timeout:g}s: {last}")


def workers_started(line: str) -> bool:
    """A progress line saying a worker's `docker run -d` (ray start --address) is done."""
    return " ok " in f" {line} " and "joining" in line


def lock_is_free(state: Path) -> bool:
    try:
        with action_lock("probe", state / "sparktui" / "action.lock"):
            return running_action() == "probe"
    except Exception:  # noqa: BLE001 - ActionBusy
        return False


def second_actions_refused(cfg_path: str, state: Path, pid: int, where: str) -> list[str]:
    """A second action from another CLI and in-process: refused, naming the running one."""
    messages = []
    for action in ("teardown", "restart"):
        r = sparktui(state, action, "-c", cfg_path, "--yes", "--json", timeout=60)
        result = json.loads(r.stdout)
        assert r.returncode == 1 and result["state"] == "busy", (r.stdout, r.stderr)
        assert "another action is running: restart" in result["message"]
        assert where in result["message"]
        if pid:
            assert f"pid {pid}" in result["message"]
        assert result["steps"] == []
        messages.append(result["message"])
    cfg = config.load(cfg_path)
    made: list[Transport] = []

    async def in_process() -> None:
        from sparktui.core.ssh import transport_for

        ts = {n.name: transport_for(n) for n in cfg.nodes}
        made.extend(ts.values())
        try:
            for action in ("teardown", "restart"):
                res = await run_action(action, cfg, ts)
                assert res.state == "busy" and not res.ok, res
                assert "another action is running: restart" in res.message
                messages.append(res.message)
        finally:
            for t in ts.values():
                await t.close()

    asyncio.run(in_process())
    assert [r for t in made for r in t.sent] == []  # refused before anything was sent
    return messages


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_second_action_refused_and_interrupted_restart_finishes_on_the_nodes(clab, state, sig):
    lab = clab
    cfg_path = str(lab.config_path)
    before = lab.containers()
    first = Cli(state, "restart", "-c", cfg_path, "--yes")
    try:
        first.wait_line(lambda ln: " running " in ln, 60, "a running step")
        messages = second_actions_refused(cfg_path, state, first.p.pid, "in another sparktui")
        first.wait_line(workers_started, 180, "the workers' docker run")
        assert first.p.poll() is None, "the restart ended before it could be interrupted"
        t_quit = time.monotonic()
        first.p.send_signal(sig)
        rc, _out, err = first.finish(30)
    finally:
        first.kill()
    assert time.monotonic() - t_quit < 10
    if sig == signal.SIGINT:
        assert rc == 130 and "interrupted; nothing on the nodes was stopped" in err, err
    else:
        assert rc == -signal.SIGTERM
    assert "Traceback" not in err
    # the nodes' work goes on: new containers run, and Ray comes up whole and pinned
    after = lab.containers()
    for node, ctrs in after.items():
        assert ctrs and all(s == "running" for _i, s in ctrs), (node, ctrs)
        assert {i for i, _ in ctrs}.isdisjoint({i for i, _ in before[node]}), node
    whole_s = ray_whole_pinned(lab)
    assert lock_is_free(state)  # what a new action takes first: accepted
    r = sparktui(state, "doctor", "-c", cfg_path, "--json")
    assert r.returncode in (0, 1) and json.loads(r.stdout)["findings"] is not None
    print(
        f"concurrency ({sig.name}): second actions refused: {len(messages)}; "
        f"Ray whole {whole_s:.1f}s after the interrupt; e.g. {messages[0]!r}"
    )


def test_console_refuses_a_second_action_and_q_mid_restart_leaves_the_work_running(clab, state):
    lab = clab
    cfg_path = str(lab.config_path)
    cfg = config.load(cfg_path)
    cfg.refresh_interval = 1.0
    before = lab.containers()
    facts: dict = {}

    async def go() -> None:
        app = SparkApp(LiveBackend(cfg))
        async with app.run_test(size=(160, 50)) as pilot:
            await started(pilot)
            await pilot.press("r")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("tab", "enter")  # the action's own button
            await wait_until(
                pilot,
                lambda: isinstance(app.screen, ProgressScreen) and app.running_action == "restart",
                10,
                "the restart's progress",
            )
            progress = app.screen
            # a second action in the console: refused, naming the running one
            await pilot.press("escape")  # hide the progress; the action keeps running
            await pilot.press("t")
            assert not isinstance(app.screen, ConfirmScreen)
            note = app._notifications
            facts["console_refusal"] = [n.message for n in note if "still running" in n.message]
            assert facts["console_refusal"] == ["restart is still running; one action at a time."]
            # ... from another process: busy, "in this console" is another sparktui to it
            r = await asyncio.to_thread(
                sparktui,
                Path(os.environ["XDG_STATE_HOME"]),
                "teardown",
                "-c",
                cfg_path,
                "--yes",
                "--json",
            )
            result = json.loads(r.stdout)
            assert result["state"] == "busy" and "restart" in result["message"]
            assert f"pid {os.getpid()}" in result["message"]
            # ... and in-process, through the actions layer
            res = await run_action("teardown", cfg, app.backend.monitor.transports)
            assert (
                res.state == "busy"
                and "restart" in res.message
                and "in this console" in res.message
            )

            def workers_started() -> bool:
                assert app.running_action == "restart", "restart ended before the quit"
                joining = [p for p in progress.rows if "joining" in p.description]
                return bool(joining) and all(p.state == "ok" for p in joining)

            await wait_until(pilot, workers_started, 180, "the workers to be started")
            assert app.running_action == "restart"
            facts["states_at_quit"] = sorted({p.state for p in progress.rows})
            await pilot.press("q")
            await pilot.pause(0.2)  # fixed: after q the app is exiting, no condition to poll
            facts["running_after_quit"] = app.is_running
        facts["return_code"] = app.return_code

    t0 = time.monotonic()
    asyncio.run(go())
    facts["quit_s"] = time.monotonic() - t0
    assert facts["running_after_quit"] is False and facts["return_code"] in (None, 0)
    # it really was mid-action: steps not done yet (between two steps the next one is
    # still pending for an instant, with none running)
    assert set(facts["states_at_quit"]) & {"running", "pending"}, facts["states_at_quit"]
    assert running_action() is None  # this process let go of the action ...
    assert lock_is_free(state)  # ... and of the lock file
    after = lab.containers()
    for node, ctrs in after.items():
        assert ctrs and all(s == "running" for _i, s in ctrs), (node, ctrs)
        assert {i for i, _ in ctrs}.isdisjoint({i for i, _ in before[node]}), node
    whole_s = ray_whole_pinned(lab)
    # a new action is accepted and runs to its end
    r = sparktui(state, "restart", "-c", cfg_path, "--yes", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "ok", r.stderr[-2000:]
    print(f"console quit mid-restart: Ray whole {whole_s:.1f}s after q; a new restart ok")
