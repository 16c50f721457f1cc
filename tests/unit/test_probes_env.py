"""Process environment parsing on real /proc/<pid>/environ data (fixtures and live)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from sparktui.core.probes.env import (
    MASK,
    is_relevant,
    mask_secrets,
    parse_environ,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "env"


def test_spark_env_from_real_environ() -> None:
    env = parse_environ((FIX / "proc_environ_vllm_like.bin").read_bytes())
    assert env == {
        "VLLM_HOST_IP": "198.19.200.101",
        "NCCL_SOCKET_IFNAME": "=enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "TP_SOCKET_IFNAME": "enp1s0f1np1",
        "UCX_NET_DEVICES": "enp1s0f1np1",
        "MASTER_ADDR": "198.19.200.101",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "RAY_memory_monitor_refresh_ms": "0",
        "VLLM_USE_V1": "1",
    }


def test_unfiltered_keeps_everything_and_masks() -> None:
    env = parse_environ((FIX / "proc_environ_vllm_like.bin").read_bytes(), relevant_only=False)
    assert env["HF_TOKEN"] == MASK and env["WANDB_API_KEY"] == MASK
    assert env["ODD"] == "value with spaces=and=equals"
    raw = parse_environ(
        (FIX / "proc_environ_vllm_like.bin").read_bytes(), relevant_only=False, mask=False
    )
    assert raw["HF_TOKEN"] == "hf_FAKEFIXTUREtoken123"


def test_container_pid1_environ() -> None:
    env = parse_environ((FIX / "docker_exec_pid1_environ.bin").read_bytes())
    assert env == {
        "VLLM_HOST_IP": "192.168.100.10",
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    }


def test_mask_secrets() -> None:
    src = {
        "VLLM_API_KEY": "sk-1",
        "HF_TOKEN": "x",
        "DB_PASSWORD": "p",
        "AWS_SECRET_ACCESS_KEY": "s",
        "VLLM_HOST_IP": "1.2.3.4",
        "EMPTY_TOKEN": "",
    }
    out = mask_secrets(src)
    assert out == {
        "VLLM_API_KEY": MASK,
        "HF_TOKEN": MASK,
        "DB_PASSWORD": MASK,
        "AWS_SECRET_ACCESS_KEY": MASK,
        "VLLM_HOST_IP": "1.2.3.4",
        "EMPTY_TOKEN": "",
    }
    assert src["HF_TOKEN"] == "x"  # a copy


def test_relevance() -> None:
    for name in (
        "VLLM_HOST_IP",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "MASTER_ADDR",
        "RAY_ADDRESS",
        "NCCL_IB_HCA",
        "VLLM_USE_RAY_COMPILED_DAG",
        "RAY_NODE_IP_ADDRESS",
    ):
        assert is_relevant(name), name
    assert not is_relevant("PATH") and not is_relevant("HF_TOKEN")


def test_live_process_environ() -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "VLLM_HOST_IP": "10.9.8.7",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
        "VLLM_API_KEY": "sk-live",
        "MULTI": "a\nb",
    }
    proc = subprocess.Popen(["sleep", "30"], env=env)
    try:
        data = b""
        for _ in range(50):
            data = Path(f"/proc/{proc.pid}/environ").read_bytes()
            if data:
                break
            time.sleep(0.02)
        parsed = parse_environ(data)
        assert parsed == {
            "VLLM_HOST_IP": "10.9.8.7",
            "NCCL_SOCKET_IFNAME": "^docker,lo",
            "VLLM_API_KEY": MASK,
        }
        assert parse_environ(data, relevant_only=False)["MULTI"] == "a\nb"
    finally:
        proc.kill()
        proc.wait()
