"""nvidia-smi CSV queries -> list[Gpu] / list[GpuProcess].

GB10 (DGX Spark) prints `[N/A]` for every memory field: such a GPU is `unified=True` and its
memory figures are filled from /proc/meminfo (used = MemTotal - MemAvailable). Per-process
use still comes from `--query-compute-apps`, which works on GB10.
"""

from __future__ import annotations

import re

from sparktui.core.model import Gpu, GpuProcess
from sparktui.core.probes.meminfo import MemInfo

GPU_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
)
# The fields before power/temperature/clock were added: rows of that many columns still parse.
BASE_GPU_FIELDS = GPU_FIELDS[:6]
APP_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory")

GPU_QUERY_ARGV: tuple[str, ...] = (
    "nvidia-smi",
    "--query-gpu=" + ",".join(GPU_FIELDS),
    "--format=csv,noheader,nounits",
)
APPS_QUERY_ARGV: tuple[str, ...] = (
    "nvidia-smi",
    "--query-compute-apps=" + ",".join(APP_FIELDS),
    "--format=csv,noheader,nounits",
)

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def float_value(raw: str) -> float | None:
    """`96.81`, `96.81 W` -> float; `[N/A]`, `[Not Supported]`, junk -> None."""
    m = _NUMBER.match(raw)
    return float(m.group(1)) if m else None


def field_value(raw: str) -> int | None:
    """`19693`, `19693 MiB`, `0 %` -> int; `[N/A]`, `[Not Supported]`, `N/A`, junk -> None."""
    m = _NUMBER.match(raw)
    if not m:
        return None
    return int(float(m.group(1)))


def _split(line: str, n: int, free_col: int | None) -> list[str] | None:
    """Split a CSV line into `n` fields; extra commas are folded into column `free_col`."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == n:
        return parts
    if len(parts) > n and free_col is not None:
        extra = len(parts) - n
        merged = ", ".join(parts[free_col : free_col + extra + 1])
        return parts[:free_col] + [merged] + parts[free_col + extra + 1 :]
    return None


_FIELD_NAME = re.compile(r"^[a-z_]+(?:\.[a-z_]+)*$")


def header_fields(line: str) -> tuple[str, ...] | None:
    """`index, name, memory.used [MiB]` (a `--format=csv` header) -> field names, else None."""
    names = tuple(re.sub(r"\s*\[[^\]]*\]$", "", p.strip()) for p in line.split(","))
    if names and all(_FIELD_NAME.match(n) for n in names):
        return names
    return None


def _with_header(text: str, fields: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """Use the text's own header line, if it has one, as the field list."""
    first, _, rest = text.lstrip("\n").partition("\n")
    found = header_fields(first)
    return (rest, found) if found else (text, fields)


def _col(fields: tuple[str, ...], *names: str) -> int | None:
    for name in names:
        if name in fields:
            return fields.index(name)
    return None


def parse_gpu_query(
    text: str, fields: tuple[str, ...] = GPU_FIELDS, meminfo: MemInfo | None = None
) -> list[Gpu]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]` -> list[Gpu].

    Lines that are not GPU rows ("No devices were found", driver errors) are skipped.
    A GPU whose memory reads `[N/A]`/`[Not Supported]`, or whose name contains GB10, is
    unified; with `meminfo` its memory is the system pool. A header line (`--format=csv`
    without `noheader`) replaces `fields`.
    """
    text, fields = _with_header(text, fields)
    i_idx = _col(fields, "index")
    i_name = _col(fields, "name", "gpu_name")
    i_uuid = _col(fields, "uuid", "gpu_uuid")
    i_used = _col(fields, "memory.used")
    i_total = _col(fields, "memory.total")
    i_util = _col(fields, "utilization.gpu")
    i_power = _col(fields, "power.draw", "power.draw.instant")
    i_temp = _col(fields, "temperature.gpu")
    i_clock = _col(fields, "clocks.sm", "clocks.current.sm")
    gpus: list[Gpu] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = _split(line, len(fields), i_name)
        if parts is None and fields[: len(BASE_GPU_FIELDS)] == BASE_GPU_FIELDS:
            parts = _split(line, len(BASE_GPU_FIELDS), i_name)  # an older probe's row
        if parts is None:
            continue

        def at(i: int | None, parts: list[str] = parts) -> str | None:
            return parts[i] if i is not None and i < len(parts) else None

        if i_idx is not None and not parts[i_idx].isdigit():
            continue
        index = int(parts[i_idx]) if i_idx is not None else len(gpus)
        name = parts[i_name] if i_name is not None else ""
        used = field_value(parts[i_used]) if i_used is not None else None
        total = field_value(parts[i_total]) if i_total is not None else None
        unified = "GB10" in name.upper() or (
            (i_used is not None and used is None) or (i_total is not None and total is None)
        )
        if unified and meminfo is not None and meminfo.total_mib is not None:
            total = meminfo.total_mib
            used = meminfo.used_mib
        gpus.append(
            Gpu(
                index=index,
                name=name,
                memory_used_mib=used,
                memory_total_mib=total,
                unified=unified,
                utilization_pct=field_value(parts[i_util]) if i_util is not None else None,
                uuid=parts[i_uuid] if i_uuid is not None else "",
                power_w=float_value(p) if (p := at(i_power)) is not None else None,
                temperature_c=field_value(t) if (t := at(i_temp)) is not None else None,
                sm_clock_mhz=field_value(c) if (c := at(i_clock)) is not None else None,
            )
        )
    return gpus


def parse_compute_apps(text: str, fields: tuple[str, ...] = APP_FIELDS) -> list[GpuProcess]:
    """`nvidia-smi --query-compute-apps=<fields> --format=csv,noheader[,nounits]` -> processes.

    Empty output (no compute process) is an empty list; `used_memory` and `used_gpu_memory`
    are the same field. A header line replaces `fields`.
    """
    text, fields = _with_header(text, fields)
    i_pid = _col(fields, "pid")
    i_name = _col(fields, "process_name", "name")
    i_mem = _col(fields, "used_memory", "used_gpu_memory")
    if i_pid is None:
        return []
    procs: list[GpuProcess] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = _split(line, len(fields), i_name)
        if parts is None or not parts[i_pid].isdigit():
            continue
        procs.append(
            GpuProcess(
                pid=int(parts[i_pid]),
                process_name=parts[i_name] if i_name is not None else "",
                used_memory_mib=field_value(parts[i_mem]) if i_mem is not None else None,
            )
        )
    return procs
