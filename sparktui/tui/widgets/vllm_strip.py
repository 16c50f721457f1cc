"""The vLLM strip: health, running and waiting requests, KV cache %, tokens/s; while vLLM
starts, its start-up phase with the progress bar and ETA; once it serves, TTFT and
inter-token latency p50/p95 and prompt tokens/s over the last minute."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from sparktui.core.model import VllmStatus
from sparktui.core.phases import format_seconds
from sparktui.tui.widgets.text import set_text


def _num(v: float | None, fmt: str = "{:g}") -> str:
    return "—" if v is None else fmt.format(v)


def render_vllm(v: VllmStatus, port: int) -> Content:
    if v.healthy is True:
        health: tuple[str, str] = ("● healthy", "bold $node-ok")
    elif v.healthy is False:
        health = ("✗ unhealthy", "bold $node-down")
    elif v.phase and v.phase != "ready":
        health = ("◔ starting", "bold $log-warning")
    else:
        health = ("○ not serving", "$node-stale")
    parts: list[str | tuple[str, str]] = [("vLLM ", "bold"), health]
    if v.healthy is not True and v.phase and v.phase != "ready":
        parts += _phase_parts(v)
    elif v.detail and v.healthy is not True:
        parts += [" ", (v.detail[:60], "$muted")]
    kv = None if v.kv_cache_pct is None else v.kv_cache_pct
    parts += [
        ("  │ running ", "$muted"),
        _num(v.running),
        ("  waiting ", "$muted"),
        (_num(v.waiting), "bold $log-warning" if (v.waiting or 0) > 0 else ""),
        ("  KV cache ", "$muted"),
        _num(kv, "{:.1f}%"),
        ("  tokens/s ", "$muted"),
        _num(v.tokens_per_s, "{:.1f}"),
    ]
    parts += _latency_parts(v)
    parts += [("  │ :", "$muted"), (str(port), "$muted")]
    if v.version:
        parts += [("  v", "$muted"), (v.version, "$muted")]
    return Content.assemble(*parts)


def _phase_parts(v: VllmStatus) -> list[str | tuple[str, str]]:
    """` · loading weights ▕██████░░░░▏ 62% ETA 0:04` (bar and ETA only where vLLM gives them)."""
    out: list[str | tuple[str, str]] = [
        ("  · ", "$muted"),
        (v.phase_label or v.phase or "", "bold"),
    ]
    if v.phase_progress is not None:
        filled = round(v.phase_progress * 10)
        out += [
            " ▕",
            ("█" * filled, "$mem-bar"),
            ("░" * (10 - filled), "$mem-free"),
            "▏ ",
            f"{v.phase_progress * 100:.0f}%",
        ]
    if v.phase_eta_s is not None:
        out += [("  ETA ", "$muted"), format_seconds(v.phase_eta_s)]
    return out


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1000:.0f}" if s >= 0.01 else f"{s * 1000:.1f}"


def _latency_parts(v: VllmStatus) -> list[str | tuple[str, str]]:
    """`  TTFT 37/94 ms  ITL 21/49 ms  prompt 12.3/s` (p50/p95, last minute), when known."""
    out: list[str | tuple[str, str]] = []
    if v.ttft_p50_s is not None:
        out += [
            ("  TTFT ", "$muted"),
            f"{_ms(v.ttft_p50_s)}/{_ms(v.ttft_p95_s)}",
            (" ms", "$muted"),
        ]
    if v.itl_p50_s is not None:
        out += [("  ITL ", "$muted"), f"{_ms(v.itl_p50_s)}/{_ms(v.itl_p95_s)}", (" ms", "$muted")]
    if v.prompt_tokens_per_s is not None and (v.ttft_p50_s is not None or v.prompt_tokens_per_s):
        out += [("  prompt ", "$muted"), f"{v.prompt_tokens_per_s:.1f}/s"]
    return out


class VllmStrip(Static):
    def __init__(self, port: int) -> None:
        super().__init__(render_vllm(VllmStatus(), port), id="vllm-strip", markup=False)
        self.port = port

    def update_status(self, v: VllmStatus) -> None:
        set_text(self, render_vllm(v, self.port))
