"""`sparktui --version` against `python -c pass` (target ≤ 4×)."""

from __future__ import annotations

import subprocess
import sys

from bench.common import Row, median_time, ratio_row


def run(quick: bool) -> list[Row]:
    n = 5 if quick else 15

    def version() -> None:
        subprocess.run(
            [sys.executable, "-m", "sparktui", "--version"], check=True, stdout=subprocess.DEVNULL
        )

    def bare() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    version(), bare()  # warm the page cache
    ref = median_time(bare, n)
    val = median_time(version, n)
    return [ratio_row("sparktui --version", val, "python -c pass", ref, 4.0)]
