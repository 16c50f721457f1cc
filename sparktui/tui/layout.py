"""Which layout the main screen uses at a terminal size and node count: one pane per node
while the panes fit, otherwise a node table with the selected node's pane in a detail
area. The log keeps at least LOG_MIN rows (5 lines, its status line and border) at every
size; `log_full` gives it the whole screen between header and footer. While there is no
finding, the findings box keeps one line ("No findings") and the log gets its rows. Pure
arithmetic, so the tests can check every size without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass

PANE_MIN_WIDTH = 46  # a node pane's widest line: "VLLM_HOST_IP 192.168.200.12  ≠ MISMATCH"
PANE_HEIGHT = 14  # a node pane with two containers, NIC names and GPU sensors
MIDDLE_HEIGHT = 14  # findings list and finding detail, when there is room
MIDDLE_MIN = 4  # two findings and the box's border
MIDDLE_QUIET = 3  # no finding: the detail's one line and the box's border
LOG_MIN = 8  # five log lines, the log's status line and its border
DETAIL_WIDTH = 50  # the selected node's pane beside the table
DETAIL_BESIDE_MIN_WIDTH = 150  # narrower: the table takes the width, Enter shows the pane


@dataclass(frozen=True)
class Layout:
    mode: str  # "panes" | "table"
    nodes_height: int  # rows of the node panes or of the node table area
    middle_height: int  # findings list and detail
    detail_beside: bool  # table mode: the selected node's pane to the table's right
    log_full: bool = False


def plan(
    width: int,
    height: int,
    nodes: int,
    *,
    fixed: int = 3,
    log_full: bool = False,
    findings: bool = True,
) -> Layout:
    """The layout for a `width` x `height` screen with `nodes` nodes; `fixed` rows are
    taken by header, vLLM strip and footer. `findings`: there is one to show (none: the
    findings box shrinks to MIDDLE_QUIET rows; panes or table is decided as if there were,
    so a finding that comes does not swap them)."""
    nodes = max(1, nodes)
    free = max(0, height - fixed)
    beside = width >= DETAIL_BESIDE_MIN_WIDTH
    if log_full:
        return Layout("table", 0, 0, beside, True)
    if width // nodes >= PANE_MIN_WIDTH and PANE_HEIGHT + MIDDLE_HEIGHT + LOG_MIN <= free:
        return Layout("panes", PANE_HEIGHT, MIDDLE_HEIGHT if findings else MIDDLE_QUIET, False)
    want = nodes + 1  # a header row and one row per node
    if beside:
        want = max(want, PANE_HEIGHT)  # room for the detail pane next to the table
    # the table comes first, then the findings shrink to MIDDLE_MIN, the log never below
    table = max(3, min(want, free - LOG_MIN - MIDDLE_MIN))
    middle = max(0, min(MIDDLE_HEIGHT, free - LOG_MIN - table))
    if middle < MIDDLE_MIN:
        middle = 0  # no room for a useful findings box: the table's count column says it
        table = max(0, min(want, free - LOG_MIN))
    if not findings:
        middle = min(middle, MIDDLE_QUIET)
    return Layout("table", table, middle, beside)
