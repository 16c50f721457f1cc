"""The real `sparktui` console in a real terminal (tmux, 160x50) against the lab.

The lab runs Ray with only the worker pinned: spark-1 (head) registers under its external
IP while configured with its interconnect IP, the seed story's mismatch. The test reads
the screen with `capture-pane`, appends a real placement-group failure line to the head's
vLLM log, asks for help, tries a teardown in a read-only instance, quits, and checks that
every container still runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparktui.core.node_logs import DOCKER_INITIAL_LINES

pytestmark = [pytest.mark.lab, pytest.mark.tmux]

WIDTH, HEIGHT = 160, 50
FIXTURE = Path(__file__).parent.parent / "fixtures" / "vllm" / "vllm_ray_ip_mismatch.log"


class Tmux:
    """One tmux server of our own (-L), one session running one command."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.sock = f"sparktui-e2e-{os.getpid()}-{name}"
        self.name = name
        exports = " ".join(f"{k}={_q(v)}" for k, v in env.items())
        # The command's exit status is printed so the test can see the console ended.
        # COLUMNS/LINES (pytest's environment has 80x24) would override the pane's size.
        line = (
            f"env -u COLUMNS -u LINES {exports} {' '.join(_q(a) for a in command)}; "
            "echo SPARKTUI-EXITED $?; sleep 600"
        )
        self._tmux("new-session", "-d", "-s", name, "-x", str(WIDTH), "-y", str(HEIGHT), line)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], check=True, capture_output=True, text=True, timeout=20
        ).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def screen_ansi(self) -> str:
        return self._tmux("capture-pane", "-p", "-e", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "") -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what or predicate}; screen:\n{text}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=20)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def halves(screen: str) -> tuple[str, str]:
    """The left and right columns of the screen (the two node panes sit side by side)."""
    left, right = [], []
    for line in screen.splitlines():
        left.append(line[: WIDTH // 2])
        right.append(line[WIDTH // 2 :])
    return "\n".join(left), "\n".join(right)


def node_pane_rows(screen: str) -> str:
    """The rows from the first pane border to the findings box."""
    rows = screen.splitlines()
    start = next(i for i, r in enumerate(rows) if "spark-1 · head" in r)
    end = next(i for i, r in enumerate(rows) if "findings" in r and i > start)
    return "\n".join(rows[start:end])


def log_line_count(screen: str) -> int:
    """The log pane's line count, from its status line ("● follow  35 lines")."""
    m = re.search(r"follow\s+(\d+) lines", screen)
    return int(m.group(1)) if m else 0


def pg_line(ip: str) -> str:
    """The real autoscaler line of the fixture, naming `ip` as vLLM's node."""
    line = next(
        ln
        for ln in FIXTURE.read_text().splitlines()
        if "No available node types can fulfill resource request" in ln
    )
    return line.replace("198.19.200.101", ip)


@pytest.fixture
def console_env(tmp_path) -> dict[str, str]:
    return {
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PYTHONUNBUFFERED": "1",
    }


def _docker_log_lines(lab, node) -> int:
    """How many lines the console's follower of `node`'s container log starts with."""
    r = lab.sh(node, f"docker logs --tail {DOCKER_INITIAL_LINES} {lab.container} 2>&1 | wc -l")
    return int(r.stdout.strip())


def _containers(lab) -> dict[str, str]:
    out = {}
    for n in lab.nodes:
        r = lab.docker(n, "ps", "-a", "--format", "{{.Names}} {{.State}}")
        out[n.name] = r.stdout.strip()
    return out


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_console_in_tmux_against_the_lab(lab_worker_only, console_env, tmp_path):
    lab = lab_worker_only
    head, worker = lab.head, lab.workers[0]
    before = _containers(lab)
    assert all(f"{lab.container} running" in v for v in before.values()), before
    log_path = "/tmp/sparktui/vllm.log"
    lab.sh(head, f"mkdir -p /tmp/sparktui && : >> {log_path}")
    cmd = [sys.executable, "-m", "sparktui", "-c", str(lab.config_path)]
    rw = Tmux("rw", cmd, console_env)
    ro = Tmux("ro", [*cmd, "--read-only"], console_env)
    try:
        # 1. both IPs in each node pane, the head's marked as a mismatch
        screen = rw.wait_for(
            lambda s: "MISMATCH" in s and f"ray    {worker.ic_ip}" in s,
            timeout=90,
            what="node panes with Ray's IPs",
        )
        left, right = halves(node_pane_rows(screen))
        assert f"config {head.ic_ip}" in left and f"ray    {head.ext_ip}" in left
        assert "≠ MISMATCH" in left
        assert f"config {worker.ic_ip}" in right and f"ray    {worker.ic_ip}" in right
        assert "MISMATCH" not in right
        assert "READ-ONLY" not in screen.splitlines()[0]

        # 2. a crash line appended to the head's vLLM log: highlighted, with its fix. The
        # other nodes' logs start once a worker is probed, each with its container's last
        # lines: appended before those came, the line was pushed out of the pane by them
        # (CI: 34 lines of `ray start` output came after it, more than the pane has rows)
        backlog = sum(_docker_log_lines(lab, n) for n in lab.nodes)
        rw.wait_for(
            lambda s: log_line_count(s) >= backlog,
            timeout=60,
            what=f"the {backlog} lines of the containers' logs in the log pane",
        )
        line = pg_line(head.ic_ip)
        lab.append_line(head, log_path, line)
        screen = rw.wait_for(
            # the pane tags each line with its node: "▶ spark-1 (autoscaler ..."
            lambda s: re.search(r"▶ (?:\S+ )?\(autoscaler", s) is not None,
            timeout=30,
            what="the crash line marked in the log pane",
        )
        ansi = rw.screen_ansi()
        marked = next(r for r in ansi.splitlines() if "▶" in r and "autoscaler" in r)
        assert "\x1b[" in marked  # coloured (the finding style), not plain
        for _ in range(12):  # walk the findings list to the log finding
            if "On this cluster:" in rw.screen():
                break
            rw.keys("Down")
            time.sleep(0.4)
        screen = rw.screen()
        assert "On this cluster:" in screen, screen
        assert f"node:{head.ic_ip}" in screen and head.ext_ip in screen

        # 3. `?` lists the actions
        rw.keys("?")
        screen = rw.wait_for(lambda s: "Navigation" in s, timeout=10, what="help screen")
        for action in ("teardown", "restart", "serve", "preflight", "filter", "quit"):
            assert action in screen
        rw.keys("Escape")

        # 4. read-only refuses teardown: the key only notifies, no dialog, nothing runs
        ro.wait_for(
            lambda s: "READ-ONLY" in s and "MISMATCH" in s, timeout=90, what="read-only console"
        )
        ro.keys("t")
        screen = ro.wait_for(lambda s: "Read-only" in s, timeout=10, what="refusal notice")
        assert "confirm" not in screen and "Run teardown" not in screen
        ro.keys("?")
        screen = ro.wait_for(lambda s: "Navigation" in s, timeout=10, what="help screen")
        assert "teardown  " not in screen and "READ-ONLY" in screen
        ro.keys("Escape")

        # 5. Ctrl+C does not quit; q quits and leaves every container running
        rw.keys("C-c")
        rw.wait_for(lambda s: "Press q to quit" in s, timeout=10, what="ctrl+c notice")
        assert "SPARKTUI-EXITED" not in rw.screen()
        rw.keys("q")
        ro.keys("q")
        rw.wait_for(lambda s: "SPARKTUI-EXITED 0" in s, timeout=20, what="rw console exit")
        ro.wait_for(lambda s: "SPARKTUI-EXITED 0" in s, timeout=20, what="ro console exit")
    finally:
        rw.close()
        ro.close()
    after = _containers(lab)
    assert after == before, (before, after)
    audit = Path(console_env["XDG_STATE_HOME"]) / "sparktui" / "audit.log"
    assert not audit.exists() or audit.read_text() == ""
