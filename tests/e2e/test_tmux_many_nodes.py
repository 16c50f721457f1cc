"""Issue 17: the real `sparktui` console in a real terminal (tmux) against an 8-node lab
without Ray. Eight panes would be 20 columns each at 160x50 (IPs wrapped, panes cut), so
the console shows the node table: every node's name and configured IP on one screen,
with the log pane's lines below it; at 80x24 the header, the table, at least five log
lines and the footer; `z` gives the log the whole screen and back."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.e2e import test_tmux_lab as tm

pytestmark = [pytest.mark.lab, pytest.mark.tmux]


def _rows_naming(screen: str, lab) -> dict[str, str]:
    """Each node's table row: the screen line with its name and its configured IP."""
    out = {}
    for n in lab.nodes:
        row = next((r for r in screen.splitlines() if f" {n.name} " in r and n.ic_ip in r), None)
        if row is not None:
            out[n.name] = row
    return out


@pytest.fixture(scope="module")
def lab8(lab_factory):
    return lab_factory(nodes=8, ray=False)


@pytest.fixture
def console_env(tmp_path) -> dict[str, str]:
    return {
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
@pytest.mark.parametrize("size", [(160, 50), (80, 24)], ids=["160x50", "80x24"])
def test_eight_nodes_on_one_screen(lab8, console_env, size, monkeypatch):
    lab = lab8
    log_path = "/tmp/sparktui/vllm.log"
    lab.sh(lab.head, f"mkdir -p /tmp/sparktui && : >> {log_path}")
    monkeypatch.setattr(tm, "WIDTH", size[0])
    monkeypatch.setattr(tm, "HEIGHT", size[1])
    cmd = [sys.executable, "-m", "sparktui", "-c", str(lab.config_path), "--read-only"]
    t = tm.Tmux(f"many{size[0]}", cmd, console_env)
    try:
        t.wait_for(
            lambda s: len(_rows_naming(s, lab)) == len(lab.nodes),
            timeout=120,
            what="every node's name and configured IP",
        )
        for i in range(12):
            lab.append_line(lab.head, log_path, f"INFO sparktui-e2e line {i}")
        screen = t.wait_for(
            lambda s: "line 11" in s and s.count("no containers") >= len(lab.nodes),
            timeout=60,
            what="every node probed, the log's last line",
        )
        rows = _rows_naming(screen, lab)
        assert set(rows) == {n.name for n in lab.nodes}, screen
        for n in lab.nodes:  # reachable (probed over ssh), no container yet (no Ray here)
            assert "unreachable" not in rows[n.name] and "no containers" in rows[n.name]
        lines = screen.splitlines()
        assert len(lines) <= size[1]
        assert "sparktui" in lines[0]  # the header
        assert "q Quit" in screen or "palette" in lines[-1]  # the footer
        log_rows = [r for r in lines if "sparktui-e2e line" in r]
        assert len(log_rows) >= 5, screen
        assert "spark-2 · worker" not in screen  # no pane per node (the detail: the top row)
        # z: the whole screen for the log, then back to the table
        t.keys("z")
        screen = t.wait_for(
            lambda s: not _rows_naming(s, lab), timeout=10, what="the full-screen log"
        )
        assert len([r for r in screen.splitlines() if "sparktui-e2e line" in r]) >= 12
        t.keys("z")
        t.wait_for(
            lambda s: len(_rows_naming(s, lab)) == len(lab.nodes),
            timeout=10,
            what="the node table again",
        )
        t.keys("q")
        t.wait_for(lambda s: "SPARKTUI-EXITED 0" in s, timeout=20, what="console exit")
    finally:
        t.close()
