"""The GPU probe, checked against a real NVIDIA H200 (captured through the device tool)."""

from __future__ import annotations

from pathlib import Path

from sparktui.core.probes.gpu import parse_compute_apps, parse_gpu_query
from sparktui.core.probes.script import parse_probe

DEV = Path(__file__).parent.parent / "fixtures" / "gpu_device"


def test_whole_probe_on_a_real_h200_with_a_busy_process():
    p = parse_probe((DEV / "probe_h200_busy.txt").read_text())
    assert p.complete
    [g] = p.gpus
    assert (g.name, g.memory_used_mib, g.memory_total_mib, g.unified) == (
        "NVIDIA H200",
        19601,
        143771,
        False,
    )
    assert g.uuid.startswith("GPU-509c2a83")
    [proc] = p.gpu_processes
    assert (proc.process_name, proc.used_memory_mib) == ("python3", 19592)
    assert p.mem.total_mib == 128887
    assert set(p.missing) == {"addr", "containers"}  # that machine has no ip, no docker


def test_idle_and_busy_queries_on_a_real_h200():
    [idle] = parse_gpu_query((DEV / "query_gpu_noheader_nounits.csv").read_text())
    assert (idle.memory_used_mib, idle.memory_total_mib, idle.unified) == (0, 143771, False)
    [hdr] = parse_gpu_query((DEV / "query_gpu_header_units.csv").read_text())
    assert (hdr.index, hdr.memory_total_mib) == (0, 143771)
    assert parse_compute_apps((DEV / "compute_apps_idle.csv").read_text()) == []
    [busy] = parse_compute_apps((DEV / "compute_apps_busy.csv").read_text())
    assert (busy.pid, busy.used_memory_mib) == (412, 19592)
