"""Start-up phases parsed from real vLLM output (lab captures and public logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.core.phases import PHASES, parse_phases, parse_phases_text, parse_progress

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
FULL_STARTUPS = [
    FIX / "lab" / "serve_tp2_healthy.vllm.log",
    FIX / "vllm_cpu_serve_ok.log",
    FIX / "lab" / "serve_tp2_head_container_killed.vllm.log",
]


def _text(p: Path) -> str:
    """The bytes as written: tqdm's `\r` kept (no universal newlines)."""
    with open(p, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


def _lines(p: Path) -> list[str]:
    return _text(p).split("\n")


@pytest.mark.parametrize("path", FULL_STARTUPS, ids=lambda p: p.name)
def test_full_startup_passes_every_phase_in_order(path: Path) -> None:
    tl = parse_phases(_lines(path), year=2026)
    assert [p for p, _line, _ts in tl.phases] == list(PHASES)
    lines = [line for _p, line, _ts in tl.phases]
    assert lines == sorted(lines)
    assert tl.phase == "ready" and tl.fraction == 1.0


def test_lab_tp2_phase_lines_and_stamps() -> None:
    path = FIX / "lab" / "serve_tp2_healthy.vllm.log"
    lines = _lines(path)
    tl = parse_phases(lines, year=2026)
    at = {p: (line, ts) for p, line, ts in tl.phases}
    assert "Starting to load model" in lines[at["loading-weights"][0] - 1]
    assert "Application startup complete" in lines[at["ready"][0] - 1]
    # the loading line is stamped 11-30 00:46:46 (vLLM's logger, UTC in the container)
    assert at["loading-weights"][1] == 1795999606.0  # 2026-11-30T00:46:46Z
    assert tl.marker_line == 1
    assert tl.kv_cache_tokens == 2_097_152
    # the worker on the second node is its own rank, keyed by the Ray prefix's ip
    assert set(tl.ranks) == {"", "198.19.13.12"}


def test_lab_tp2_cut_during_weight_loading_shows_the_bar() -> None:
    lines = _lines(FIX / "lab" / "serve_tp2_healthy.vllm.log")
    cut = next(i for i, line in enumerate(lines) if "0/1 [00:00<?" in line) + 1
    tl = parse_phases(lines[:cut], year=2026)
    assert tl.ranks[""].progress is not None  # the bar came through Ray, from the head's rank
    assert tl.phase == "loading-weights"
    assert tl.fraction == 0.0
    assert tl.progress is not None and (tl.progress.done, tl.progress.total) == (0, 1)
    tl2 = parse_phases(lines[: cut + 1], year=2026)
    assert tl2.fraction == 1.0


def test_public_four_shards_progress_and_eta() -> None:
    tl = parse_phases_text(_text(FIX / "phases" / "public_verl_4_shards.log"))
    assert tl.phase == "loading-weights"
    p = tl.progress
    assert p is not None and (p.done, p.total) == (2, 4)
    assert tl.fraction == 0.5
    assert tl.eta_s == 0.0
    assert p.rate_per_s == pytest.approx(2.60)
    assert tl.describe() == "loading weights 50% (2/4, ETA 0:00)"


def test_public_405b_slow_shards_eta_and_no_rate_drop() -> None:
    tl = parse_phases_text(_text(FIX / "phases" / "public_405b_slow_shards.log"))
    p = tl.progress
    assert p is not None and (p.done, p.total) == (60, 86)
    assert p.elapsed_s == 2 * 3600 + 1 * 60 + 49
    assert tl.eta_s == 55 * 60 + 38
    assert p.rate_per_s == pytest.approx(1 / 128.40)
    assert tl.rate_drop() is None  # slow from the start is not a drop


def test_progress_forms() -> None:
    # tqdm's s/it and it/s, `?` before the first item, hours in elapsed
    p = parse_progress(
        "Loading safetensors checkpoint shards:   3% Completed | 1/37 [00:02<01:39,  2.77s/it]"
    )
    assert p is not None and p.rate_per_s == pytest.approx(1 / 2.77) and p.eta_s == 99
    p0 = parse_progress(
        "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
    )
    assert p0 is not None and p0.eta_s is None and p0.rate_per_s is None
    assert (
        parse_progress(
            "(APIServer pid=527) INFO 11-30 00:47:02 [loggers.py:335] Engine 000: "
            "Avg prompt throughput: 8.8 tokens/s"
        )
        is None
    )


def test_only_the_last_serve_counts() -> None:
    a = _lines(FIX / "lab" / "serve_tp2_healthy.vllm.log")
    b = _lines(FIX / "lab" / "seed_pg_ip_mismatch_cli.vllm.log")
    tl = parse_phases(a + b, year=2026)
    assert tl.marker_line == len(a) + 1
    assert tl.phase == "distributed-init"  # the placement-group wait, not the earlier ready


def test_failed_startups_stop_in_their_phase() -> None:
    tl = parse_phases(_lines(FIX / "vllm_ray_ip_mismatch.log"), year=2026)
    assert tl.phase == "distributed-init"
    assert parse_phases(_lines(FIX / "vllm_port_in_use.log"), year=2026).phase == "starting"


def test_a_later_tail_that_lost_the_phase_lines_does_not_go_back() -> None:
    from sparktui.core.phases import merge_timelines

    lines = _lines(FIX / "lab" / "serve_tp2_healthy.vllm.log")
    old = parse_phases(lines[:60], year=2026)
    assert old.phase == "compiling"
    window = parse_phases(lines[40:50], year=2026, start_line=41)  # no marker, an older phase
    assert window.phase == "loading-weights"
    merged = merge_timelines(old, window)
    assert merged.phase == "compiling" and merged.phases == old.phases
    # a new serve marker in the tail always wins
    again = parse_phases(lines[:12], year=2026)
    assert merge_timelines(old, again).phase == "starting"


def test_lab_eight_shards_every_bar_update_and_order() -> None:
    lines = _lines(FIX / "phases" / "lab_tp2_8_shards.vllm.log")
    tl = parse_phases(lines, year=2026)
    assert [p for p, _l, _t in tl.phases] == list(PHASES)
    seen = []
    for i in range(len(lines)):
        if "checkpoint shards" in lines[i]:
            t = parse_phases(lines[: i + 1], year=2026)
            p = t.progress
            assert t.phase == "loading-weights" and p is not None
            seen.append(p.done)
            if 0 < p.done < 8:
                assert t.eta_s is not None and t.eta_s > 0
    assert seen[:9] == list(range(9))
    # serve printed the same figures while it waited
    stderr = (FIX / "phases" / "lab_tp2_8_shards.serve.stderr").read_text()
    assert "phase: loading weights 50% (4/8, ETA 0:06)" in stderr


def test_lines_without_a_phase_still_date_the_timeline() -> None:
    """Only phase lines are read line by line; a metrics line's stamp still dates the
    bar after it and the log's end, and a phrase cut by ANSI escapes still counts."""
    text = (
        "INFO 12-01 09:00:00 [model_runner.py:1] Starting to load model /models/x...\n"
        "INFO 12-01 09:03:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0\n"
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:10<00:10,  5.00s/it]\n"
        "INFO 12-01 09:04:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0\n"
        "\x1b[1;36mINFO 12-01 09:05:00\x1b[0m Capturing CUDA \x1b[1mgraphs\x1b[0m: 10/20\n"
        "INFO 12-01 09:06:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0\n"
    )
    tl = parse_phases_text(text, year=2026)
    stamp = lambda hms: parse_phases_text(f"INFO 12-01 {hms} x", year=2026).last_stamp  # noqa: E731
    assert [(p, no) for p, no, _ in tl.phases] == [("loading-weights", 1), ("compiling", 5)]
    assert tl.phases[0][2] == stamp("09:00:00") and tl.phases[1][2] == stamp("09:05:00")
    assert tl.ranks[""].phase == "compiling"
    assert tl.last_stamp == stamp("09:06:00")
    # the bar (no stamp of its own) came after the 09:03 metrics line
    tl2 = parse_phases_text("".join(text.splitlines(keepends=True)[:3]), year=2026)
    assert tl2.ranks[""].progress is not None and tl2.last_stamp == stamp("09:03:00")
