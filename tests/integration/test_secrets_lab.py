"""Secrets on the lab: the config's container.env carries VLLM_API_KEY, HF_TOKEN,
DB_PASSWORD and S3_SECRET; `sparktui restart` really starts the Ray containers with them
(checked inside the containers), and afterwards their values appear nowhere sparktui writes
or shows:
`status --json` (and plain), `doctor --json`, `restart --json`, `--dry-run` (text and JSON),
the progress lines on stderr, the audit log, a read-only refusal, the console's screen
(node panes, findings, the restart confirmation, the doctor's progress) through Pilot with
the real LiveBackend. Where a variable is shown, its value is `****`.

Uses the session lab and puts its Ray containers back as the lab made them afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from textual.widgets import Static

from sparktui import config
from sparktui.core.command import Command
from sparktui.core.secrets import MASK
from sparktui.core.ssh import SshTransport
from sparktui.core.transport import ReadOnlyError
from sparktui.tui.app import SparkApp
from sparktui.tui.live import LiveBackend
from sparktui.tui.screens.confirm import ConfirmScreen
from sparktui.tui.screens.progress import ProgressScreen
from tests.lab import node as nodemod
from tests.lab import ray as raymod
from tests.tui.support import detail_follows, wait_until

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "VLLM_API_KEY": "s3cret-value",
    "HF_TOKEN": "hf_abc123",
    "DB_PASSWORD": "pw-Zq9x",
    "S3_SECRET": "sk-Lw8r2",
}
VALUES = tuple(SECRETS.values())


def leaks(text: str) -> list[str]:
    return [v for v in VALUES if v in text]


def sparktui(state: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_STATE_HOME=str(state), PYTHONPATH=str(ROOT))
    env.pop("SPARKTUI_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def secret_lab(lab, tmp_path_factory):
    """The session lab restarted by sparktui with secrets in the containers' env."""
    from tests.lab import faults

    faults.heal(lab)
    tmp = tmp_path_factory.mktemp("secrets")
    data = yaml.safe_load(lab.config_path.read_text())
    data["container"]["env"].update(SECRETS)
    data["vllm"] = {"model": "facebook/opt-125m", "args": ["--tensor-parallel-size", "2"]}
    cfg = tmp / "secrets.yaml"
    cfg.write_text(yaml.safe_dump(data))
    state = tmp / "state"
    restart = sparktui(state, "restart", "-c", str(cfg), "--yes", "--json")
    try:
        yield {"lab": lab, "cfg": cfg, "state": state, "tmp": tmp, "restart": restart}
    finally:  # the session lab's own Ray containers again (without the secrets)
        raymod.stop(lab)
        raymod.start(lab)
        raymod.wait_alive(lab)


def test_restart_ran_with_the_secrets_and_printed_none(secret_lab):
    lab, r = secret_lab["lab"], secret_lab["restart"]
    assert r.returncode == 0, r.stderr + r.stdout
    result = json.loads(r.stdout)
    assert result["ok"]
    # the containers really carry the values (so the checks below have something to hide)
    for n in lab.nodes:
        env = nodemod.exec_(n, ["docker", "exec", lab.container, "env"]).stdout
        for k, v in SECRETS.items():
            assert f"{k}={v}" in env.splitlines(), (n.name, k)
    assert leaks(r.stdout) == [] and leaks(r.stderr) == []
    runs = [
        c["argv"]
        for s in result["steps"]
        for c in s["commands"]
        if c["argv"][:2] == ["docker", "run"]
    ]
    assert len(runs) == len(lab.nodes)
    for argv in runs:
        for k in SECRETS:
            assert f"{k}={MASK}" in argv


