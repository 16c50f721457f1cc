"""Issue 17: the console at 80x24 .. 200x50 with 2 .. 32 nodes. The layout arithmetic,
the node table's rows and order, and the screen itself through Textual's pilot: the
table appears where panes do not fit, the log shows at least five lines at every size,
`z` gives the log the whole screen and back, `S` sorts the table."""

from __future__ import annotations

import pytest

from sparktui.tui import layout
from sparktui.tui.widgets.node_table import NodeTable, counts_by_node, row_cells
from tests.tui.cluster import DOWN_NODE, cluster_app_async, node_states
from tests.tui.scenes import feeder

SIZES = ((80, 24), (120, 40), (200, 50))
COUNTS = (2, 8, 32)


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("nodes", COUNTS)
def test_plan_keeps_the_log(width, height, nodes):
    p = layout.plan(width, height, nodes)
    used = 3 + p.nodes_height + p.middle_height
    assert height - used >= layout.LOG_MIN, p
    if p.mode == "panes":
        assert width // nodes >= layout.PANE_MIN_WIDTH
    else:
        assert p.nodes_height >= 3  # header and two rows at least


def test_plan_panes_only_where_they_fit():
    assert layout.plan(160, 50, 2).mode == "panes"  # the screenshots' size, as before
    assert layout.plan(200, 50, 8).mode == "table"  # 25 columns a pane: IPs would wrap
    assert layout.plan(100, 30, 2).mode == "table"  # the log vanished here before
    p = layout.plan(200, 50, 32)
    assert p.nodes_height >= 33 and p.detail_beside  # every node's row on one screen
    assert layout.plan(80, 24, 32, log_full=True).log_full


def test_rows_say_each_nodes_state():
    nodes = node_states(8)
    head, down = nodes[0], next(n for n in nodes if n.name == DOWN_NODE)
    text = lambda cells: ["".join(t for t, _ in c) for c in cells]  # noqa: E731
    head.ray.registered_ip = "10.1.230.180"
    h = text(row_cells(head, (2, 0), "vllm_node"))
    assert h[:4] == ["✗", "spark-1", "head", "192.168.200.12"]
    assert h[4] == "10.1.230.180 ≠" and h[5] == "192.168.200.12"
    assert h[6] == "running 12 minutes" and h[9] == "2✗"
    d = text(row_cells(down, (1, 0), "vllm_node"))
    assert d[0] == "✗" and d[6] == "unreachable" and d[7] == "—"
    w = nodes[1]
    w.ray.registered_ip = w.configured_ip
    cells = text(row_cells(w, (0, 0), "vllm_node"))
    assert cells[0] == "●" and cells[4] == f"{w.configured_ip} ✓" and cells[9] == "0"
    assert cells[8] == "14% 32 W"


def test_counts_by_node():
    from sparktui.core.model import Finding

    fs = [
        Finding("a", "error", "n1", ""),
        Finding("b", "warning", "n1", ""),
        Finding("c", "error", None, ""),
        Finding("d", "error", "n2", ""),
    ]
    assert counts_by_node(fs) == {"n1": (1, 1), "n2": (1, 0)}


def _log_lines(main) -> int:
    return main.query_one("#log-view").size.height


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("nodes", COUNTS)
async def test_screen_at_each_size(width, height, nodes):
    app, backend = await cluster_app_async(nodes)
    async with app.run_test(size=(width, height)) as pilot:
        await feeder(backend)(pilot)
        main = app.main
        plan = main.layout_plan
        assert plan == layout.plan(width, height, nodes)
        assert _log_lines(main) >= 5, (plan, _log_lines(main))
        table = main.query_one(NodeTable)
        if plan.mode == "table":
            assert table.region.height == plan.nodes_height
            assert len(table.order) == nodes
            # errors first: the head (both IPs wrong) and, from 8 nodes, the unreachable one
            top = table.order[: 2 if nodes >= 8 else 1]
            assert "spark-1" in top and (nodes < 8 or DOWN_NODE in top)
        else:
            assert not table.region.height
            assert len(main.query("#nodes NodePane")) == nodes


