"""vLLM /metrics parsing on the lab's real sample (vLLM 0.32.0 under load)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.core.model import VllmStatus
from sparktui.core.probes.vllm_metrics import (
    generation_rate,
    health_from_code,
    parse_vllm_metrics,
    tokens_per_s,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def text() -> str:
    return (FIX / "vllm_metrics_sample_under_load.txt").read_text()


def test_real_sample() -> None:
    st = parse_vllm_metrics(text())
    assert st.running == 36.0 and st.waiting == 0.0
    assert st.kv_cache_pct == pytest.approx(0.4395067757294591)  # 0.0043950... fraction
    assert st.prompt_tokens_total == 3785.0 and st.generation_tokens_total == 12918.0
    assert st.healthy is None  # /metrics alone says nothing about /health


def test_old_metric_name_and_two_engines() -> None:
    # the same real sample as an older server would name it, and as two DP engines
    old = text().replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert parse_vllm_metrics(old).kv_cache_pct == pytest.approx(0.4395067757294591)
    lines = [ln for ln in text().splitlines() if not ln.startswith("#")]
    two = (
        "\n".join(
            lines
            + [ln.replace('engine="0"', 'engine="1"') for ln in lines if ln.startswith("vllm:")]
        )
        + "\n"
    )
    st = parse_vllm_metrics(two)
    assert st.running == 72.0 and st.generation_tokens_total == 2 * 12918.0
    assert st.kv_cache_pct == pytest.approx(0.4395067757294591)  # mean, not sum


def test_grep_filtered_and_broken_text() -> None:
    wanted = [
        ln
        for ln in text().splitlines()
        if ln.startswith(("vllm:num_requests_running", "vllm:generation_tokens_total"))
    ]
    st = parse_vllm_metrics("\n".join(wanted) + "\n")
    assert st.running == 36.0 and st.generation_tokens_total == 12918.0 and st.waiting is None
    broken = "this is not prometheus {{{\n" + text()
    assert parse_vllm_metrics(broken).running == 36.0
    assert parse_vllm_metrics("") == VllmStatus()


def test_rates_and_health() -> None:
    assert tokens_per_s(100.0, 10.0, 300.0, 12.0) == 100.0
    assert tokens_per_s(300.0, 10.0, 100.0, 12.0) is None  # counter reset (restart)
    assert tokens_per_s(None, 10.0, 1.0, 12.0) is None
    a = parse_vllm_metrics(text())
    b = VllmStatus(generation_tokens_total=a.generation_tokens_total + 500)
    assert generation_rate(a, 100.0, b, 102.0) == 250.0
    assert generation_rate(None, None, b, 1.0) is None
    assert health_from_code(200) == (True, "healthy")
    assert health_from_code(503)[0] is False
    assert health_from_code(None)[0] is None and health_from_code(0)[0] is None