def test_audit_log_masks_every_value(secret_lab):
    path = secret_lab["state"] / "sparktui" / "audit.log"
    text = path.read_text()
    assert leaks(text) == []
    runs = [json.loads(x) for x in text.splitlines()]
    runs = [e for e in runs if e["argv"][:2] == ["docker", "run"]]
    assert len(runs) == len(secret_lab["lab"].nodes)
    for e in runs:
        assert e["status"] == "ok"
        for k in SECRETS:
            assert f"{k}={MASK}" in e["argv"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_status_doctor_and_dry_run_show_no_value(secret_lab):
    state, cfg = secret_lab["state"], str(secret_lab["cfg"])
    r = sparktui(state, "status", "-c", cfg, "--json")
    assert r.returncode in (0, 1), r.stderr
    assert leaks(r.stdout + r.stderr) == []
    snap = json.loads(r.stdout)
    for n in snap["nodes"]:
        assert n["reachable"]
        assert n["env"].get("VLLM_API_KEY") == MASK, n["env"]  # shown, masked
    r = sparktui(state, "status", "-c", cfg)
    assert leaks(r.stdout + r.stderr) == [] and "spark-1" in r.stdout
    r = sparktui(state, "doctor", "-c", cfg, "--json")
    assert r.returncode in (0, 1) and leaks(r.stdout + r.stderr) == []
    assert json.loads(r.stdout)["findings"] is not None
    for action in ("restart", "serve", "teardown"):
        for extra in ((), ("--json",)):
            r = sparktui(state, action, "-c", cfg, "--dry-run", *extra)
            assert r.returncode == 0, r.stderr
            assert leaks(r.stdout + r.stderr) == [], (action, extra)
            if action == "restart":
                for k in SECRETS:
                    assert f"{k}={MASK}" in r.stdout
    # read-only refusal: the refused commands are audited, masked
    n_audit = len((state / "sparktui" / "audit.log").read_text().splitlines())
    r = sparktui(state, "--read-only", "restart", "-c", cfg, "--yes")
    assert r.returncode == 2 and leaks(r.stdout + r.stderr) == []
    new = (state / "sparktui" / "audit.log").read_text().splitlines()[n_audit:]
    assert new and all(json.loads(x)["status"] == "refused" for x in new)
    assert leaks("\n".join(new)) == [] and f"VLLM_API_KEY={MASK}" in "\n".join(new)


def test_a_refused_command_message_shows_no_value(secret_lab):
    """Whoever asks a read-only transport directly: its refusal names the command masked."""
    cfg = config.load(str(secret_lab["cfg"]))
    c = Command(
        ("docker", "run", "-d", "-e", f"HF_TOKEN={SECRETS['HF_TOKEN']}", "img"),
        mutating=True,
        env=(("DB_PASSWORD", SECRETS["DB_PASSWORD"]),),
    )

    async def go() -> str:
        t = SshTransport(cfg.head, read_only=True)
        try:
            with pytest.raises(ReadOnlyError) as exc:
                await t.run(c)
            return str(exc.value)
        finally:
            await t.close()

    message = asyncio.run(go())
    assert leaks(message) == [] and f"HF_TOKEN={MASK}" in message
    assert f"DB_PASSWORD={MASK}" in message


def _screen_text(app: SparkApp) -> str:
    update = app.screen._compositor.render_update(full=True)
    return "".join(seg.text for line in update.strips for strip in line for seg in strip)


def test_console_shows_no_value(secret_lab, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(secret_lab["tmp"] / "tui-state"))
    cfg = config.load(str(secret_lab["cfg"]))
    cfg.refresh_interval = 1.0
    seen: list[str] = []

    async def go() -> None:
        app = SparkApp(LiveBackend(cfg))
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(
                pilot,
                lambda: app.snapshot is not None and all(n.reachable for n in app.snapshot.nodes),
                30,
                "every node reachable",
            )
            assert app.snapshot is not None
            assert all(n.reachable for n in app.snapshot.nodes)
            assert all(n.env.get("VLLM_API_KEY") == MASK for n in app.snapshot.nodes)
            seen.append(_screen_text(app))
            for i in range(len(app.findings_list._keys)):  # every finding's detail
                app.findings_list.highlighted = i
                await detail_follows(pilot)
                seen.append(_screen_text(app))
            await pilot.press("r")  # the restart confirmation lists the exact commands
            assert isinstance(app.screen, ConfirmScreen)
            confirm = app.screen.query_one("#confirm-text", Static).content.plain
            seen.extend([confirm, _screen_text(app)])
            for k in SECRETS:  # shown, masked, in each node's docker run
                assert confirm.count(f"{k}={MASK}") == len(cfg.nodes), k
            await pilot.press("escape")  # cancel: nothing runs
            await pilot.press("d")  # the doctor's progress and findings
            assert isinstance(app.screen, ProgressScreen)
            await wait_until(pilot, lambda: app.running_action is None, 20, "the doctor to end")
            seen.append(_screen_text(app))
            await pilot.press("escape")
            seen.append(_screen_text(app))
            await pilot.press("q")

    asyncio.run(go())
    text = "\n".join(seen)
    assert "spark-1" in text and "spark-2" in text
    assert leaks(text) == []
