"""Read-only audit of every CLI command on the lab, through the real `sparktui` CLI in a
subprocess: with `--read-only` (before or after the subcommand) and with `read_only: true`
in the config (no flag), teardown/restart/serve exit non-zero with a message saying
read-only refused them, the audit log holds only `refused` entries, and the nodes'
containers are the same ones, still running; doctor and status still work. Every
transport the CLI process makes is recorded (its `sent` record, dumped at exit): 0 mutating
commands sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]

# `python -m sparktui`, plus a record of every Transport's `sent` deque, written at exit.
RUNNER = r"""
import atexit, json, os, sys
from sparktui.core import transport
made = []
_init = transport.Transport.__init__
def _recording_init(self, *a, **kw):
    _init(self, *a, **kw)
    made.append(self)
transport.Transport.__init__ = _recording_init
def _dump():
    with open(os.environ["SPARKTUI_TEST_SENT"], "w") as fh:
        json.dump({"transports": [{"node": t.node, "read_only": t.read_only} for t in made],
                   "sent": [{"node": r.node, "argv": list(r.argv), "mutating": r.mutating,
                             "refused": r.refused} for t in made for r in t.sent]}, fh)
atexit.register(_dump)
from sparktui.cli import main
sys.exit(main(sys.argv[1:]))
"""

MUTATING = ("teardown", "restart", "serve")


def run_cli(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    record = tmp / f"sent-{len(list(tmp.glob('sent-*')))}.json"
    env = dict(
        os.environ,
        XDG_STATE_HOME=str(tmp / "state"),
        PYTHONPATH=str(ROOT),
        SPARKTUI_TEST_SENT=str(record),
    )
    env.pop("SPARKTUI_CONFIG", None)
    p = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=ROOT,
    )
    return p, json.loads(record.read_text())


def audit(tmp: Path) -> list[dict]:
    path = tmp / "state" / "sparktui" / "audit.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def configs(healthy_lab, tmp_path) -> dict[str, Path]:
    """The lab's config with a vllm: section (serve can be planned), and the same with
    `read_only: true`."""
    data = yaml.safe_load(healthy_lab.config_path.read_text())
    data["vllm"] = {"model": "facebook/opt-125m", "args": ["--tensor-parallel-size", "2"]}
    plain = tmp_path / "lab.yaml"
    plain.write_text(yaml.safe_dump(data))
    ro = tmp_path / "lab-ro.yaml"
    ro.write_text(yaml.safe_dump({**data, "read_only": True}))
    return {"flag": plain, "config": ro}


def argv_for(how: str, action: str, cfg: Path, *extra: str) -> list[str]:
    if how == "flag-before":
        return ["--read-only", action, "-c", str(cfg), *extra]
    if how == "flag-after":
        return [action, "--read-only", "-c", str(cfg), *extra]
    return [action, "-c", str(cfg), *extra]  # read_only: true in the config


@pytest.mark.parametrize("how", ["flag-before", "flag-after", "config"])
def test_mutating_commands_are_refused_and_change_nothing(healthy_lab, configs, tmp_path, how):
    lab = healthy_lab
    cfg = configs["config" if how == "config" else "flag"]
    before = lab.containers()
    assert all(before.values()) and all(s == "running" for v in before.values() for _i, s in v)
    tried = 0
    for action in MUTATING:
        for extra in (("--yes",), ("--yes", "--json"), ()):
            n_audit = len(audit(tmp_path))
            p, rec = run_cli(tmp_path, *argv_for(how, action, cfg, *extra))
            tried += 1
            out = p.stdout + p.stderr
            assert p.returncode == 2, (action, extra, out)
            assert "Traceback" not in out
            assert [r for r in rec["sent"] if r["mutating"] and not r["refused"]] == []
            assert all(t["read_only"] for t in rec["transports"])
            if "--json" in extra:
                result = json.loads(p.stdout)
                assert result["state"] == "refused" and not result["ok"]
                assert "read-only" in result["message"]
            else:
                assert f"{action}: refused: read-only mode: '{action}' changes nodes" in p.stderr
                assert "nothing was run" in p.stderr
            new = audit(tmp_path)[n_audit:]
            assert new and {e["status"] for e in new} == {"refused"}, new
            assert {e["action"] for e in new} == {action}
            assert lab.containers() == before
    assert tried == 9


@pytest.mark.parametrize("how", ["flag-before", "config"])
def test_doctor_status_and_dry_run_still_work(healthy_lab, configs, tmp_path, how):
    lab = healthy_lab
    cfg = configs["config" if how == "config" else "flag"]
    before = lab.containers()

    p, rec = run_cli(tmp_path, *argv_for(how, "status", cfg, "--json"))
    assert p.returncode == 0, p.stderr
    snap = json.loads(p.stdout)
    assert all(n["reachable"] and n["ray"]["alive"] for n in snap["nodes"]), snap["nodes"]
    assert rec["sent"] and not [r for r in rec["sent"] if r["mutating"]]

    p, rec = run_cli(tmp_path, *argv_for(how, "doctor", cfg, "--json"))
    assert p.returncode in (0, 1), p.stderr
    doctor = json.loads(p.stdout)
    assert "findings" in doctor
    assert rec["sent"] and not [r for r in rec["sent"] if r["mutating"]]

    for action in MUTATING:
        p, rec = run_cli(tmp_path, *argv_for(how, action, cfg, "--dry-run"))
        assert p.returncode == 0 and "(dry run: nothing was run)" in p.stdout, p.stderr
        assert rec["sent"] == []

    p, rec = run_cli(tmp_path, *argv_for(how, "status", cfg))
    assert p.returncode == 0 and "spark-1" in p.stdout and "spark-2" in p.stdout
    assert audit(tmp_path) == []
    assert lab.containers() == before
