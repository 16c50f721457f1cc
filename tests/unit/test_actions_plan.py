"""Plan building: exact argv per node for a lab-like config, stage order and parallelism,
masking in the printed plan, config errors, script mode, the registry."""

from __future__ import annotations

import pytest

from sparktui import config as config_mod
from sparktui.core.actions import ACTIONS, PlanError, available_actions, build_plan
from sparktui.core.actions.builtin import SERVE_SCRIPT

LAB_LIKE = """\
cluster: lab
nodes:
  - {name: spark-1, host: 198.18.5.11, ip: 198.19.5.11, role: head}
  - {name: spark-2, host: 198.18.5.12, ip: 198.19.5.12}
  - {name: spark-3, host: 198.18.5.13, ip: 198.19.5.13}
container:
  name: sl5-ray
  image: sparklab/ray:2.60
  run_args: ["--gpus", "all", "--network", "host"]
  env:
    NCCL_SOCKET_IFNAME: enp1s0f0np0
    VLLM_HOST_IP: 10.1.2.3
    HF_TOKEN: hf_secret123
ray:
  port: 6380
  extra_args: ["--num-gpus", "1"]
vllm:
  model: /models/tiny
  args: ["--tensor-parallel-size", "3", "--distributed-executor-backend", "ray"]
  port: 8001
  log: /var/log/sparktui/vllm.log
"""


def cfg(text: str = LAB_LIKE):
    return config_mod.parse(text, "lab.yaml")


def test_restart_stages_in_order_and_parallel_where_safe():
    plan = build_plan("restart", cfg())
    assert plan.mutating and plan.source == "builtin"
    assert [s.name for s in plan.stages] == [
        "tear down",
        "start the Ray head",
        "wait for the GCS",
        "start the Ray workers",
        "wait for the workers' raylets",
        "wait for the Ray cluster",
    ]
    assert [s.node for s in plan.stages[0].steps] == ["spark-1", "spark-2", "spark-3"]
    assert [s.node for s in plan.stages[1].steps] == ["spark-1"]
    assert [s.node for s in plan.stages[3].steps] == ["spark-2", "spark-3"]
    assert plan.stages[2].steps[0].kind == "wait"
    assert [(s.node, s.kind) for s in plan.stages[4].steps] == [
        ("spark-2", "wait"),
        ("spark-3", "wait"),
    ]
    assert [(s.node, s.kind) for s in plan.stages[5].steps] == [("spark-1", "wait")]


def test_restart_exact_argv_head_and_workers():
    plan = build_plan("restart", cfg())
    assert plan.stages[0].steps[1].commands[0].argv == ("docker", "rm", "-f", "sl5-ray")
    head = plan.stages[1].steps[0].commands[0]
    assert head.mutating
    assert head.argv == (
        "docker",
        "run",
        "-d",
        "--name",
        "sl5-ray",
        "--gpus",
        "all",
        "--network",
        "host",
        "-e",
        "VLLM_HOST_IP=198.19.5.11",
        "-e",
        "NCCL_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "HF_TOKEN=hf_secret123",
        "-v",
        "/var/log/sparktui:/var/log/sparktui",
        "sparklab/ray:2.60",
        "ray",
        "start",
        "--block",
        "--head",
        "--node-ip-address",
        "198.19.5.11",
        "--port",
        "6380",
        "--num-gpus",
        "1",
    )
    w3 = plan.stages[3].steps[1].commands[0]
    assert w3.argv == (
        "docker",
        "run",
        "-d",
        "--name",
        "sl5-ray",
        "--gpus",
        "all",
        "--network",
        "host",
        "-e",
        "VLLM_HOST_IP=198.19.5.13",
        "-e",
        "NCCL_SOCKET_IFNAME=enp1s0f0np0",
        "-e",
        "HF_TOKEN=hf_secret123",
        "sparklab/ray:2.60",
        "ray",
        "start",
        "--block",
        "--address",
        "198.19.5.11:6380",
        "--node-ip-address",
        "198.19.5.13",
        "--num-gpus",
        "1",
    )
    # the configured (cluster-wide) VLLM_HOST_IP never reaches a container
    for st in plan.stages:
        for s in st.steps:
            for c in s.commands:
                assert "VLLM_HOST_IP=10.1.2.3" not in c.argv


def test_waits_are_read_only_and_bounded():
    plan = build_plan("restart", cfg())
    for st in plan.stages:
        for s in st.steps:
            if s.kind == "wait":
                assert not s.mutating and 0 < s.timeout <= 600
    ray_wait = plan.stages[5].steps[0]
    assert ray_wait.node == "spark-1"
    assert "198.19.5.13" in ray_wait.until and ">= 3 GPUs" in ray_wait.until


def test_printed_plan_masks_secrets_but_command_keeps_them():
    plan = build_plan("restart", cfg())
    text = plan.render()
    assert "hf_secret123" not in text and "HF_TOKEN=****" in text
    assert "hf_secret123" not in str(plan.to_dict())
    assert "[spark-3]" in text and "--node-ip-address 198.19.5.13" in text
    short = plan.render(full=False)
    assert len(short) < len(text)


