"""/proc/meminfo -> total / available MiB (the unified pool on GB10)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemInfo:
    total_mib: int | None = None
    available_mib: int | None = None

    @property
    def used_mib(self) -> int | None:
        if self.total_mib is None or self.available_mib is None:
            return None
        return max(0, self.total_mib - self.available_mib)


def parse_meminfo(text: str) -> MemInfo:
    """`MemTotal` and `MemAvailable` (kB) in MiB; without MemAvailable (kernels before 3.14)
    available is estimated as MemFree + Buffers + Cached."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        if len(parts) > 1 and parts[1].lower() == "mb":
            value *= 1024
        kb[key.strip()] = value
    total = kb.get("MemTotal")
    avail = kb.get("MemAvailable")
    if avail is None and "MemFree" in kb:
        avail = kb["MemFree"] + kb.get("Buffers", 0) + kb.get("Cached", 0)
    return MemInfo(
        total_mib=total // 1024 if total is not None else None,
        available_mib=avail // 1024 if avail is not None else None,
    )
