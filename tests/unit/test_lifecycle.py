"""Stalls, latency over the last minute, serve's phase messages: real metrics and real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.core.actions.builtin import serve_wait_verdict
from sparktui.core.command import Result
from sparktui.core.lifecycle import Lifecycle
from sparktui.core.model import ClusterSnapshot, NodeState, VllmStatus
from sparktui.core.phases import parse_log_tail, parse_phases
from sparktui.core.probes.vllm_metrics import parse_histograms, parse_vllm_metrics
from sparktui.core.serialize import snapshot_to_dict

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
METRICS = (FIX / "vllm_metrics_sample_under_load.txt").read_text()
HEALTHY = FIX / "lab" / "serve_tp2_healthy.vllm.log"


def _raw(p: Path) -> str:
    with open(p, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


def _snap(v: VllmStatus) -> ClusterSnapshot:
    nodes = [
        NodeState("spark-1", "h1", "head", "198.19.13.11", reachable=True),
        NodeState("spark-2", "h2", "worker", "198.19.13.12", reachable=True),
    ]
    return ClusterSnapshot("lab", nodes, vllm=v)


def test_histograms_of_the_real_metrics() -> None:
    h = parse_histograms(METRICS)
    ttft = h["vllm:time_to_first_token_seconds"]
    assert ttft.count == 408 and ttft.buckets[-1] == (float("inf"), 408.0)
    # rank 204 of 408 lies in (0.02, 0.04]: 94 below, 246 at or below
    assert ttft.quantile(0.5) == pytest.approx(0.02 + 0.02 * (204 - 94) / (246 - 94))
    assert 0.06 < (ttft.quantile(0.95) or 0) <= 0.1
    itl = h["vllm:inter_token_latency_seconds"]
    assert itl.quantile(0.5) is not None and itl.quantile(0.5) <= 0.01
    assert itl.mean == pytest.approx(itl.sum / itl.count)


def _status(text: str, healthy: bool = True) -> VllmStatus:
    v = parse_vllm_metrics(text)
    v.healthy = healthy
    return v


def test_latency_is_the_difference_over_the_window() -> None:
    lc = Lifecycle(60)
    first = _status(METRICS)
    lc.feed_status(first, 0.0)
    assert first.ttft_p50_s is None  # one sample: no window yet
    # the same counters a bit later, 10 more first tokens all in (0.1, 0.25]
    later = METRICS.replace(
        'le="0.25",model_name="tinyllama"} 408.0', 'le="0.25",model_name="tinyllama"} 418.0'
    )
    for le in (
        "0.5",
        "0.75",
        "1.0",
        "2.5",
        "5.0",
        "7.5",
        "10.0",
        "20.0",
        "40.0",
        "80.0",
        "160.0",
        "640.0",
        "2560.0",
        "+Inf",
    ):
        later = later.replace(
            f'time_to_first_token_seconds_bucket{{engine="0",le="{le}",'
            f'model_name="tinyllama"}} 408.0',
            f'time_to_first_token_seconds_bucket{{engine="0",le="{le}",'
            f'model_name="tinyllama"}} 418.0',
        )
    later = later.replace(
        'time_to_first_token_seconds_count{engine="0",model_name="tinyllama"} 408.0',
        'time_to_first_token_seconds_count{engine="0",model_name="tinyllama"} 418.0',
    )
    v = _status(later)
    assert v.histograms["ttft"].count == 418
    lc.feed_status(v, 10.0)
    assert v.ttft_p50_s is not None and 0.1 < v.ttft_p50_s <= 0.25
    assert v.itl_p50_s is None  # no new inter-token observations in the window


def test_vllm_stalled_only_with_requests_running_and_tokens_frozen() -> None:
    lc = Lifecycle(stall_seconds=5)
    base = _status(METRICS)
    assert base.running == 36.0
    for t in (0.0, 2.0, 4.0):
        lc.feed_status(_status(METRICS), t)
        assert not lc.findings(_snap(base), t, "spark-1")
    lc.feed_status(_status(METRICS), 6.0)
    found = lc.findings(_snap(base), 6.0, "spark-1")
    assert [f.id for f in found] == ["vllm-stalled"] and found[0].node == "spark-1"
    assert "36 request(s) running" in found[0].message and "tear down" in found[0].fix
    # the counter moves again: gone
    moved = _status(
        METRICS.replace(
            'vllm:generation_tokens_total{engine="0",model_name="tinyllama"} 12918.0',
            'vllm:generation_tokens_total{engine="0",model_name="tinyllama"} 12919.0',
        )
    )
    assert moved.generation_tokens_total == 12919.0
    lc.feed_status(moved, 7.0)
    assert not lc.findings(_snap(moved), 7.0, "spark-1")
    # silence with nothing running is not a stall
    idle = _status(
        METRICS.replace(
            'vllm:num_requests_running{engine="0",model_name="tinyllama"} 36.0',
            'vllm:num_requests_running{engine="0",model_name="tinyllama"} 0.0',
        )
    )
    assert idle.running == 0
    for t in (8.0, 20.0, 40.0):
        lc.feed_status(idle, t)
        assert not lc.findings(_snap(idle), t, "spark-1")


def test_load_stalled_when_the_bar_stops_and_names_the_node() -> None:
    lines = _raw(HEALTHY).split("\n")
    cut = next(i for i, line in enumerate(lines) if "0/1 [00:00<?" in line) + 1
    tl = parse_phases(lines[:cut], year=2026)
    lc = Lifecycle(stall_seconds=5)
    v = VllmStatus()
    lc.feed_timeline(tl, 0.0)
    lc.feed_status(v, 0.0)
    assert v.phase == "loading-weights" and v.phase_progress == 0.0
    assert not lc.findings(_snap(v), 4.0, "spark-1")
    lc.feed_timeline(tl, 6.0)
    found = lc.findings(_snap(v), 6.0, "spark-1")
    assert [f.id for f in found] == ["vllm-load-stalled"]
    assert found[0].node == "spark-1" and "0/1" in found[0].message
    # it moves: gone
    tl2 = parse_phases(lines[: cut + 1], year=2026)
    lc.feed_timeline(tl2, 7.0)
    assert not lc.findings(_snap(v), 7.0, "spark-1")


def test_status_json_phase_fields_from_a_log_tail() -> None:
    lines = _raw(HEALTHY).split("\n")
    cut = next(i for i, line in enumerate(lines) if "0/1 [00:00<?" in line) + 1
    body = "\n".join(lines[:cut])
    tail = f"mtime=1795999607 size={len(body.encode())}\n" + body
    tl, mtime = parse_log_tail(tail)
    assert tl is not None and mtime == 1795999607.0 and tl.marker_line == 1
    lc = Lifecycle(60)
    lc.feed_timeline(tl, 0.0, mtime)
    v = VllmStatus()
    lc.feed_status(v, 0.0)
    d = snapshot_to_dict(_snap(v))["vllm"]
    assert d["phase"] == "loading-weights" and d["phase_progress"] == 0.0
    assert d["phase_started_at"] == "2026-11-30T00:46:46Z"
    assert set(d["phase_ranks"]) == {"", "198.19.13.12"}  # the monitor names them


def test_serve_wait_says_the_phase_and_where_it_stopped() -> None:
    lines = _raw(HEALTHY).split("\n")
    cut = next(i for i, line in enumerate(lines) if "0/1 [00:00<?" in line) + 1
    log = "partial line\n" + "\n".join(lines[:cut])
    pending = Result(1, "vLLM starting (/health: 000)\n@@sparktui:log@@\n" + log, "")
    verdict, msg = serve_wait_verdict(pending)
    assert verdict == "pending"
    assert msg == "phase: loading weights 0% (0/1) (vLLM starting (/health: 000))"
    died = Result(3, "the vllm serve process has exited\n@@sparktui:log@@\n" + log, "")
    verdict, msg = serve_wait_verdict(died)
    assert verdict == "failed" and "start-up phase: loading weights" in msg
    assert serve_wait_verdict(Result(0, "healthy (HTTP 200)\n", "")) == ("ok", "healthy (HTTP 200)")


def test_a_server_that_served_then_stopped_answering_is_not_starting() -> None:
    """The whole healthy log reads 'ready'; /health then stops answering (a worker died):
    the strip must not say 'starting API server' for a run that already served."""
    body = _raw(HEALTHY)
    tl, _ = parse_log_tail(f"mtime=1795999607 size={len(body.encode())}\n" + body)
    assert tl is not None and tl.phase == "ready"
    lc = Lifecycle(60)
    lc.feed_timeline(tl, 0.0)
    before = lc.feed_status(VllmStatus(), 0.0)  # ready in the log, /health not yet
    assert before.phase == "api-server"
    assert lc.feed_status(VllmStatus(healthy=True), 1.0).phase == "ready"
    after = lc.feed_status(VllmStatus(healthy=None, detail="not reachable"), 2.0)
    assert after.phase is None
