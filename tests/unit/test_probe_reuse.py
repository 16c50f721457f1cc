"""What a probe may skip and what the monitor keeps (core/probe_reuse.py), on the probe's real
output of a lab worker (tests/fixtures/probe/README.md)."""

from __future__ import annotations

from pathlib import Path

from sparktui.core.probe_reuse import (
    APPS_EVERY,
    APPS_EVERY_RESIDENT,
    ENV_MAX_AGE,
    ENV_MAX_AGE_RESIDENT,
    ProbeReuse,
)
from sparktui.core.probes.script import parse_probe

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "probe"


def _probe(name: str):
    return parse_probe((FIX / name).read_bytes().decode("utf-8", "replace"))


def test_an_unchanged_env_key_reuses_the_environment_read_before() -> None:
    full, skipped = _probe("lab_worker_probe_api.txt"), _probe("lab_worker_probe_api_unchanged.txt")
    assert full.env_key and full.env_key == skipped.env_key
    assert skipped.env_unchanged and skipped.env == {} and skipped.apps_skipped
    r = ProbeReuse()
    assert r.args("spark-2", 0.0) == ("gpus,apps", None)  # nothing known: ask everything
    r.merge("spark-2", full, 0.0)
    assert r.args("spark-2", 1.0) == ("gpus", full.env_key)
    r.merge("spark-2", skipped, 1.0)
    assert skipped.env == full.env and skipped.env["VLLM_HOST_IP"] == "198.19.10.12"
    assert (skipped.env_pid, skipped.env_source) == (full.env_pid, full.env_source)
    assert skipped.gpu_processes == full.gpu_processes


def test_the_environment_and_gpu_processes_are_asked_again_in_time() -> None:
    full = _probe("lab_worker_probe_api.txt")
    r = ProbeReuse()
    r.merge("n", full, 0.0)
    asked = []
    for i in range(1, 2 * APPS_EVERY + 1):
        q, key = r.args("n", float(i))
        asked.append(q)
        r.merge("n", _probe("lab_worker_probe_api_unchanged.txt"), float(i))
    assert asked.count("gpus,apps") == 2  # every APPS_EVERY probes
    assert r.args("n", ENV_MAX_AGE + 0.1)[1] is None  # too old: read the environment again


def test_a_failed_node_starts_from_nothing() -> None:
    r = ProbeReuse()
    r.merge("n", _probe("lab_worker_probe_api.txt"), 0.0)
    r.forget("n")
    assert r.args("n", 1.0) == ("gpus,apps", None)
    skipped = _probe("lab_worker_probe_api_unchanged.txt")
    r.merge("n", skipped, 1.0)  # a skip the monitor holds no copy for fills nothing
    assert skipped.env == {} and r.args("n", 2.0)[1] is None


def test_the_resident_cadence_asks_gpu_processes_again_when_vllm_changes() -> None:
    """The resident probe asks the GPU processes every APPS_EVERY_RESIDENT probes, and at once
    when the vLLM processes (the env key) changed since they were read."""
    r = ProbeReuse(APPS_EVERY_RESIDENT, ENV_MAX_AGE_RESIDENT)
    r.merge("n", _probe("lab_worker_probe_api.txt"), 0.0)
    asked = []
    for i in range(1, APPS_EVERY_RESIDENT):
        asked.append(r.args("n", float(i))[0])
        r.merge("n", _probe("lab_worker_probe_api_unchanged.txt"), float(i))
    assert set(asked) == {"gpus"}  # nothing changed: not asked again within the cadence
    moved = _probe("lab_worker_probe_api_unchanged.txt")
    moved.env_key = f"{moved.env_key} 4242"  # a new vLLM process in the container
    r.merge("n", moved, 100.0)
    assert r.args("n", 101.0)[0] == "gpus,apps"
    full = _probe("lab_worker_probe_api.txt")
    r.merge("n", full, 102.0)
    assert r.args("n", 103.0) == ("gpus", full.env_key)
    assert r.args("n", 102.0 + ENV_MAX_AGE_RESIDENT)[1] is None  # the age net under the key
