"""One pane per node: role, reachability, the three IPs side by side (configured, the one
Ray registered, VLLM_HOST_IP) with a mismatch mark, containers, memory bar + history."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from sparktui.core.checks import IFNAME_VARS
from sparktui.core.model import NodeState, ip_mismatch
from sparktui.core.secrets import mask_secrets
from sparktui.tui.widgets.text import set_text

OK = "$node-ok"
DOWN = "$node-down"
STALE = "$node-stale"
MISMATCH = "bold $ip-mismatch"
MUTED = "$muted"


@dataclass(frozen=True)
class Memory:
    used_mib: int
    total_mib: int
    kind: str  # GPU | unified | RAM
    utilization_pct: int | None = None

    @property
    def fraction(self) -> float:
        return self.used_mib / self.total_mib if self.total_mib else 0.0


def memory_of(node: NodeState) -> Memory | None:
    """GPU memory where the GPU reports it; the shared pool on unified-memory (GB10)."""
    util = next((g.utilization_pct for g in node.gpus if g.utilization_pct is not None), None)
    discrete = [g for g in node.gpus if not g.unified and g.memory_total_mib]
    if discrete:
        return Memory(
            sum(g.memory_used_mib or 0 for g in discrete),
            sum(g.memory_total_mib or 0 for g in discrete),
            "GPU",
            util,
        )
    unified = [g for g in node.gpus if g.unified]
    for g in unified:
        if g.memory_total_mib:
            return Memory(g.memory_used_mib or 0, g.memory_total_mib, "unified", util)
    if node.mem_total_mib:
        used = node.mem_total_mib - (node.mem_available_mib or 0)
        return Memory(used, node.mem_total_mib, "unified" if unified else "RAM", util)
    return None


def ip_problem(node: NodeState) -> tuple[bool, bool]:
    """(Ray's IP differs from the configured one, VLLM_HOST_IP differs from Ray's/configured)."""
    return ip_mismatch(node.configured_ip, node.ray.registered_ip, node.env.get("VLLM_HOST_IP"))


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}"


def bar(fraction: float, width: int) -> Content:
    filled = max(0, min(width, round(fraction * width)))
    return Content.assemble(("█" * filled, "$mem-bar"), ("░" * (width - filled), "$mem-free"))


BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list[float], width: int) -> Content:
    """Memory history on an absolute 0-100 % scale (newest right), one cell per sample."""
    tail = values[-width:] if width > 0 else []
    cells = "".join(BLOCKS[max(0, min(8, round(v / 100 * 8)))] for v in tail)
    return Content.assemble(("history ", MUTED), (cells.rjust(max(0, width)), "$mem-bar"))


def render_node(
    node: NodeState, container_name: str | None = None, backend: str = "ray"
) -> Content:
    """The text part of a node pane (everything but the sparkline). `backend` native: the
    node's rank and its vllm serve process instead of Ray's view."""
    native = backend == "native"
    parts: list[str | tuple[str, str] | Content] = []
    lbl = lambda s: (f"{s:<5}", MUTED)  # noqa: E731
    if node.reachable:
        parts += [("● reachable", OK)]
        if node.error:  # reachable before, silent now
            parts += ["  ", (node.error, STALE)]
    else:
        parts += [("✗ unreachable", f"bold {DOWN}"), (f": {node.error or 'no answer yet'}", DOWN)]
    parts.append("\n")

    ray_bad, host_bad = ip_problem(node)
    reg = node.ray.registered_ip
    parts += [lbl("ip"), ("config ", MUTED), (node.configured_ip or "—", "bold"), "\n"]
    if not native:
        parts += [lbl(""), ("ray    ", MUTED)]
        if reg:
            parts.append((reg, MISMATCH if ray_bad else "bold"))
            parts.append(("  ≠ MISMATCH" if ray_bad else "  ✓", MISMATCH if ray_bad else OK))
        elif node.ray.alive is False:
            parts.append(("not in Ray", DOWN))
        else:
            parts.append(("?", STALE))
        parts.append("\n")
    host_ip = node.env.get("VLLM_HOST_IP")
    parts += [lbl(""), ("VLLM_HOST_IP ", MUTED)]
    if host_ip:
        parts.append((host_ip, MISMATCH if host_bad else ""))
        if host_bad:
            parts.append(("  ≠ MISMATCH", MISMATCH))
    else:
        parts.append(("unset", STALE))
    parts.append("\n")

    if native:  # no Ray: the node's rank and whether its vllm serve runs
        from sparktui.core.native import rank_summary

        summary = rank_summary(node)
        idle = summary.startswith(("vllm serve not", "unknown"))
        parts += [lbl("rank"), (summary.removeprefix("rank "), STALE if idle else OK)]
    else:
        parts.append(lbl("ray"))
        if node.ray.alive:
            gpus = f" · {node.ray.gpus:g} GPU" if node.ray.gpus else ""
            parts += [("alive", OK), (gpus, "")]
        elif node.ray.alive is False:
            why = f": {node.ray.death_reason}" if node.ray.death_reason else ""
            parts.append((("dead" if reg else "absent") + why, DOWN))
        else:
            parts.append(("unknown", STALE))
    parts.append("\n")

    containers = node.containers
    if container_name:  # the configured container first
        containers = sorted(containers, key=lambda c: c.name != container_name)
    if not containers:
        parts += [lbl("ctr"), ("no containers" if node.reachable else "—", STALE), "\n"]
    for i, c in enumerate(containers[:3]):
        style = OK if c.running else DOWN
        parts += [lbl("ctr" if i == 0 else ""), (c.name, "bold"), " ", (c.state, style)]
        if c.status:
            parts += [" ", (c.status, MUTED)]
        parts.append("\n")
    if len(containers) > 3:
        parts += [lbl(""), (f"+{len(containers) - 3} more", MUTED), "\n"]

    env = mask_secrets({k: v for k, v in node.env.items() if k in IFNAME_VARS})
    if env:  # NCCL_SOCKET_IFNAME=x GLOO_SOCKET_IFNAME=x -> "ifname NCCL,GLOO=x"
        by_value: dict[str, list[str]] = {}
        for k, v in sorted(env.items()):
            by_value.setdefault(v, []).append(k.split("_", 1)[0])
        parts.append(lbl("nic"))
        parts.append((" ".join(f"{','.join(ks)}={v}" for v, ks in by_value.items()), MUTED))
        parts.append("\n")

    mem = memory_of(node)
    parts.append(lbl("mem"))
    if mem:
        parts += [
            bar(mem.fraction, 16),
            " ",
            f"{_gib(mem.used_mib)}/{_gib(mem.total_mib)} GiB ",
            (mem.kind, MUTED),
        ]
        if mem.utilization_pct is not None:
            parts += [("  util ", MUTED), f"{mem.utilization_pct}%"]
    else:
        parts.append(("—", STALE))
    gpu = gpu_sensors(node)
    if gpu:
        parts += ["\n", lbl("gpu"), gpu]
    return Content.assemble(*parts)


def gpu_sensors(node: NodeState) -> str:
    """`96 W · 35 °C · SM 1980 MHz` (summed power, hottest GPU, slowest SM clock) where
    nvidia-smi gives them (a GB10 does), else ""."""
    power = [g.power_w for g in node.gpus if g.power_w is not None]
    temp = [g.temperature_c for g in node.gpus if g.temperature_c is not None]
    clock = [g.sm_clock_mhz for g in node.gpus if g.sm_clock_mhz is not None]
    out = []
    if power:
        out.append(f"{sum(power):.0f} W")
    if temp:
        out.append(f"{max(temp)} °C")
    if clock:
        out.append(f"SM {min(clock)} MHz")
    return " · ".join(out)


class NodePane(Vertical):
    """A node's state; `update_state` redraws it from a NodeState and its memory history."""

    def __init__(self, node: NodeState, container_name: str | None = None) -> None:
        super().__init__(id=f"node-{node.name}", classes="node-pane")
        self.node_name = node.name
        self.container_name = container_name
        self.backend = "ray"  # the snapshot's: the screen sets it before update_state
        self._node = node
        self._history: list[float] = []

    def compose(self) -> ComposeResult:
        yield Static(
            render_node(self._node, self.container_name, self.backend),
            classes="node-body",
            markup=False,
        )
        yield Static("", classes="node-history", markup=False)

    def on_mount(self) -> None:
        self.update_state(self._node, [])

    def update_state(self, node: NodeState, history: list[float]) -> None:
        self._node = node
        self.border_title = Content.assemble((node.name, "bold"), f" · {node.role}")
        self.border_subtitle = node.host
        ray_bad, host_bad = ip_problem(node)
        self.set_class(not node.reachable, "-down")
        self.set_class(node.reachable and (ray_bad or host_bad), "-mismatch")
        self.set_class(node.reachable and not (ray_bad or host_bad), "-ok")
        if not self.is_mounted:
            return
        set_text(
            self.query_one(".node-body", Static),
            render_node(node, self.container_name, self.backend),
        )
        self._history = list(history)
        self._draw_history()

    def on_resize(self) -> None:
        self._draw_history()

    def _draw_history(self) -> None:
        if not self.is_mounted:
            return
        width = max(0, self.content_region.width - len("history "))
        set_text(self.query_one(".node-history", Static), spark(self._history, width))