def test_teardown_is_one_parallel_stage():
    plan = build_plan("teardown", cfg())
    assert len(plan.stages) == 1
    assert [(s.node, s.commands[0].argv) for s in plan.stages[0].steps] == [
        (n, ("docker", "rm", "-f", "sl5-ray")) for n in ("spark-1", "spark-2", "spark-3")
    ]


def test_teardown_is_idempotent_on_missing_container():
    from sparktui.core.command import Result

    step = build_plan("teardown", cfg()).stages[0].steps[0]
    assert step.judge(Result(1, "", "Error response from daemon: No such container: sl5-ray")) == (
        "ok",
        "already absent",
    )
    assert step.judge(Result(1, "", "permission denied"))[0] == "failed"


def test_serve_plan_argv():
    plan = build_plan("serve", cfg())
    assert plan.preflight
    start = plan.stages[0].steps[0].commands[0]
    assert start.mutating and start.argv == (
        "docker",
        "exec",
        "-d",
        "sl5-ray",
        "sh",
        "-c",
        SERVE_SCRIPT,
        "sh",
        "/var/log/sparktui/vllm.log",
        "vllm",
        "serve",
        "/models/tiny",
        "--tensor-parallel-size",
        "3",
        "--distributed-executor-backend",
        "ray",
        "--port",
        "8001",
    )
    health = plan.stages[1].steps[0]
    assert health.kind == "wait" and health.commands[0].argv[-3:-1] == ("8001", "sl5-ray")
    assert health.timeout == 900


def test_serve_port_from_args_is_not_repeated():
    c = cfg(LAB_LIKE.replace('"ray"]', '"ray", "--port=9000"]'))
    argv = build_plan("serve", c).stages[0].steps[0].commands[0].argv
    assert argv.count("--port") == 0 and "--port=9000" in argv


def test_plan_errors_are_one_line():
    with pytest.raises(PlanError, match="container.image"):
        build_plan("restart", cfg(LAB_LIKE.replace("  image: sparklab/ray:2.60\n", "")))
    with pytest.raises(PlanError, match="vllm.model"):
        build_plan("serve", cfg(LAB_LIKE.replace("  model: /models/tiny\n", "")))
    no_head_ip = LAB_LIKE.replace(", ip: 198.19.5.11, role: head", ", role: head")
    with pytest.raises(PlanError, match="head .* has no ip"):
        build_plan("restart", cfg(no_head_ip))
    with pytest.raises(PlanError, match="unknown action"):
        build_plan("explode", cfg())


def test_warnings_for_unpinned_and_bridged():
    text = LAB_LIKE.replace('"--network", "host"', '"--shm-size", "1g"').replace(
        ", ip: 198.19.5.13", ""
    )
    plan = build_plan("restart", cfg(text))
    assert any("--network host" in w for w in plan.warnings)
    assert any("spark-3: no ip" in w for w in plan.warnings)
    w = plan.stages[3].steps[1].commands[0].argv
    assert "--node-ip-address" not in w
    # without a node ip, the configured env is passed as written
    assert [a for a in w if a.startswith("VLLM_HOST_IP=")] == ["VLLM_HOST_IP=10.1.2.3"]


def test_script_mode_replaces_builtin_plan():
    text = LAB_LIKE + (
        "actions:\n  restart: {run: [/opt/launch.sh, --restart], "
        "nodes: [spark-2, spark-1], timeout: 42}\n"
    )
    plan = build_plan("restart", cfg(text))
    assert plan.source == "script" and plan.mutating
    assert [(st.steps[0].node, st.steps[0].kind) for st in plan.stages] == [
        ("spark-2", "run"),
        ("spark-2", "wait"),
        ("spark-1", "run"),
        ("spark-1", "wait"),
    ]
    start = plan.stages[0].steps[0].commands[0]
    assert start.argv[-2:] == ("/opt/launch.sh", "--restart") and start.mutating
    assert plan.stages[1].steps[0].timeout == 42
    # other actions keep the built-in plan
    assert build_plan("teardown", cfg(text)).source == "builtin"


def test_registry_drops_mutating_actions_when_read_only():
    assert {a.name for a in ACTIONS.values() if a.mutating} == {"teardown", "restart", "serve"}
    assert [a.name for a in available_actions(True)] == ["doctor"]
    assert [a.name for a in available_actions(False)] == ["teardown", "restart", "serve", "doctor"]
    assert not build_plan("doctor", cfg()).mutating


def test_the_registry_decides_read_only_refusals():
    from sparktui.core.actions import refusal

    for name, spec in ACTIONS.items():
        assert refusal(name, False) is None
        assert (refusal(name, True) is None) == (not spec.mutating)
    assert "read-only" in (refusal("teardown", True) or "")
    assert "unknown action" in (refusal("nope", False) or "")


def test_serve_log_diagnosis_uses_the_knowledge_base():
    from sparktui.core.actions import diagnose_log_text

    text = (
        "=== sparktui serve 2026-01-01T00:00:00Z ===\n"
        "INFO 11-29 22:00:01 [ray_utils.py:1] Waiting for creating a placement group of "
        "specs for 10 seconds. specs=[{'GPU': 1.0, 'node:198.19.5.11': 0.001}, "
        "{'GPU': 1.0}]. Check ray status\n"
    )
    findings = diagnose_log_text(text, cfg())
    assert findings and findings[0].source == "log" and "198.19.5.11" in findings[0].message
    assert diagnose_log_text("", cfg()) == []
