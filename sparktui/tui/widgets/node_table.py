"""The node table: one row per node (name, role, reachable, configured IP, Ray's IP with
✓/≠, VLLM_HOST_IP, container state and uptime, memory bar, GPU util/power, findings) for
clusters whose panes do not fit the terminal. Nodes with errors sort first; a key or a
click on a column header sorts by that column. Posts `NodeSelected` when the row under
the cursor changes, for the screen's detail pane."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.message import Message
from textual.widgets import DataTable

from sparktui.core.model import Finding, NodeState
from sparktui.tui.widgets.node_pane import NodePane, ip_problem, memory_of

BAR = 8  # memory bar cells


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    sort: Callable[[NodeState, tuple[int, int]], Any]


def severity(node: NodeState, counts: tuple[int, int]) -> int:
    """0: an error (unreachable, an error finding), 1: a warning (an IP mismatch, a
    warning finding), 2: fine."""
    errors, warnings = counts
    if not node.reachable or errors:
        return 0
    ray_bad, host_bad = ip_problem(node)
    return 1 if (warnings or ray_bad or host_bad) else 2


def natural(name: str) -> tuple[object, ...]:
    """spark-2 before spark-10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _ip_key(ip: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in (ip or "").split("."))
    except ValueError:
        return (999,)


def _mem_frac(n: NodeState) -> float:
    m = memory_of(n)
    return m.fraction if m else -1.0


def _gpu_util(n: NodeState) -> int:
    return next((g.utilization_pct for g in n.gpus if g.utilization_pct is not None), -1)


COLUMNS: tuple[Column, ...] = (
    Column("state", "", lambda n, c: (severity(n, c), n.role != "head", natural(n.name))),
    Column("name", "node", lambda n, c: natural(n.name)),
    Column("role", "role", lambda n, c: (n.role != "head", natural(n.name))),
    Column("ip", "config IP", lambda n, c: _ip_key(n.configured_ip)),
    Column("ray", "Ray IP", lambda n, c: (not any(ip_problem(n)), _ip_key(n.ray.registered_ip))),
    Column("host", "VLLM_HOST_IP", lambda n, c: _ip_key(n.env.get("VLLM_HOST_IP"))),
    Column(
        "ctr", "container", lambda n, c: (not any(x.running for x in n.containers), natural(n.name))
    ),
    Column("mem", "memory", lambda n, c: -_mem_frac(n)),
    Column("gpu", "GPU util/W", lambda n, c: -_gpu_util(n)),
    Column("findings", "findings", lambda n, c: (-c[0], -c[1], natural(n.name))),
)
SORT_KEYS = tuple(c.key for c in COLUMNS)


def uptime(status: str) -> str:
    """docker's `Up 3 hours (healthy)` -> `3 hours`; `Exited (1) 2 minutes ago` -> as is."""
    if status.startswith("Up "):
        return status[3:].split(" (", 1)[0]
    return status


def row_cells(
    node: NodeState, counts: tuple[int, int], container_name: str | None, backend: str = "ray"
) -> list[list[tuple[str, str]]]:
    """Each column's text as (text, theme slot) pieces; the slot names a theme variable
    ("" for the default colour). Pure: the tests read it without a terminal."""
    rank = severity(node, counts)
    ray_bad, host_bad = ip_problem(node)
    mark = {0: ("✗", "node-down"), 1: ("!", "ip-mismatch"), 2: ("●", "node-ok")}[rank]
    cells: list[list[tuple[str, str]]] = [[mark], [(node.name, "")], [(node.role, "muted")]]
    cells.append([(node.configured_ip or "—", "")])
    reg = node.ray.registered_ip
    if backend == "native":
        cells.append([("— native", "muted")])
    elif reg:
        cells.append(
            [
                (reg, "ip-mismatch" if ray_bad else ""),
                (" ≠" if ray_bad else " ✓", "ip-mismatch" if ray_bad else "node-ok"),
            ]
        )
    elif node.ray.alive is False:
        cells.append([("not in Ray", "node-down")])
    else:
        cells.append([("?", "node-stale")])
    host_ip = node.env.get("VLLM_HOST_IP")
    if host_ip:
        cells.append([(host_ip, "ip-mismatch" if host_bad else "")])
    else:
        cells.append([("unset" if node.reachable else "—", "node-stale")])
    if not node.reachable:
        cells.append([("unreachable", "node-down")])  # why: in the detail pane, findings
    else:
        ctrs = sorted(node.containers, key=lambda c: c.name != container_name)
        c = ctrs[0] if ctrs else None
        if c is None:
            cells.append([("no containers", "node-stale")])
        else:
            cells.append(
                [
                    (c.state, "node-ok" if c.running else "node-down"),
                    (f" {uptime(c.status)}" if c.status else "", "muted"),
                ]
            )
    mem = memory_of(node)
    if mem and node.reachable:
        filled = max(0, min(BAR, round(mem.fraction * BAR)))
        cells.append(
            [
                ("█" * filled, "mem-bar"),
                ("░" * (BAR - filled), "mem-free"),
                (f" {mem.fraction * 100:3.0f}%", ""),
            ]
        )
    else:
        cells.append([("—", "node-stale")])
    util = _gpu_util(node)
    power = [g.power_w for g in node.gpus if g.power_w is not None]
    gpu = []
    if util >= 0:
        gpu.append(f"{util}%")
    if power:
        gpu.append(f"{sum(power):.0f} W")
    cells.append([(" ".join(gpu) or "—", "" if gpu else "node-stale")])
    errors, warnings = counts
    if errors or warnings:
        f: list[tuple[str, str]] = []
        if errors:
            f.append((f"{errors}✗", "crash"))
        if warnings:
            f.append(((" " if errors else "") + f"{warnings}!", "log-warning"))
        cells.append(f)
    else:
        cells.append([("0", "muted")])
    return cells


