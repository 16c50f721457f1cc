"""The per-node state file read by the stand-in nvidia-smi (mode and compute processes)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

GPU_MODES = ("gb10", "h200")


def write_state(
    path: Path,
    mode: str,
    index: int = 1,
    apps: Iterable[tuple[int, str, int]] = (),
    utilization: int = 0,
) -> None:
    """Write `nvidia-smi.json`: mode gb10|h200, node index, apps as (pid, name, MiB)."""
    if mode not in GPU_MODES:
        raise ValueError(f"GPU mode must be one of {GPU_MODES}, not {mode!r}")
    data = {
        "mode": mode,
        "index": index,
        "utilization": utilization,
        "apps": [[int(p), str(n), int(m)] for p, n, m in apps],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
