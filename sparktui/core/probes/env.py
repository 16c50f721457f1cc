"""A process's environment (NUL-separated /proc/<pid>/environ) -> the variables that decide
which IP and NIC vLLM, Ray, NCCL, Gloo and UCX use, with secrets masked."""

from __future__ import annotations

from sparktui.core.secrets import MASK, mask_secrets
from sparktui.core.secrets import is_secret_name as is_secret

__all__ = ["MASK", "is_relevant", "is_secret", "mask_secrets", "parse_environ"]

RELEVANT_VARS: frozenset[str] = frozenset(
    {
        "VLLM_HOST_IP",
        "HOST_IP",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "TP_SOCKET_IFNAME",
        "UCX_NET_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RAY_ADDRESS",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_DEBUG",
        "NCCL_IGNORE_CPU_AFFINITY",
        "OMPI_MCA_btl_tcp_if_include",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "MN_IF_NAME",
    }
)
RELEVANT_PREFIXES: tuple[str, ...] = ("VLLM_", "NCCL_", "RAY_", "UCX_", "GLOO_", "TP_SOCKET_")


def is_relevant(name: str) -> bool:
    return name in RELEVANT_VARS or name.startswith(RELEVANT_PREFIXES)


def parse_environ(
    data: str | bytes, *, relevant_only: bool = True, mask: bool = True
) -> dict[str, str]:
    """NUL-separated `NAME=value` entries -> dict (restricted to `is_relevant` names and
    secret-masked by default). Entries without `=` are skipped; the last duplicate wins."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    env: dict[str, str] = {}
    for entry in data.split("\0"):
        name, sep, value = entry.partition("=")
        name = name.strip("\n")
        if not sep or not name:
            continue
        if relevant_only and not is_relevant(name):
            continue
        env[name] = value
    return mask_secrets(env) if mask else env
