"""The vLLM strip: health, running and waiting requests, KV cache %, tokens/s."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from sparktui.core.model import VllmStatus


def _num(v: float | None, fmt: str = "{:g}") -> str:
    return "—" if v is None else fmt.format(v)


def render_vllm(v: VllmStatus, port: int) -> Content:
    if v.healthy is True:
        health: tuple[str, str] = ("● healthy", "bold $node-ok")
    elif v.healthy is False:
        health = ("✗ unhealthy", "bold $node-down")
    else:
        health = ("○ not serving", "$node-stale")
    parts: list[str | tuple[str, str]] = [("vLLM ", "bold"), health]
    if v.detail and v.healthy is not True:
        parts += [" ", (v.detail[:60], "$muted")]
    kv = None if v.kv_cache_pct is None else v.kv_cache_pct
    parts += [
        ("  │ running ", "$muted"), _num(v.running),
        ("  waiting ", "$muted"), (_num(v.waiting), "bold $log-warning" if (v.waiting or 0) > 0 else ""),
        ("  KV cache ", "$muted"), _num(kv, "{:.1f}%"),
        ("  tokens/s ", "$muted"), _num(v.tokens_per_s, "{:.1f}"),
        ("  │ :", "$muted"), (str(port), "$muted"),
    ]
    if v.version:
        parts += [("  v", "$muted"), (v.version, "$muted")]
    return Content.assemble(*parts)


class VllmStrip(Static):
    def __init__(self, port: int) -> None:
        super().__init__(render_vllm(VllmStatus(), port), id="vllm-strip", markup=False)
        self.port = port

    def update_status(self, v: VllmStatus) -> None:
        self.update(render_vllm(v, self.port))
