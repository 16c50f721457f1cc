"""Rows, timing helpers and the table every benchmark reports into."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Row:
    figure: str
    value: float
    unit: str
    reference: str = "-"
    reference_value: float | None = None
    target: str = "-"
    ok: bool | None = None  # None: reported only
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.reference_value:
            return self.value / self.reference_value
        return None


def ratio_row(
    figure: str,
    value: float,
    reference: str,
    reference_value: float,
    max_ratio: float,
    unit: str = "s",
    note: str = "",
) -> Row:
    r = Row(figure, value, unit, reference, reference_value, f"≤ {max_ratio:g}×", note=note)
    r.ok = r.ratio is not None and r.ratio <= max_ratio
    return r


def limit_row(figure: str, value: float, unit: str, limit: float, note: str = "") -> Row:
    return Row(figure, value, unit, target=f"≤ {limit:g} {unit}", ok=value <= limit, note=note)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:,.1f} {unit}".strip()
