"""The console's doctor key shows the matrix (checks x nodes, the odd one out), a failing
cell selected first with its finding and fix; arrows move to other cells; Esc closes and the
findings stay in the main list. The matrix is doctor's own, computed on the lab's captured
doctor-probe output with the interconnect of spark-2 cut (tests/fixtures/doctor)."""

from __future__ import annotations

from textual.widgets import DataTable, Static

from sparktui.core.actions.fabric import CHECK_IDS
from sparktui.tui.app import SparkApp
from sparktui.tui.backend import ActionOutcome
from sparktui.tui.screens.doctor import DoctorScreen
from sparktui.tui.screens.main import MainScreen
from tests.tui.support import TestBackend, seed_config, seed_snapshot, started, wait_until
from tests.unit.test_doctor_fabric import cfg as fabric_cfg
from tests.unit.test_doctor_fabric import pair

SIZE = (160, 50)


def cut_link_report():
    from sparktui.core.actions.fabric import fabric_checks

    snap, ex = pair("lab_head_peer_ic_cut", "lab_worker_ic_cut")
    board = fabric_checks(fabric_cfg(), snap, ex)
    findings = list(board.findings)
    return findings, board.matrix(findings)


class DoctorBackend(TestBackend):
    __test__ = False

    async def execute(self, action, emit):
        if action != "doctor":
            return await super().execute(action, emit)
        findings, matrix = cut_link_report()
        return ActionOutcome(False, "1 error(s)", findings, matrix=matrix)


def text(screen: DoctorScreen) -> str:
    content = screen.query_one("#doctor-detail", Static).content
    return getattr(content, "plain", str(content))


async def test_doctor_key_shows_the_matrix_and_the_failing_cell_s_fix():
    cfg = seed_config()
    backend = DoctorBackend(cfg, await seed_snapshot(cfg))
    app = SparkApp(backend)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("d")
        await wait_until(
            pilot, lambda: isinstance(app.screen, DoctorScreen), 10, "the doctor matrix"
        )
        screen = app.screen
        assert isinstance(screen, DoctorScreen)
        table = screen.query_one(DataTable)
        assert table.row_count == len(CHECK_IDS)
        assert [str(c.label) for c in table.columns.values()] == [
            "check",
            "spark-1",
            "spark-2",
            "odd one out",
        ]
        # the first failing cell is selected: peer-unreachable on spark-2
        row = CHECK_IDS.index("peer-unreachable")
        assert (table.cursor_coordinate.row, table.cursor_coordinate.column) == (row, 2)
        assert str(table.get_cell_at(table.cursor_coordinate)) == "✗"
        assert str(table.get_row_at(row)[-1]) == "spark-2"
        detail = text(screen)
        assert "spark-2: ✗ fail (enp1s0f0np0 down)" in detail
        assert "ERROR the interconnect enp1s0f0np0 (198.19.11.12) on spark-2 has no link" in detail
        assert "fix: Check the cable and the link of enp1s0f0np0 on spark-2" in detail
        await pilot.press("left")  # spark-1's cell of the same check: fine
        await wait_until(pilot, lambda: "spark-1: ✓ ok" in text(screen), 5, "spark-1's cell")
        await pilot.press("left")  # the check's own column: what it reads
        await wait_until(
            pilot,
            lambda: "reads: ICMP to every peer's ip" in text(screen),
            5,
            "the check's description",
        )
        assert "odd one out: spark-2" in text(screen)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, MainScreen), 5, "main screen")
        assert any(f.id == "peer-unreachable" for f in app.main.doctor_findings)
