"""The serve lifecycle over time: start-up phase, stalls, latency over the last minute.

`Lifecycle` is fed one sample per refresh (the head's VllmStatus and, while vLLM is not
healthy, the start-up Timeline parsed from the tail of its log) and keeps what needs more
than one sample: when the token counter or a progress bar last moved, and the latency
histograms of the last minute. Pure bookkeeping: no I/O, the clock is passed in.

Findings (runtime; none while healthy):
- `vllm-stalled`: requests running, `vllm:generation_tokens_total` unchanged for
  `vllm.stall_seconds`. Silence with no request running is not a stall.
- `vllm-load-stalled`: a loading phase (weights, graph capture) whose progress has not moved
  for `vllm.stall_seconds` (or 3x the time one item took at the bar's last rate, whichever is
  longer: one 5 GB shard at 0.01 it/s is slow, not stuck), or whose rate fell by more than
  10x from its start (the early warning before a page-cache OOM).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from sparktui.core.model import ClusterSnapshot, Finding, VllmStatus
from sparktui.core.phases import (
    LABELS,
    LOADING_PHASES,
    Timeline,
    format_seconds,
    merge_timelines,
)
from sparktui.core.probes.vllm_metrics import Histogram

WINDOW_S = 60.0  # latency and token rates are over the last minute


@dataclass
class _Mark:
    value: tuple[int, int] | float | None
    since: float  # monotonic time the value was first seen


class Lifecycle:
    def __init__(self, stall_seconds: float = 60.0) -> None:
        self.stall_seconds = stall_seconds
        self.timeline: Timeline | None = None
        self._tokens: _Mark | None = None  # generation tokens while requests run
        self._bars: dict[str, _Mark] = {}  # rank key -> (done, total) of its bar
        self._history: deque[tuple[float, VllmStatus]] = deque()
        self.log_mtime: float | None = None  # the log's last write (Unix time), if known
        self._served: tuple[bool, float | None] | None = None  # healthy seen, for this start

    # ------------------------------------------------------------------ feeding

    def feed_timeline(self, tl: Timeline, now: float, log_mtime: float | None = None) -> None:
        tl = merge_timelines(self.timeline, tl)
        self.timeline = tl
        self.log_mtime = log_mtime
        for key, rank in tl.ranks.items():
            p = rank.progress
            value = (p.done, p.total) if p is not None and rank.phase in LOADING_PHASES else None
            mark = self._bars.get(key)
            if mark is None or mark.value != value:
                self._bars[key] = _Mark(value, now)
        for key in list(self._bars):
            if key not in tl.ranks:
                del self._bars[key]

    def feed_status(self, v: VllmStatus, now: float, wall: float | None = None) -> VllmStatus:
        """Fill `v`'s phase and latency fields from what is known; returns `v`."""
        wall = time.time() if wall is None else wall
        running = (v.running or 0) > 0
        tokens = v.generation_tokens_total
        if not running or tokens is None or v.healthy is False:
            self._tokens = None
        elif self._tokens is None or self._tokens.value != tokens:
            self._tokens = _Mark(tokens, now)
        self._phase_fields(v)
        self._latency(v, now)
        return v

    def _phase_fields(self, v: VllmStatus) -> None:
        tl = self.timeline
        start = tl.started_at if tl is not None else None
        if v.healthy:
            self._served = (True, start)
            v.phase, v.phase_label, v.phase_progress, v.phase_eta_s = (
                "ready",
                LABELS["ready"],
                1.0,
                None,
            )
            v.phase_started_at = tl.started_at if tl is not None and tl.phase == "ready" else None
            return
        if tl is None or tl.phase is None:
            return
        phase = tl.phase
        if phase == "ready" and self._served == (True, start):
            return  # it served, then stopped answering: not serving, not starting
        if phase == "ready" and v.healthy is None:
            phase = "api-server"  # the log says ready but /health does not answer (yet)
        v.phase, v.phase_label = phase, LABELS.get(phase, phase)
        v.phase_progress = tl.fraction if phase == tl.phase else None
        v.phase_started_at = tl.started_at
        v.phase_eta_s = tl.eta_s
        v.phase_ranks = {
            key: {
                "phase": r.phase,
                "progress": (None if r.progress is None else round(r.progress.fraction, 4)),
            }
            for key, r in tl.ranks.items()
        }

    def _latency(self, v: VllmStatus, now: float) -> None:
        self._history.append((now, v))
        while len(self._history) > 2 and self._history[1][0] <= now - WINDOW_S:
            self._history.popleft()
        old_at, old = self._history[0]
        if old is v or now - old_at <= 0:
            return
        dt = now - old_at
        for kind in ("ttft", "itl"):
            cur_h, old_h = v.histograms.get(kind), old.histograms.get(kind)
            if not isinstance(cur_h, Histogram) or not isinstance(old_h, Histogram):
                continue
            d = cur_h.minus(old_h)
            if d is None or d.count <= 0:
                continue
            setattr(v, f"{kind}_p50_s", d.quantile(0.50))
            setattr(v, f"{kind}_p95_s", d.quantile(0.95))
            setattr(v, f"{kind}_mean_s", d.mean)
        for attr, out in (
            ("prompt_tokens_total", "prompt_tokens_per_s"),
            ("generation_tokens_total", None),
        ):
            a, b = getattr(old, attr), getattr(v, attr)
            if a is not None and b is not None and b >= a:
                rate = (b - a) / dt
                if out:
                    setattr(v, out, rate)

    # ------------------------------------------------------------------ findings

    def findings(
        self, snap: ClusterSnapshot, now: float, head: str, wall: float | None = None
    ) -> list[Finding]:
        wall = time.time() if wall is None else wall
        out: list[Finding] = []
        v = snap.vllm
        s = self.stall_seconds
        if self._tokens is not None and v.healthy and now - self._tokens.since >= s:
            frozen = now - self._tokens.since
            out.append(
                Finding(
                    "vllm-stalled",
                    "error",
                    head,
                    f"vLLM on {head} has {v.running:g} request(s) running but generated no token "
                    f"for {frozen:.0f}s (vllm:generation_tokens_total stuck at "
                    f"{self._tokens.value:g}); /health still answers",
                    fix="A rank is wedged: look at each node's vLLM worker log and GPU power "
                    "(a wedged GPU idles at low power); then tear down and restart "
                    "(sparktui teardown && sparktui restart && sparktui serve, or t, r, s).",
                    captures={"seconds": f"{frozen:.0f}"},
                )
            )
        tl = self.timeline
        if tl is not None and not v.healthy and tl.phase in LOADING_PHASES:
            out.extend(self._load_stalls(tl, snap, now, wall, head))
        return out

    def _load_stalls(
        self, tl: Timeline, snap: ClusterSnapshot, now: float, wall: float, head: str
    ) -> list[Finding]:
        out: list[Finding] = []
        s = self.stall_seconds
        label = tl.label or tl.phase
        fix = (
            "Look at that node's log (free memory, page cache, disk or network file "
            "system); then tear down and restart (sparktui teardown && sparktui restart "
            "&& sparktui serve)."
        )
        for key, rank in tl.ranks.items():
            p = rank.progress
            mark = self._bars.get(key)
            if p is None or rank.phase != tl.phase or p.done >= p.total or mark is None:
                continue
            node = _node_for(snap, key, head)
            per_item = 1.0 / p.rate_per_s if p.rate_per_s else 0.0
            limit = max(s, 3 * per_item)
            still = now - mark.since
            if self.log_mtime is not None:
                still = max(still, wall - self.log_mtime)
            if still >= limit:
                out.append(
                    Finding(
                        "vllm-load-stalled",
                        "error",
                        node,
                        f"{label} on {node} has not advanced for {still:.0f}s (stuck at "
                        f"{p.done}/{p.total}, {p.fraction * 100:.0f}%)",
                        fix=fix,
                        captures={
                            "seconds": f"{still:.0f}",
                            "done": str(p.done),
                            "total": str(p.total),
                        },
                    )
                )
        drop = tl.rate_drop()
        if drop is not None and not any(f.id == "vllm-load-stalled" for f in out):
            key, first, last = drop
            node = _node_for(snap, key, head)
            out.append(
                Finding(
                    "vllm-load-stalled",
                    "warning",
                    node,
                    f"{label} on {node} slowed from {_rate(first)} to {_rate(last)} "
                    f"(more than 10x slower than it began)",
                    fix=fix,
                    captures={"first_rate": f"{first:.4g}", "rate": f"{last:.4g}"},
                )
            )
        return out


def _rate(r: float) -> str:
    return f"{r:.2f} it/s" if r >= 1 else f"{1 / r:.1f} s/it"


def _node_for(snap: ClusterSnapshot, key: str, head: str) -> str:
    """The node a rank key (the Ray prefix's ip; "" = the driver, on the head) belongs to."""
    if not key:
        return head
    n = snap.node_by_ip(key)
    return n.name if n is not None else key


def describe_eta(v: VllmStatus) -> str:
    return f"ETA {format_seconds(v.phase_eta_s)}" if v.phase_eta_s is not None else ""
