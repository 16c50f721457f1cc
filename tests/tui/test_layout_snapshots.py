"""Issue 17: the main screen at 80x24, 120x40 and 200x50 with 2, 8 and 32 nodes
(pytest-textual-snapshot): panes where they fit, else the node table (errors first, the
selected node's pane beside it on wide screens); the log visible at every size. The log
holds plain lines (no pattern matches them) so the knowledge base's work does not move
these; the live checks' findings (Ray's IP, VLLM_HOST_IP, the unreachable node) show.
Regenerate with `pytest tests/tui/test_layout_snapshots.py --snapshot-update` after an
intended change, and look at each."""

from __future__ import annotations

import pytest

from tests.tui.cluster import cluster_app, plain_feeder


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("nodes", [2, 8, 32])
def test_layout(snap_compare, nodes, size):
    app, backend = cluster_app(nodes)
    assert snap_compare(app, terminal_size=size, run_before=plain_feeder(backend))
