"""The diagnose benchmark runs end to end on a tiny log (the 200 MB run lives in bench/)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from bench import diagnose_bench as b


def test_ere_translation_is_accepted_by_grep_and_equivalent_on_examples(tmp_path):
    sigs, used, skipped = b.grep_signatures(tmp_path / "sigs.ere")
    assert used >= 90 and skipped == 0
    assert b.to_ere(r"Free memory (?P<x>[\d.]+)/(?:\s+)") == "Free memory ([0-9.]+)/([[:space:]]+)"
    assert b.to_ere(r"Model architectures \[[^\]]*\]") == r"Model architectures \[[^]]*\]"
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    log = tmp_path / "l.log"
    log.write_text(
        "healthy line\nOSError: [Errno 98] Address already in use\n"
        "Model architectures ['Foo'] are not supported for now\n"
    )
    r = subprocess.run(["grep", "-E", "-c", "-f", str(sigs), str(log)], capture_output=True)
    assert r.returncode == 0 and r.stdout.strip() == b"2"


def test_tiny_run_reports_time_reference_and_ratio(tmp_path):
    rows = b.measure(size_mb=2, repeat=1, workdir=str(tmp_path))
    row = rows[0]  # the engine in use; with Hyperscan, a second row reports RE2 (no target)
    assert len(rows) in (1, 2) and all(r["figure"] for r in rows)
    assert row["value"] > 0 and row["mb_per_s"] > 0
    assert re.match(r"diagnose 2 MB vLLM log", row["figure"])
    if shutil.which("grep"):
        assert row["reference"] > 0
        assert row["ratio"] == pytest.approx(row["value"] / row["reference"], rel=0.05)
    assert row["target"] == b.TARGET_RATIO
    log = tmp_path / "vllm_2MB.log"
    assert 1_500_000 < log.stat().st_size < 3_500_000
    # the log is made of real vLLM lines: the healthy serving stats dominate
    text = log.read_text(errors="replace")
    assert text.count("Avg prompt throughput") > 100
