"""The monitor on real captured probe output, and its isolation of slow nodes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sparktui import config
from sparktui.core.command import Command, Result
from sparktui.core.monitor import Monitor
from sparktui.core.transport import Transport, TransportError

PROBE = Path(__file__).parent.parent / "fixtures" / "probe"

CFG_TEXT = (
    "cluster: {name: lab}\n"
    "container: {name: ray-sl12}\n"
    "nodes:\n"
    "  - {name: spark-1, host: 198.18.12.11, ip: 198.19.12.11, role: head}\n"
    "  - {name: spark-2, host: 198.18.12.12, ip: 198.19.12.12}\n"
)


class Replay(Transport):
    """Answers the probe with what the real probe printed on a lab node."""

    def __init__(self, node: str, text: str, delay: float = 0.0, fail: str | None = None):
        super().__init__(node)
        self.text, self.delay, self.fail = text, delay, fail

    async def _run(self, command: Command) -> Result:
        await asyncio.sleep(self.delay)
        if self.fail:
            raise TransportError(f"{self.node}: {self.fail}")
        return Result(0, self.text, "")


def _monitor(cfg_text: str = CFG_TEXT, **worker) -> Monitor:
    cfg = config.parse(cfg_text, "lab.yaml")
    head = (PROBE / "lab_head_probe.txt").read_text(errors="replace")
    work = (PROBE / "lab_worker_probe.txt").read_text(errors="replace")
    return Monitor(
        cfg, {"spark-1": Replay("spark-1", head), "spark-2": Replay("spark-2", work, **worker)}
    )


def test_real_probe_output_becomes_a_clean_snapshot():
    snap = asyncio.run(_monitor().refresh(with_ray=True))
    head, worker = snap.nodes
    assert snap.ray_error is None and snap.ray_source == "spark-1"
    assert sorted(r.ip for r in snap.ray_nodes) == ["198.19.12.11", "198.19.12.12"]
    assert head.ray.registered_ip == "198.19.12.11" and head.ray.alive
    assert worker.ray.registered_ip == "198.19.12.12" and worker.ray.gpus == 1.0
    assert head.env["VLLM_HOST_IP"] == "198.19.12.11"
    assert {i.name for i in head.interfaces} >= {"enP7s7", "enp1s0f0np0"}
    assert head.container("ray-sl12").running
    assert head.gpus[0].unified and head.gpus[0].name == "NVIDIA GB10"
    assert snap.findings == []


def test_same_output_under_a_config_that_expects_other_ips_finds_mismatches():
    text = CFG_TEXT.replace("ip: 198.19.12.11", "ip: 198.18.12.11")
    snap = asyncio.run(_monitor(text).refresh(with_ray=True))
    found = {(f.id, f.node) for f in snap.findings}
    assert ("ray-ip-mismatch", "spark-1") in found
    assert ("vllm-host-ip-mismatch", "spark-1") not in found  # VLLM_HOST_IP agrees with Ray


def test_a_slow_node_does_not_delay_the_others():
    async def go():
        m = _monitor(delay=3.0)
        t0 = time.monotonic()
        snap = await m.refresh(wait=0.5, with_ray=True)
        took = time.monotonic() - t0
        await m.close()
        return snap, took

    snap, took = asyncio.run(go())
    assert took < 1.5
    assert snap.node("spark-1").reachable and snap.node("spark-1").containers
    assert not snap.node("spark-2").reachable  # not answered yet: last (initial) state


def test_an_unreachable_node_is_reported_with_its_reason():
    snap = asyncio.run(
        _monitor(fail="SSH connection refused (is sshd running?)").refresh(with_ray=True)
    )
    worker = snap.node("spark-2")
    assert not worker.reachable and worker.error == "SSH connection refused (is sshd running?)"
    assert [(f.id, f.node) for f in snap.findings] == [("node-unreachable", "spark-2")]


def test_tokens_per_second_from_successive_metrics():
    m = _monitor()
    from sparktui.core.model import VllmStatus

    class P:
        vllm = VllmStatus(healthy=True, generation_tokens_total=100.0)

    m._vllm_status(P())
    m._last_tokens = (m._last_tokens[0] - 2.0, 100.0)
    P.vllm = VllmStatus(healthy=True, generation_tokens_total=300.0)
    v = m._vllm_status(P())
    assert 95 < v.tokens_per_s < 105


ESCAPES = "\x1b]0;title\x07\x1b[2Jpwned\x9b31m\u202e"


def test_hostile_node_text_never_reaches_a_terminal():
    """Escape sequences planted in what a node answers (an interface name in the container's
    environment, the container's status, the SSH server's disconnect reason) are gone from
    the snapshot, and from what `sparktui status` prints."""
    import io

    from rich.console import Console

    from sparktui.commands import status
    from sparktui.core.safe_text import CONTROL_RE

    cfg = config.parse(CFG_TEXT, "lab.yaml")
    head = (PROBE / "lab_head_probe.txt").read_text(errors="replace")
    head = head.replace(
        "NCCL_SOCKET_IFNAME=enp1s0f0np0", f"NCCL_SOCKET_IFNAME=enp1s0f0np0{ESCAPES}"
    )
    head = head.replace(
        '"RunningFor":"9 seconds ago"',
        '"RunningFor":"9 seconds ago'
        + ESCAPES.replace("\x1b", "\\u001b").replace("\x07", "\\u0007")
        + '"',
    )
    assert head.count("pwned") == 2
    m = Monitor(
        cfg,
        {
            "spark-1": Replay("spark-1", head),
            "spark-2": Replay("spark-2", "", fail=f"SSH disconnected: {ESCAPES}"),
        },
    )
    snap = asyncio.run(m.refresh(with_ray=True))
    spark1, spark2 = snap.nodes
    assert spark1.env["NCCL_SOCKET_IFNAME"].startswith("enp1s0f0np0pwned")
    assert not spark2.reachable and "pwned" in spark2.error
    texts = [
        spark1.env["NCCL_SOCKET_IFNAME"],
        spark2.error,
        *(c.running_for for c in spark1.containers),
        *(f.message for f in snap.findings),
    ]
    assert sum("pwned" in t for t in texts) >= 3
    assert [t for t in texts if CONTROL_RE.search(t) or "\x1b" in t] == []

    out = io.StringIO()
    status.render(snap, Console(file=out, width=200, color_system=None))
    printed = out.getvalue()
    assert "pwned" in printed
    assert "\x1b" not in printed and not CONTROL_RE.search(printed.replace("\n", ""))
