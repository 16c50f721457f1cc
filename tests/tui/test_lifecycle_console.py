"""The serve lifecycle in the console: the strip's phase bar and latency, GPU sensors on the
node pane, every node's log (n cycles nodes, o opens a finding's node at its line), and a
worker's own crash line as a finding on the worker. Log lines are real (the lab's vLLM log
and a Ray worker's SIGSEGV line from a public thread, tests/fixtures/crashlogs)."""

from __future__ import annotations

from pathlib import Path

from sparktui.core.model import VllmStatus
from sparktui.core.probes.gpu import parse_gpu_query
from sparktui.tui.app import SparkApp
from sparktui.tui.widgets.findings import FindingsList
from sparktui.tui.widgets.log_pane import LogView
from sparktui.tui.widgets.node_pane import gpu_sensors
from sparktui.tui.widgets.vllm_strip import render_vllm
from tests.tui.support import (
    TestBackend,
    log_applied,
    seed_config,
    seed_snapshot,
    started,
    wait_until,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SIZE = (160, 50)
# vllm-project/vllm#6938's neighbour in the corpus: a Ray worker's own glog death line
SEGV = (
    "(RayWorkerWrapper pid=24036) [2024-07-25 10:46:00,050 E 24036 24036] logging.cc:440: "
    "*** SIGSEGV received at time=1721904360 on cpu 140 ***"
)


def test_strip_shows_phase_bar_eta_then_latency() -> None:
    starting = VllmStatus(
        phase="loading-weights", phase_label="loading weights", phase_progress=0.5, phase_eta_s=6.0
    )
    text = render_vllm(starting, 8000).plain
    assert "◔ starting" in text and "loading weights" in text
    assert "█████░░░░░" in text and "50%" in text and "ETA 0:06" in text
    serving = VllmStatus(
        healthy=True,
        running=2,
        ttft_p50_s=0.0367,
        ttft_p95_s=0.094,
        itl_p50_s=0.0207,
        itl_p95_s=0.049,
        prompt_tokens_per_s=12.3,
    )
    text = render_vllm(serving, 8000).plain
    assert "TTFT 37/94 ms" in text and "ITL 21/49 ms" in text and "prompt 12.3/s" in text
    assert "loading" not in text
    # nothing new while nothing is known: the strip reads as before
    assert "TTFT" not in render_vllm(VllmStatus(healthy=True), 8000).plain


def test_node_pane_gpu_sensors_from_a_real_h200_query() -> None:
    from sparktui.core.model import NodeState

    n = NodeState("h200", "h", "head", None, reachable=True)
    n.gpus = parse_gpu_query(
        (FIX / "gpu_device" / "query_gpu_power_noheader_nounits.csv").read_text()
    )
    assert gpu_sensors(n) == "99 W · 35 °C · SM 345 MHz"
    n.gpus = parse_gpu_query((FIX / "gpu_device" / "query_gpu_busy.csv").read_text())
    assert gpu_sensors(n) == ""  # an older probe's row: no line at all


async def test_every_node_log_n_cycles_and_o_opens_the_workers_line() -> None:
    cfg = seed_config()
    backend = TestBackend(cfg, await seed_snapshot(cfg))
    app = SparkApp(backend)
    head_lines = (
        (FIX / "vllm" / "lab" / "serve_tp2_healthy.vllm.log")
        .read_text(errors="replace")
        .splitlines()[:40]
    )
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        backend.feed(head_lines, node="spark-1")
        backend.feed(["ray start: worker joined", SEGV], node="spark-2")
        await log_applied(pilot, backend)
        view = app.main.query_one(LogView)
        assert view.sources == ["spark-1", "spark-2"]
        # the worker's own crash line is a finding on the worker
        await wait_until(
            pilot,
            lambda: any(f.node == "spark-2" and f.source == "log" for f in app.main.all_findings()),
            what="the worker's SIGSEGV as a finding on spark-2",
        )
        found = next(
            f for f in app.main.all_findings() if f.node == "spark-2" and f.source == "log"
        )
        assert found.line == len(head_lines) + 2
        # n: spark-1 only, spark-2 only, every node again
        await pilot.press("n")
        assert view.node_filter == "spark-1" and {e.node for e in view.view} == {"spark-1"}
        await pilot.press("n")
        assert view.node_filter == "spark-2" and [e.text for e in view.view][-1] == SEGV
        await pilot.press("n")
        assert view.node_filter is None and len(view.view) == len(head_lines) + 2
        # o on the worker's finding: its node's log, at its line, follow paused there
        flist = app.main.query_one(FindingsList)
        keys = list(flist._keys)
        flist.highlighted = next(i for i, k in enumerate(keys) if flist._findings[k] is found)
        await pilot.pause()
        assert "o: open spark-2's log at line" in str(app.main.query_one("#finding-text").render())
        await pilot.press("o")
        assert view.node_filter == "spark-2" and not view.following
        assert view.view[int(view.scroll_y)].seq <= found.line
        assert "node spark-2" in str(app.main.query_one("#log-status").render())