async def test_full_log_key_and_back():
    app, backend = await cluster_app_async(8)
    async with app.run_test(size=(80, 24)) as pilot:
        await feeder(backend)(pilot)
        main = app.main
        before = _log_lines(main)
        await pilot.press("z")
        await pilot.pause()
        assert main.layout_plan.log_full
        assert not main.query_one("#node-box").region.height
        assert not main.query_one("#middle").region.height
        assert _log_lines(main) == 24 - 2 - 3  # header, footer; border and status line
        assert _log_lines(main) > before
        await pilot.press("z")
        await pilot.pause()
        assert not main.layout_plan.log_full and _log_lines(main) == before
        assert main.query_one("#node-box").region.height == main.layout_plan.nodes_height


async def test_sort_key_and_detail_pane():
    app, backend = await cluster_app_async(32)
    async with app.run_test(size=(200, 50)) as pilot:
        await feeder(backend)(pilot)
        main = app.main
        table = main.query_one(NodeTable)
        table.focus()
        await pilot.pause()
        assert table.order[:2] == ["spark-1", DOWN_NODE]
        await pilot.press("S")  # by name, naturally
        await pilot.pause()
        assert table.sort_key == "name"
        assert table.order[:3] == ["spark-1", "spark-2", "spark-3"]
        assert table.order[-1] == "spark-32"
        # the cursor stays on its node; moving it shows that node's pane beside the table
        await pilot.press("down", "down")
        await pilot.pause()
        detail = main.query_one("#node-detail")
        assert table.selected == detail.shown == "spark-3" and detail.region.width > 0
        assert detail.shown in str(detail.border_title) and "worker" in str(detail.border_title)


async def test_enter_shows_the_pane_where_it_is_not_beside():
    app, backend = await cluster_app_async(8)
    async with app.run_test(size=(80, 24)) as pilot:
        await feeder(backend)(pilot)
        main = app.main
        table = main.query_one(NodeTable)
        table.focus()
        await pilot.press("down")  # spark-5, unreachable, sorts second
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        detail = main.query_one("#node-detail")
        assert detail.region.width == 80 and not table.region.width
        assert detail.shown == DOWN_NODE
        body = str(detail.query_one(".node-body").render())
        assert "No route to host" in body
        await pilot.press("escape")
        await pilot.pause()
        assert table.region.width == 80 and not detail.region.width


def test_plan_without_findings_gives_the_log_their_rows():
    for width, height, nodes in ((200, 60, 2), (120, 40, 8), (80, 24, 2)):
        busy, quiet = (layout.plan(width, height, nodes, findings=f) for f in (True, False))
        assert quiet.mode == busy.mode and quiet.nodes_height == busy.nodes_height
        assert quiet.middle_height == min(busy.middle_height, layout.MIDDLE_QUIET)
    assert layout.plan(200, 60, 2, findings=False).middle_height == layout.MIDDLE_QUIET


async def test_findings_box_shrinks_when_none_and_grows_back():
    """The seed story has findings; a snapshot without them leaves the box one line high
    and the log its rows; a finding that comes back opens it again (same layout mode)."""
    from dataclasses import replace

    from sparktui.tui.app import SparkApp
    from sparktui.tui.messages import SnapshotUpdated
    from sparktui.tui.widgets.findings import FindingsList
    from tests.tui.support import TestBackend, seed_config, seed_snapshot, started, wait_until

    cfg = seed_config()
    app = SparkApp(TestBackend(cfg, await seed_snapshot(cfg)))
    async with app.run_test(size=(200, 60)) as pilot:
        await started(pilot)
        main = app.main
        busy = main.snapshot
        await wait_until(pilot, lambda: main.query_one(FindingsList).option_count > 0)
        await pilot.pause()
        assert main.query_one("#middle").region.height == layout.MIDDLE_HEIGHT
        before = _log_lines(main)
        main.post_message(SnapshotUpdated(replace(busy, findings=[])))
        await wait_until(pilot, lambda: main.query_one(FindingsList).option_count == 0)
        await pilot.pause()
        assert main.query_one("#middle").region.height == layout.MIDDLE_QUIET
        assert _log_lines(main) == before + layout.MIDDLE_HEIGHT - layout.MIDDLE_QUIET
        assert main.layout_plan.mode == "panes"
        main.post_message(SnapshotUpdated(busy))
        await wait_until(pilot, lambda: main.query_one(FindingsList).option_count > 0)
        await pilot.pause()
        assert main.query_one("#middle").region.height == layout.MIDDLE_HEIGHT
        assert _log_lines(main) == before
