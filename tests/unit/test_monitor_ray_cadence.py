"""Issue 19: on an idle cluster the monitor does not start Python in the head's container
for the Ray table every few ticks; it asks again when who is connected to Ray's GCS (or a
node's reachability, or a Ray container) changes, and when the table is RAY_MAX_AGE old.

The head answers with the real probe output captured on a lab head, plus a gcs_conns
section as the lab head printed it (/proc/net/tcp6 rem_address, v4-mapped)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from sparktui import config
from sparktui.core import monitor as monmod
from sparktui.core.command import Command, Result
from sparktui.core.monitor import Monitor
from sparktui.core.transport import Transport

PROBE = Path(__file__).parent.parent / "fixtures" / "probe"
CFG_TEXT = (
    "cluster: {name: lab}\n"
    "container: {name: ray-sl12}\n"
    "nodes:\n"
    "  - {name: spark-1, host: 198.18.12.11, ip: 198.19.12.11, role: head}\n"
    "  - {name: spark-2, host: 198.18.12.12, ip: 198.19.12.12}\n"
)
PEERS = [
    "0000000000000000FFFF00000C0C13C6:E3D6",
    "0000000000000000FFFF00000C0C13C6:86A8",
    "0000000000000000FFFF00000B0C13C6:E4FE",
]  # the last: the head itself


RAY_SECTION = re.compile(r"^@@sparktui:ray@@\n.*?\n@@sparktui:/ray [^@\n]*@@$", re.S | re.M)
SKIPPED = "@@sparktui:ray@@\n\n@@sparktui:/ray skipped@@"  # probe.sh's `mark ray skipped`


class Head(Transport):
    """The captured head probe; records whether each probe asked for the Ray table."""

    def __init__(self) -> None:
        super().__init__("spark-1")
        self.text = (PROBE / "lab_head_probe.txt").read_text(errors="replace")
        self.peers = list(PEERS)
        self.asked: list[bool] = []

    async def _run(self, command: Command) -> Result:
        if "probe" not in (command.description or ""):
            return Result(0, "", "")
        asked = command.argv[7] != "off"  # sh -c SCRIPT sh $1..: $4 is ray (auto|...|off)
        self.asked.append(asked)
        text = self.text if asked else RAY_SECTION.sub(SKIPPED, self.text)  # as probe.sh
        gcs = (
            "@@sparktui:gcs_conns@@\n"
            + "\n".join(self.peers)
            + "\n\n@@sparktui:/gcs_conns rc=0@@\n"
        )
        return Result(0, text.replace("@@sparktui:end@@", gcs + "@@sparktui:end@@"), "")


class Worker(Transport):
    async def _run(self, command: Command) -> Result:
        return Result(0, (PROBE / "lab_worker_probe.txt").read_text(errors="replace"), "")


def _monitor() -> tuple[Monitor, Head]:
    head = Head()
    return Monitor(
        config.parse(CFG_TEXT, "lab.yaml"), {"spark-1": head, "spark-2": Worker("spark-2")}
    ), head


def _ticks(m: Monitor, n: int) -> None:
    async def go() -> None:
        for _ in range(n):
            await m.refresh()

    asyncio.run(go())


def test_idle_cluster_reads_the_ray_table_once_then_only_on_change():
    m, head = _monitor()
    _ticks(m, 9)
    # read at the start, and again once the worker's first answer made it reachable;
    # then never while nothing changes (was: every 3rd tick)
    assert head.asked == [True, True] + [False] * 7
    assert m.snapshot().ray_nodes  # the table read at the start is kept
    head.peers = PEERS[1:]  # a worker's connection went away
    _ticks(m, 3)
    assert head.asked[9:] == [False, True, False]  # seen on one tick, read on the next


def test_the_table_is_read_again_when_it_is_old(monkeypatch):
    monkeypatch.setattr(monmod, "RAY_MAX_AGE", 0.0)
    m, head = _monitor()
    _ticks(m, 3)
    assert head.asked == [True, True, True]


class OldHead(Head):
    """The captured output as it is: no gcs_conns section (an older probe, or no awk)."""

    async def _run(self, command: Command) -> Result:
        if "probe" not in (command.description or ""):
            return Result(0, "", "")
        self.asked.append(command.argv[7] != "off")
        return Result(0, self.text, "")


def test_without_the_gcs_list_the_old_cadence_stays():
    head = OldHead()
    m = Monitor(config.parse(CFG_TEXT, "lab.yaml"), {"spark-1": head, "spark-2": Worker("spark-2")})
    _ticks(m, 6)
    assert head.asked == [True, False, False, True, False, False]


def test_while_a_placement_group_waits_the_table_is_read_every_third_tick():
    # the head's real probe (Python route) with two placement groups pending: Ray is asked
    # every RAY_EVERY ticks although nobody joined or left the GCS; once nothing waits,
    # only on change again
    m, head = _monitor()
    head.text = (PROBE / "lab_head_probe_python_pgs_pending.txt").read_text(errors="replace")
    _ticks(m, 7)
    assert head.asked == [True, False, False, True, False, False, True]
    snap = m.snapshot()
    assert {p.name for p in snap.pending_pgs} == {
        "sparktui-lab-missing-node",
        "sparktui-lab-three-gpus",
    }
    assert snap.ray_via == "python" and all(p.age_s is not None for p in snap.pending_pgs)
    assert "pg-node-missing" in {f.id for f in snap.findings}
    head.text = (PROBE / "lab_head_probe.txt").read_text(errors="replace")
    _ticks(m, 5)  # tick 7 and 8 skipped, 9 reads: nothing waits any more
    assert head.asked[7:] == [False, False, True, False, False]
    assert m.snapshot().ray_pgs == [] and m.snapshot().ray_demands == []
