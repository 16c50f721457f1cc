"""Actions against the lab, through the real CLI (`python -m sparktui ...` as a subprocess,
with the lab's own config): teardown, restart, read-only, dry-run, audit, serve failure.

Uses the session's worker-only lab (head registered under its external IP: the mismatch
restart must fix) and puts it back as the lab made it when the module is done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab import node as nodemod
from tests.lab import ray as raymod

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wlab(lab_worker_only):
    yield lab_worker_only
    # leave the lab as the fixture made it (worker-only pinning) for other modules
    raymod.stop(lab_worker_only)
    raymod.start(lab_worker_only)
    raymod.wait_alive(lab_worker_only)


@pytest.fixture(scope="module")
def state_home(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg-state")


@pytest.fixture(scope="module")
def serve_cfg(wlab, tmp_path_factory) -> Path:
    """The lab's config plus a vllm: section (the lab's image has no vLLM)."""
    cfg = tmp_path_factory.mktemp("cfg") / "serve.yaml"
    cfg.write_text(
        wlab.config_path.read_text()
        + (
            "vllm:\n  model: facebook/opt-125m\n  args: [--tensor-parallel-size, '2']\n"
            "  health_timeout: 120\n"
        )
    )
    return cfg


def sparktui(state_home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_STATE_HOME=str(state_home), PYTHONPATH=str(ROOT))
    env.pop("SPARKTUI_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def container_ids(lab) -> dict[str, list[str]]:
    return {
        n.name: sorted(nodemod.exec_(n, ["docker", "ps", "-aq", "--no-trunc"]).stdout.split())
        for n in lab.nodes
    }


def status(state_home: Path, lab) -> dict:
    r = sparktui(state_home, "status", "-c", str(lab.config_path), "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def audit_lines(state_home: Path) -> list[dict]:
    path = state_home / "sparktui" / "audit.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_dry_run_changes_nothing(wlab, state_home, serve_cfg):
    before = container_ids(wlab)
    assert all(before.values())
    for action in ("teardown", "restart", "serve", "doctor"):
        r = sparktui(state_home, action, "-c", str(serve_cfg), "--dry-run")
        assert r.returncode == 0, r.stderr
        assert "nothing was run" in r.stdout
    assert container_ids(wlab) == before
    assert audit_lines(state_home) == []


def test_read_only_restart_is_refused_and_changes_nothing(wlab, state_home):
    before = container_ids(wlab)
    r = sparktui(state_home, "--read-only", "restart", "-c", str(wlab.config_path), "--yes")
    assert r.returncode != 0 and "read-only" in r.stderr
    r = sparktui(state_home, "teardown", "--read-only", "-c", str(wlab.config_path), "--yes")
    assert r.returncode != 0
    assert container_ids(wlab) == before
    lines = audit_lines(state_home)
    assert lines and {ln["status"] for ln in lines} == {"refused"}


def test_without_yes_and_no_terminal_refuses(wlab, state_home):
    before = container_ids(wlab)
    r = sparktui(state_home, "teardown", "-c", str(wlab.config_path))
    assert r.returncode == 2 and "confirmation" in r.stderr
    assert container_ids(wlab) == before


def test_restart_pins_every_node_to_its_configured_ip(wlab, state_home):
    pre = status(state_home, wlab)
    assert "ray-ip-mismatch" in {f["id"] for f in pre["findings"]}  # the worker-only split
    n_audit = len(audit_lines(state_home))
    r = sparktui(state_home, "restart", "-c", str(wlab.config_path), "--yes", "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    result = json.loads(r.stdout)
    assert result["ok"] and result["state"] == "ok"
    post = status(state_home, wlab)
    ids = {f["id"] for f in post["findings"]}
    assert "ray-ip-mismatch" not in ids and "vllm-host-ip-mismatch" not in ids, post["findings"]
    for n in post["nodes"]:
        assert n["ray"]["alive"] and n["ray"]["registered_ip"] == n["configured_ip"], n
        assert n["env"].get("VLLM_HOST_IP") == n["configured_ip"]
    alive = sorted(x["ip"] for x in post["ray"]["nodes"] if x["alive"])
    assert alive == sorted(n.ic_ip for n in wlab.nodes)
    new = audit_lines(state_home)[n_audit:]
    assert [(x["node"], x["argv"][:3], x["status"]) for x in new if x["argv"][1] == "rm"] and all(
        x["status"] == "ok" and x["exit"] == 0 for x in new
    )
    assert {x["node"] for x in new if x["argv"][:2] == ["docker", "run"]} == {"spark-1", "spark-2"}
    r = sparktui(state_home, "doctor", "-c", str(wlab.config_path), "--json")
    doctor = json.loads(r.stdout)
    assert not [f for f in doctor["findings"] if f["severity"] == "error"], doctor


def test_serve_without_vllm_fails_fast_with_the_log(wlab, state_home, serve_cfg):
    """The lab's Ray image has no vLLM: serve must fail on the step that waits for /health,
    show this run's log lines, and leave the cluster up."""
    before = container_ids(wlab)
    r = sparktui(state_home, "serve", "-c", str(serve_cfg), "--yes", "--json")
    assert r.returncode == 1, r.stderr
    result = json.loads(r.stdout)
    assert result["state"] == "failed" and result["failed"]["node"] == "spark-1"
    assert "vllm serve process has exited" in result["message"]
    assert "=== sparktui serve " in result["log_tail"] and "vllm" in result["log_tail"]
    assert result["duration_s"] < 60
    assert container_ids(wlab) == before


def test_teardown_leaves_no_container_and_is_idempotent(wlab, state_home):
    r = sparktui(state_home, "teardown", "-c", str(wlab.config_path), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert [s["message"] for s in json.loads(r.stdout)["steps"]] == ["removed", "removed"]
    assert container_ids(wlab) == {n.name: [] for n in wlab.nodes}
    r = sparktui(state_home, "teardown", "-c", str(wlab.config_path), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert [s["message"] for s in json.loads(r.stdout)["steps"]] == [
        "already absent",
        "already absent",
    ]
    lines = [
        x for x in audit_lines(state_home) if x["action"] == "teardown" and x["status"] != "refused"
    ]
    assert len(lines) == 4 and all(x["exit"] == 0 for x in lines)
