"""Doctor's matrix (checks x nodes, ✓ / ✗ / –, the odd one out named): the console's view of
`sparktui doctor`. Moving onto a cell shows what it saw there; a failing cell shows its
finding and fix. Esc closes; the findings stay in the main list."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from sparktui.core.actions.fabric import CHECKS
from sparktui.core.model import Finding

MARK = {"ok": ("✓", "green"), "fail": ("✗", "bold red"), "n/a": ("–", "dim")}
SPECS = {c.id: c for c in CHECKS}


class DoctorScreen(ModalScreen[None]):
    """The matrix of one doctor run and the findings its cells point at."""

    BINDINGS = [Binding("escape,q", "close", "Close", show=False)]

    def __init__(self, matrix: dict[str, Any], findings: list[Finding]) -> None:
        super().__init__(id="doctor-screen")
        self.matrix = matrix
        self.findings = findings
        self.nodes: list[str] = list(matrix.get("nodes") or [])
        self.rows: list[dict[str, Any]] = list(matrix.get("rows") or [])

    def compose(self) -> ComposeResult:
        with Vertical(id="doctor-box") as box:
            failing = sum(c["status"] == "fail" for r in self.rows for c in r["cells"].values())
            box.border_title = (
                f"Doctor: {len(self.rows)} checks x {len(self.nodes)} nodes, {failing} failing"
            )
            box.border_subtitle = "arrows: a cell's finding and fix · Esc closes"
            yield DataTable(id="doctor-table", cursor_type="cell", zebra_stripes=True)
            with VerticalScroll(id="doctor-detail-box"):
                yield Static("", id="doctor-detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column("check", key="check")
        for n in self.nodes:
            table.add_column(n, key=n)
        table.add_column("odd one out", key="odd")
        for r in self.rows:
            cells: list[Text] = [Text(r["check"])]
            for n in self.nodes:
                glyph, style = MARK.get(r["cells"][n]["status"], ("?", ""))
                cells.append(Text(glyph, style=style, justify="center"))
            cells.append(Text(", ".join(r.get("odd_one_out") or []), style="bold"))
            table.add_row(*cells, key=r["check"])
        first = self._first_failing()
        if first is not None:
            table.move_cursor(row=first[0], column=first[1])
        table.focus()
        self._show(*(first or (0, 0)))

    def _first_failing(self) -> tuple[int, int] | None:
        """The first failing cell with an error finding, else the first failing cell."""
        failing = []
        for i, r in enumerate(self.rows):
            for j, n in enumerate(self.nodes):
                cell = r["cells"][n]
                if cell["status"] == "fail":
                    sev = [
                        self.findings[k].severity
                        for k in cell.get("findings") or []
                        if 0 <= k < len(self.findings)
                    ]
                    failing.append((0 if "error" in sev else 1, i, j + 1))
        return min(failing)[1:] if failing else None

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._show(event.coordinate.row, event.coordinate.column)

    def detail(self, row: int, column: int) -> Content:
        """What the detail panel says for the cell at (row, column)."""
        if not self.rows:
            return Content("doctor found nothing to check")
        r = self.rows[max(0, min(row, len(self.rows) - 1))]
        spec = SPECS.get(r["check"])
        head: list[str | tuple[str, str]] = [(r["check"], "bold")]
        if spec is not None:
            head += [f" — {spec.title}\n", ("reads: ", "$muted"), spec.reads, "\n"]
        if column < 1 or column > len(self.nodes):
            odd = ", ".join(r.get("odd_one_out") or [])
            if odd:
                head += [("odd one out: ", "bold"), odd, "\n"]
            return Content.assemble(*head)
        node = self.nodes[column - 1]
        cell = r["cells"][node]
        glyph, _ = MARK.get(cell["status"], ("?", ""))
        parts = [*head, "\n", (f"{node}: {glyph} {cell['status']}", "bold")]
        if cell.get("value"):
            parts += [f" ({cell['value']})"]
        if cell.get("note"):
            parts += [("  " + cell["note"], "$muted")]
        parts.append("\n")
        for i in cell.get("findings") or []:
            if not 0 <= i < len(self.findings):
                continue
            f = self.findings[i]
            style = "bold $crash" if f.severity == "error" else "bold $log-warning"
            parts += ["\n", (f"{f.severity.upper()} ", style), f.message, "\n"]
            if f.fix:
                parts += [("fix: ", "bold"), f.fix, "\n"]
        return Content.assemble(*parts)

    def _show(self, row: int, column: int) -> None:
        self.query_one("#doctor-detail", Static).update(self.detail(row, column))

    def action_close(self) -> None:
        self.dismiss(None)
