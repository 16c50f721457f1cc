"""`sparktui teardown|restart|serve|doctor`: dry-run runs nothing, confirmation, read-only,
exit codes, JSON, script mode through the real CLI on this machine (host: local)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from sparktui import cli
from sparktui.core.actions import audit


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def no_transports(monkeypatch):
    """Any attempt to reach a node fails the test."""

    def boom(*a, **k):
        raise AssertionError("a transport was created")

    monkeypatch.setattr("sparktui.core.ssh.transport_for", boom)


def write_cfg(tmp_path, extra: str = "") -> str:
    p = tmp_path / "c.yaml"
    p.write_text(
        textwrap.dedent("""\
        nodes:
          - {name: spark-1, host: 198.18.250.11, ip: 198.19.250.11, role: head}
          - {name: spark-2, host: 198.18.250.12, ip: 198.19.250.12}
        container: {name: sl-test, image: "img:1", run_args: [--network, host]}
        vllm: {model: /m, args: [--tensor-parallel-size, "2"]}
    """)
        + extra
    )
    return str(p)


def local_script_cfg(tmp_path) -> tuple[str, object]:
    marker = tmp_path / "ran"
    p = tmp_path / "local.yaml"
    p.write_text(
        textwrap.dedent(f"""\
        nodes: [{{name: me, host: local, ip: 127.0.0.1, role: head}}]
        container: {{name: sparktui-unit-none}}
        actions:
          teardown: {{run: [sh, -c, 'echo hi > "$0"; echo done', "{marker}"], nodes: all, timeout: 20}}
    """)
    )
    return str(p), marker


@pytest.mark.parametrize("action", ["teardown", "restart", "serve", "doctor"])
def test_dry_run_prints_plan_and_runs_nothing(tmp_path, capsys, no_transports, action, state_home):
    assert cli.main([action, "-c", write_cfg(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[spark-1]" in out and "nothing was run" in out
    assert ("[spark-2]" in out) == (action != "serve")  # serve runs on the head only
    assert not (state_home / "sparktui" / "audit.log").exists()


def test_dry_run_json(tmp_path, capsys, no_transports):
    assert cli.main(["restart", "-c", write_cfg(tmp_path), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dry_run"] and data["plan"]["mutating"]
    head = data["plan"]["stages"][1]["steps"][0]["commands"][0]["argv"]
    assert head[-5:] == ["--head", "--node-ip-address", "198.19.250.11", "--port", "6379"]


def test_without_yes_and_without_tty_refuses(tmp_path, capsys, no_transports):
    assert cli.main(["teardown", "-c", write_cfg(tmp_path)]) == 2
    assert "without confirmation" in capsys.readouterr().err


def test_config_errors_exit_2(tmp_path, capsys):
    assert cli.main(["restart", "-c", str(tmp_path / "missing.yaml"), "--dry-run"]) == 2
    p = tmp_path / "noimg.yaml"
    p.write_text("nodes: [{name: a, host: 198.18.250.11, ip: 198.19.250.11, role: head}]\n")
    assert cli.main(["restart", "-c", str(p), "--dry-run"]) == 2
    assert "container.image" in capsys.readouterr().err


def test_read_only_refuses_with_exit_2_and_audits(tmp_path, capsys, state_home):
    cfg, marker = local_script_cfg(tmp_path)
    assert cli.main(["teardown", "-c", cfg, "--read-only", "--yes"]) == 2
    assert not marker.exists()
    assert "read-only" in capsys.readouterr().err
    lines = audit.read(state_home / "sparktui" / "audit.log")
    assert lines and {ln["status"] for ln in lines} == {"refused"}


def test_script_mode_runs_with_yes_and_audits(tmp_path, capsys, state_home, monkeypatch):
    import sparktui.core.actions.script as script_mod

    monkeypatch.setattr(script_mod, "RUN_ROOT", str(tmp_path / "runs"))
    cfg, marker = local_script_cfg(tmp_path)
    assert cli.main(["teardown", "-c", cfg, "--yes", "--json"]) == 0
    assert marker.read_text() == "hi\n"
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and [s["state"] for s in data["steps"]] == ["ok", "ok"]
    assert data["steps"][1]["message"] == "done"
    lines = audit.read(state_home / "sparktui" / "audit.log")
    assert [(ln["node"], ln["status"], ln["exit"]) for ln in lines] == [("me", "ok", 0)]


def test_read_only_subcommand_flag_via_subprocess(tmp_path):
    """The real CLI entry point, as an operator runs it."""
    cfg, marker = local_script_cfg(tmp_path)
    env = {"XDG_STATE_HOME": str(tmp_path / "s2"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-m", "sparktui", "--read-only", "teardown", "-c", cfg, "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2 and not marker.exists(), r.stderr
