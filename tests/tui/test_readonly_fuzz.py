"""Read-only audit of the console on the lab: random key sequences (every bound key, letters,
digits, Enter, Escape, Tab, arrows, paging, ctrl keys, the command palette) driven into the
real app with the real LiveBackend (Monitor, SSH transports, log follower, actions layer)
on the lab's config in read-only mode. Afterwards the union of every transport's `sent`
record holds 0 mutating commands that were sent (a refused one is recorded as refused),
and every node's containers are the same ones, still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktui import config
from sparktui.core.command import cmd
from sparktui.core.ssh import SshTransport
from sparktui.core.transport import ReadOnlyError, SentRecord, Transport
from sparktui.tui.app import SparkApp
from sparktui.tui.live import LiveBackend
from sparktui.tui.screens.progress import ProgressScreen
from sparktui.tui.widgets.node_pane import NodePane
from tests.tui.support import TestBackend, seed_config, seed_snapshot, started, wait_until

SIZE = (160, 50)
BOUND = ["t", "r", "s", "d", "slash", "f", "l", "c", "w", "question_mark", "g", "G"]
LETTERS = [c for c in "abcdefghijklmnoprstuvwxyz"]  # no q: it would end the run early
OTHER = [
    "enter",
    "escape",
    "tab",
    "shift+tab",
    "up",
    "down",
    "left",
    "right",
    "pageup",
    "pagedown",
    "home",
    "end",
    "space",
    "backspace",
    "delete",
    "0",
    "1",
    "9",
    "ctrl+c",
    "ctrl+p",
    "ctrl+s",
    "ctrl+r",
    "ctrl+t",
    "ctrl+d",
    "ctrl+l",
    "ctrl+f",
    "ctrl+a",
    "ctrl+e",
    "ctrl+u",
    "ctrl+w",
    "ctrl+backslash",
    "f1",
    "f5",
    "ctrl+enter",
]
PAUSE = "<pause>"  # let the collectors (refresh, log follower, doctor) run meanwhile
KEYS = BOUND + LETTERS + OTHER
key_sequences = st.lists(st.one_of(st.sampled_from(KEYS), st.just(PAUSE)), min_size=20, max_size=60)

STATS = {"examples": 0, "keys": 0, "commands": 0, "refused": 0}


@pytest.fixture
def all_transports(monkeypatch) -> list[Transport]:
    """Every Transport made while the test runs (whoever makes it)."""
    made: list[Transport] = []
    init = Transport.__init__

    def recording_init(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(Transport, "__init__", recording_init)
    return made


def sent_records(transports: list[Transport]) -> list[SentRecord]:
    out = [r for t in transports for r in t.sent]
    assert all(len(t.sent) < (t.sent.maxlen or 1 << 30) for t in transports), "record full"
    return out


def mutating_sent(records: list[SentRecord]) -> list[SentRecord]:
    """Commands that change a node and were actually sent (not refused)."""
    return [r for r in records if r.mutating and not r.refused]


def lab_config(lab) -> config.Config:
    cfg = config.load(str(lab.config_path))
    cfg.refresh_interval = 1.0  # more ticks (and more commands) per key sequence
    return cfg


async def drive(cfg: config.Config, keys: list[str]) -> tuple[SparkApp, dict]:
    backend = LiveBackend(cfg, read_only=True)
    app = SparkApp(backend)
    seen: dict = {"reachable": set()}
    async with app.run_test(size=SIZE) as pilot:
        # the head's first probe reads the Ray table (a Python start in its container: slow
        # when the whole suite loads the 2 cores); the asserts below say if it never came
        with contextlib.suppress(AssertionError):
            await wait_until(
                pilot,
                lambda: app.snapshot is not None and all(n.reachable for n in app.snapshot.nodes),
                90,
            )
        for key in [*keys, PAUSE]:
            if app.snapshot is not None:  # every node answered at some point (not stale)
                seen["reachable"] |= {n.name for n in app.snapshot.nodes if n.reachable}
                seen["errors"] = {n.name: n.error for n in app.snapshot.nodes if n.error}
            if not app.is_running:
                break
            if key == PAUSE:
                # a fixed pause on purpose: part of the random input (an operator waiting
                # while refresh, log follower and doctor run), not a wait for a result
                await pilot.pause(0.3)
            else:
                await pilot.press(key)
        seen["panes"] = len(app.screen_stack[0].query(NodePane)) if app.screen_stack else 0
        seen["running_action"] = app.running_action
        if app.is_running:
            await pilot.press("escape", "escape", "escape")  # close a dialog, then quit
            await pilot.press("q")
            await pilot.pause()
    return app, seen


@pytest.mark.lab
@settings(
    max_examples=int(os.environ.get("SPARKTUI_FUZZ_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(keys=key_sequences)
def test_random_keys_in_read_only_send_nothing_that_changes_a_node(
    healthy_lab, all_transports, keys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a palette "screenshot" lands here, not in the repo
    before = healthy_lab.containers()
    start = len(all_transports)
    app, seen = asyncio.run(drive(lab_config(healthy_lab), keys))
    transports = all_transports[start:]
    records = sent_records(transports)
    STATS["examples"] += 1
    STATS["keys"] += sum(k != PAUSE for k in keys)
    STATS["commands"] += len(records)
    STATS["refused"] += sum(r.refused for r in records)
    assert transports and all(t.read_only for t in transports)
    assert records, "the console sent nothing at all: it was not watching the lab"
    assert seen["reachable"] == {n.name for n in healthy_lab.nodes}, seen.get("errors")
    assert mutating_sent(records) == []
    assert all(r.refused for r in records if r.mutating)
    assert healthy_lab.containers() == before
    assert app.return_code in (None, 0)


@pytest.mark.lab
def test_every_bound_key_then_quit(healthy_lab, all_transports, tmp_path, monkeypatch):
    """Deterministically: each bound key (the mutating ones too), Escape after each, and
    q at the end; then the same audit, with the doctor run (d) among them."""
    monkeypatch.chdir(tmp_path)
    before = healthy_lab.containers()
    keys = []
    for k in BOUND:
        keys += [k, PAUSE, "escape"]
    app, seen = asyncio.run(drive(lab_config(healthy_lab), keys + ["d", PAUSE, PAUSE]))
    records = sent_records(all_transports)
    print(
        f"read-only fuzz: {STATS['examples']} random sequences, {STATS['keys']} keys, "
        f"{STATS['commands']} commands recorded ({STATS['refused']} refused), "
        f"0 mutating sent; bound keys: {len(records)} commands"
    )
    assert records and mutating_sent(records) == []
    assert healthy_lab.containers() == before
    assert not app.is_running and seen["running_action"] in (None, "doctor")


@pytest.mark.lab
def test_every_action_asked_directly_in_read_only(
    healthy_lab, all_transports, tmp_path, monkeypatch
):
    """Past the keys: every registry action run as a Textual action (the palette's path),
    and every core action asked of the backend directly (as a bug in the UI might):
    mutating ones refused by the actions layer, nothing mutating sent."""
    from sparktui.tui import actions as registry

    monkeypatch.chdir(tmp_path)
    before = healthy_lab.containers()
    cfg = lab_config(healthy_lab)
    cfg.vllm.model = "facebook/opt-125m"  # serve can be planned, so it is refused, not unplanned
    outcomes = {}

    async def go() -> None:
        backend = LiveBackend(cfg, read_only=True)
        app = SparkApp(backend)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot, 30)
            for a in registry.REGISTRY:
                if a.id == "quit":
                    continue
                await app.run_action(a.action.removeprefix("app."))
                await pilot.pause()
                await pilot.press("escape", "escape")
            for name in ("teardown", "restart", "serve", "doctor"):
                outcomes[name] = await backend.execute(name, lambda _p: None)
            await pilot.press("q")

    asyncio.run(go())
    records = sent_records(all_transports)
    assert records and mutating_sent(records) == []
    for name in ("teardown", "restart", "serve"):
        assert not outcomes[name].ok and "read-only" in outcomes[name].summary, outcomes[name]
    assert "error(s)" in outcomes["doctor"].summary
    assert healthy_lab.containers() == before


@pytest.mark.lab
def test_the_audit_can_see_a_mutating_command(healthy_lab):
    """Positive controls for the two assertions above: a read-only transport records a
    refused mutating command as refused; a normal one records it as sent."""
    cfg = lab_config(healthy_lab)
    harmless = cmd("true", mutating=True, description="declared mutating, changes nothing")

    async def go() -> list[SentRecord]:
        ro, rw = SshTransport(cfg.head, read_only=True), SshTransport(cfg.head)
        try:
            with pytest.raises(ReadOnlyError, match="spark-1: read-only"):
                await ro.run(harmless)
            assert (await rw.run(harmless)).ok
        finally:
            await ro.close()
            await rw.close()
        return [*ro.sent, *rw.sent]

    records = asyncio.run(go())
    assert [(r.mutating, r.refused) for r in records] == [(True, True), (True, False)]
    assert len(mutating_sent(records)) == 1


class SlowDoctorBackend(TestBackend):
    """The doctor takes a while (as over SSH), so Esc can hide its progress first. Long
    enough that a loaded machine's slow frames still see the progress while it runs (0.5 s
    was missed once in CI, with the other core busy)."""

    __test__ = False

    async def execute(self, action, emit):
        await asyncio.sleep(2.0)
        return await super().execute(action, emit)


async def test_hiding_the_progress_then_the_action_ending_does_not_crash():
    """Found by the fuzz above: d, Esc (hides the progress), then the doctor's end updated
    the removed screen and the console died with NoMatches."""
    cfg = seed_config()
    backend = SlowDoctorBackend(cfg, await seed_snapshot(cfg), read_only=True)
    app = SparkApp(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("d")
        await wait_until(
            pilot, lambda: isinstance(app.screen, ProgressScreen), what="the doctor's progress"
        )
        assert isinstance(app.screen, ProgressScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, ProgressScreen)
        await wait_until(pilot, lambda: app.running_action is None, what="the doctor's end")
        assert app.running_action is None and app.is_running
        assert any("doctor:" in n.message for n in app._notifications)
        await pilot.press("d")  # and a second run shows its progress again
        await wait_until(
            pilot, lambda: isinstance(app.screen, ProgressScreen), what="the second run's progress"
        )
        assert isinstance(app.screen, ProgressScreen)
    assert app.return_code in (None, 0)