def counts_by_node(findings: list[Finding]) -> dict[str, tuple[int, int]]:
    """(errors, warnings) per node the findings name."""
    out: dict[str, tuple[int, int]] = {}
    for f in findings:
        if f.node is None:
            continue
        e, w = out.get(f.node, (0, 0))
        out[f.node] = (e + (f.severity == "error"), w + (f.severity == "warning"))
    return out


class NodeTable(DataTable[Text]):
    """Every node, one row each; keeps the cursor on the same node across refreshes."""

    @dataclass
    class NodeSelected(Message):
        """The node under the cursor changed (its name)."""

        name: str

    def __init__(self) -> None:
        super().__init__(id="node-table", cursor_type="row", zebra_stripes=False)
        self.sort_key = "state"
        self.sort_reverse = False
        self.containers: dict[str, str | None] = {}
        self.backend = "ray"
        self._states: list[NodeState] = []
        self._counts: dict[str, tuple[int, int]] = {}
        self._order: list[str] = []
        self._drawn: dict[str, list[list[tuple[str, str]]]] = {}  # name -> its cells shown
        self._announced: str | None = None

    def on_mount(self) -> None:
        for col in COLUMNS:
            self.add_column(col.label, key=col.key)

    @property
    def order(self) -> list[str]:
        """Node names, top row first."""
        return list(self._order)

    @property
    def selected(self) -> str | None:
        if not self._order or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]

    def set_nodes(self, nodes: list[NodeState], counts: dict[str, tuple[int, int]]) -> None:
        self._states, self._counts = list(nodes), dict(counts)
        self._redraw()

    def sort_by(self, key: str, reverse: bool = False) -> None:
        self.sort_key, self.sort_reverse = key, reverse
        self._redraw()

    def cycle_sort(self) -> str:
        """Sort by the next column (state -> name -> role -> ... -> state); its label."""
        i = SORT_KEYS.index(self.sort_key) if self.sort_key in SORT_KEYS else -1
        self.sort_by(SORT_KEYS[(i + 1) % len(SORT_KEYS)])
        return self.sort_label

    @property
    def sort_label(self) -> str:
        col = next(c for c in COLUMNS if c.key == self.sort_key)
        return col.label or "state (errors first)"

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        key = str(event.column_key.value)
        self.sort_by(key, reverse=not self.sort_reverse if key == self.sort_key else False)

    def _style(self, slot: str) -> Style:
        if not slot:
            return Style()
        value = self.app.theme_variables.get(slot) if self.is_attached else None
        if not value:
            return Style()
        try:
            return Style(color=Color.parse(value).rich_color)
        except Exception:  # a theme value Rich cannot take: the default colour
            return Style()

    def _redraw(self) -> None:
        """Rows in sort order. A row whose cells did not change is not touched (DataTable
        caches each rendered row; rebuilding 32 rows per refresh cost a frame)."""
        if not self.is_mounted or not self.columns:
            return
        col = next(c for c in COLUMNS if c.key == self.sort_key)
        zero = (0, 0)
        nodes = sorted(
            self._states,
            key=lambda n: col.sort(n, self._counts.get(n.name, zero)),
            reverse=self.sort_reverse,
        )
        order = [n.name for n in nodes]
        cells = {
            n.name: row_cells(
                n, self._counts.get(n.name, zero), self.containers.get(n.name), self.backend
            )
            for n in nodes
        }
        keep = self.selected
        if order != self._order:
            self.clear()
            self._drawn = {}
            for name in order:
                self.add_row(*self._texts(cells[name]), key=name)
                self._drawn[name] = cells[name]
            self._order = order
            if keep in order:
                self.move_cursor(row=order.index(keep), animate=False)
        else:
            for name in order:
                old = self._drawn.get(name)
                new = cells[name]
                if old == new:
                    continue
                for i, (a, b) in enumerate(zip(old or [], new, strict=False)):
                    if a != b:
                        self.update_cell(name, COLUMNS[i].key, self._text(b), update_width=True)
                self._drawn[name] = new
        self._announce()

    def _texts(self, cells: list[list[tuple[str, str]]]) -> list[Text]:
        return [self._text(pieces) for pieces in cells]

    def _text(self, pieces: list[tuple[str, str]]) -> Text:
        t = Text(no_wrap=True, end="")
        for text, slot in pieces:
            t.append(text, self._style(slot))
        return t

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._announce()

    def _announce(self) -> None:
        name = self.selected
        if name is not None and name != self._announced:
            self._announced = name
            self.post_message(self.NodeSelected(name))


class NodeDetail(NodePane):
    """The selected node's full pane, beside the node table (id `node-detail`)."""

    def __init__(self) -> None:
        super().__init__(
            NodeState(
                name="detail",
                host="",
                role="",
                configured_ip=None,
                error="select a node in the table",
            )
        )
        self.shown: str | None = None  # the node it shows

    def show(
        self, node: NodeState, history: list[float], container_name: str | None, backend: str
    ) -> None:
        self.shown = node.name
        self.container_name = container_name
        self.backend = backend
        self.update_state(node, history)
