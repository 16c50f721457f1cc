"""nvidia-smi and /proc/meminfo parsing on real captures (H200 from the lab; GB10 from the
real lines quoted in DOMAIN.md §4.2; meminfo from this machine)."""

from __future__ import annotations

import re
from pathlib import Path

from sparktui.core.probes.gpu import (
    APPS_QUERY_ARGV,
    GPU_QUERY_ARGV,
    field_value,
    header_fields,
    parse_compute_apps,
    parse_gpu_query,
)
from sparktui.core.probes.meminfo import MemInfo, parse_meminfo

FIX = Path(__file__).resolve().parents[1] / "fixtures"
UUID = "GPU-f77b6fc9-b484-4abc-1809-84cd0c480e9f"


def sections(path: Path) -> dict[str, str]:
    """`### title` separated blocks of a capture file."""
    out: dict[str, str] = {}
    for block in re.split(r"^### ", path.read_text(), flags=re.M)[1:]:
        title, _, body = block.partition("\n")
        out[title.strip()] = body
    return out


def meminfo() -> MemInfo:
    return parse_meminfo((FIX / "meminfo" / "proc_meminfo.txt").read_text())


def test_h200_busy_query_gpu() -> None:
    body = sections(FIX / "nvidia-smi" / "h200_busy_queries.txt")["query-gpu noheader nounits"]
    # field order of that capture (inferred from its values: free = total - used, temp, watts)
    fields = (
        "index",
        "uuid",
        "name",
        "memory.used",
        "memory.total",
        "memory.free",
        "utilization.gpu",
        "temperature.gpu",
        "power.draw",
    )
    (gpu,) = parse_gpu_query(body, fields, meminfo=meminfo())
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA H200", UUID)
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_pct) == (19693, 143771, 0)
    assert gpu.unified is False  # discrete memory is never replaced by meminfo


def test_h200_with_header_and_units() -> None:
    (gpu,) = parse_gpu_query((FIX / "nvidia-smi" / "h200_query_header.csv").read_text())
    assert (gpu.name, gpu.memory_used_mib, gpu.memory_total_mib, gpu.unified) == (
        "NVIDIA H200",
        0,
        143771,
        False,
    )


def test_h200_compute_apps() -> None:
    s = sections(FIX / "nvidia-smi" / "h200_busy_queries.txt")
    (p,) = parse_compute_apps(
        s["query-compute-apps"], ("pid", "process_name", "used_memory", "gpu_uuid")
    )
    assert (p.pid, p.process_name, p.used_memory_mib) == (501, "python3", 19684)
    (q,) = parse_compute_apps(s["query-compute-apps header"])  # used_gpu_memory [MiB] header
    assert (q.pid, q.used_memory_mib) == (501, 19684)
    assert parse_compute_apps("") == []


def test_gb10_na_memory_is_unified_and_filled_from_meminfo() -> None:
    s = sections(FIX / "nvidia-smi" / "gb10_quoted_domain_md.txt")
    mi = meminfo()
    assert mi.total_mib and mi.used_mib is not None
    (g,) = parse_gpu_query(next(v for k, v in s.items() if k.startswith("unsloth")), meminfo=mi)
    assert g.unified is True
    assert (g.memory_total_mib, g.memory_used_mib) == (mi.total_mib, mi.used_mib)
    (g2,) = parse_gpu_query(next(v for k, v in s.items() if k.startswith("NordicHPC")), meminfo=mi)
    assert g2.unified and g2.utilization_pct == 0 and g2.memory_total_mib == mi.total_mib
    (g3,) = parse_gpu_query(next(v for k, v in s.items() if k.startswith("unsloth")))
    assert g3.unified and g3.memory_total_mib is None  # no meminfo: nothing to fill with


def test_gb10_in_our_query_format() -> None:
    # our query's field order with the values GB10 prints (DOMAIN.md §4.2: name `NVIDIA GB10`,
    # memory `[N/A]`, utilization works)
    line = "0, NVIDIA GB10, GPU-x, [N/A], [N/A], 0"
    (g,) = parse_gpu_query(line, meminfo=meminfo())
    assert g.unified and g.name == "NVIDIA GB10" and g.memory_total_mib == meminfo().total_mib


def test_no_devices_and_errors_give_nothing() -> None:
    assert parse_gpu_query("No devices were found\n") == []
    assert (
        parse_gpu_query(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )
        == []
    )
    assert parse_gpu_query("") == []


def test_field_values() -> None:
    assert field_value("19693") == 19693 and field_value("19684 MiB") == 19684
    assert field_value(" 0 %") == 0 and field_value("116.45") == 116
    assert field_value("[N/A]") is None and field_value("[Not Supported]") is None
    assert header_fields("index, name, memory.used [MiB]") == ("index", "name", "memory.used")
    assert header_fields("0, NVIDIA H200, 0 MiB") is None


def test_query_commands() -> None:
    assert GPU_QUERY_ARGV[1] == (
        "--query-gpu=index,name,uuid,memory.used,memory.total,utilization.gpu,"
        "power.draw,temperature.gpu,clocks.sm"
    )
    assert APPS_QUERY_ARGV[1] == "--query-compute-apps=pid,process_name,used_memory"


def test_meminfo_real() -> None:
    text = (FIX / "meminfo" / "proc_meminfo.txt").read_text()
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in text.splitlines()}
    mi = parse_meminfo(text)
    assert mi.total_mib == kb["MemTotal"] // 1024
    assert mi.available_mib == kb["MemAvailable"] // 1024
    assert mi.used_mib == mi.total_mib - mi.available_mib
    # a kernel without MemAvailable: estimated from MemFree + Buffers + Cached
    old = "\n".join(ln for ln in text.splitlines() if not ln.startswith("MemAvailable"))
    est = parse_meminfo(old)
    assert est.available_mib == (kb["MemFree"] + kb["Buffers"] + kb["Cached"]) // 1024
    assert parse_meminfo("") == MemInfo(None, None)


def test_meminfo_live() -> None:
    mi = parse_meminfo(Path("/proc/meminfo").read_text())
    assert mi.total_mib and mi.total_mib > 0 and mi.used_mib is not None
