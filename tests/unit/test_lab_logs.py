"""The real logs the vLLM lab runs produce (tests/e2e/test_vllm_lab.py keeps every one of them
in tests/fixtures/vllm/lab/): each one's diagnosis, root cause first.

Every `*.log` there must be listed in EXPECTED: a new kept log needs its expectation here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparktui.core.model import ClusterSnapshot, Interface, NodeState, RayNode, RayView
from sparktui.knowledge import Matcher, diagnose_file, join, load_builtin

LAB_LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "vllm" / "lab"

# file -> (first finding's pattern id, its category), or None: no warning or error at all.
EXPECTED: dict[str, tuple[str, str] | None] = {
    # sparktui restart + serve, TP=2 over Ray, then 24 completions: nothing to report
    "serve_tp2_healthy.vllm.log": None,
    # the worker's raylet SIGKILLed while serving: vLLM's rank 1 dies; the driver's log
    # carries Ray's "Raylet is terminated. Termination is unexpected" (the knowledge base's
    # second round names that before the worker-death wrapper)
    "serve_tp2_worker_raylet_killed.vllm.log": (
        "ray.raylet_terminated",
        "ray_worker_died_segfault",
    ),
    "serve_tp2_worker_raylet_killed.spark-1.ray.log": None,  # the head's Ray: fine
    # the worker's `ray start --block`: "Some Ray subprocesses exited unexpectedly: raylet
    # [exit code=-9]"
    "serve_tp2_worker_raylet_killed.spark-2.ray.log": (
        "ray.raylet_exited",
        "ray_worker_died_segfault",
    ),
    # the seed failure: the head's VLLM_HOST_IP = its external IP, Ray pinned to the
    # interconnect, vLLM's old Ray executor, 25 s placement-group wait
    "seed_pg_ip_mismatch_cli.vllm.log": ("pg.no_node_type", "placement_group_ip_mismatch"),
    "seed_pg_ip_mismatch_tui.vllm.log": ("pg.no_node_type", "placement_group_ip_mismatch"),
    "seed_pg_ip_mismatch_cli.spark-1.ray.log": None,
    "seed_pg_ip_mismatch_cli.spark-2.ray.log": None,
    # serving, then `docker kill` of the head's container: the log just stops
    "serve_tp2_head_container_killed.vllm.log": None,
}

# Real logs whose signature the shipped knowledge base does not know yet (strict xfail: a
# new pattern makes them pass, and then this list must shrink).
KB_GAPS: dict[str, str] = {}


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_builtin())


def _params():
    for name in sorted(EXPECTED):
        marks = [pytest.mark.xfail(strict=True, reason=KB_GAPS[name])] if name in KB_GAPS else []
        yield pytest.param(name, EXPECTED[name], id=name, marks=marks)


def test_every_kept_lab_log_has_an_expectation():
    kept = sorted(p.name for p in LAB_LOGS.glob("*.log"))
    assert kept, f"no lab logs in {LAB_LOGS}"
    assert sorted(set(kept) - set(EXPECTED)) == [], "a kept lab log has no expectation"
    assert sorted(set(EXPECTED) - set(kept)) == [], "an expected lab log is missing"


def test_vllm_logs_are_real_runs():
    for name in EXPECTED:
        if not name.endswith(".vllm.log"):
            continue
        text = (LAB_LOGS / name).read_text(errors="replace")
        assert text.startswith("=== sparktui serve "), name  # serve's marker line
        assert "version 0.32.0" in text and "tensor_parallel_size=2" in text, name
        if name.startswith("serve_tp2"):  # rank 1 ran as a Ray actor on the worker
            assert re.search(r"\(RayWorkerProc pid=\d+, ip=198\.19\.\d+\.12\)", text), name


@pytest.mark.parametrize(("name", "expected"), list(_params()))
def test_lab_log_first_finding(matcher, name, expected):
    findings = [
        f for f in diagnose_file(LAB_LOGS / name, matcher) if f.severity in ("error", "warning")
    ]
    if expected is None:
        assert findings == [], [(f.id, f.message) for f in findings]
        return
    assert findings, "no finding"
    assert (findings[0].id, findings[0].category) == expected, [
        (f.id, f.category) for f in findings
    ]


def _seed_snapshot(k: int) -> ClusterSnapshot:
    """The lab as it was during the seed run: Ray pinned to the interconnect, the head's
    container environment with VLLM_HOST_IP = its external address."""
    nodes = []
    for i in (1, 2):
        ext, ic = f"198.18.{k}.1{i}", f"198.19.{k}.1{i}"
        nodes.append(
            NodeState(
                name=f"spark-{i}",
                host=ext,
                role="head" if i == 1 else "worker",
                configured_ip=ic,
                reachable=True,
                interfaces=[Interface("enP7s7", "UP", [ext]), Interface("enp1s0f0np0", "UP", [ic])],
                ray=RayView(registered_ip=ic, alive=True, gpus=1.0),
                env={"VLLM_HOST_IP": ext if i == 1 else ic},
            )
        )
    return ClusterSnapshot(
        "lab",
        nodes,
        ray_nodes=[
            RayNode(f"n{i}", f"198.19.{k}.1{i}", True, is_head=i == 1, gpus=1.0) for i in (1, 2)
        ],
    )


@pytest.mark.parametrize(
    "name", ["seed_pg_ip_mismatch_cli.vllm.log", "seed_pg_ip_mismatch_tui.vllm.log"]
)
def test_seed_log_joined_names_the_node_the_variable_and_both_ips(matcher, name):
    text = (LAB_LOGS / name).read_text(errors="replace")
    m = re.search(r"'node:198\.18\.(\d+)\.11': 0\.001", text)
    assert m, "the placement group is not pinned to the head's external address"
    k = int(m.group(1))
    first = join(diagnose_file(LAB_LOGS / name, matcher), _seed_snapshot(k))[0]
    assert first.category == "placement_group_ip_mismatch" and first.node == "spark-1"
    assert first.captures["ip"] == f"198.18.{k}.11"
    assert f"Set VLLM_HOST_IP=198.19.{k}.11 on spark-1" in first.fix
    assert f"VLLM_HOST_IP=198.18.{k}.11" in first.fix
