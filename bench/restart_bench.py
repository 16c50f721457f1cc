"""Restart wall time: `sparktui restart --yes` on the 2-node lab against the same steps run
by hand, as an operator would type them: plain `ssh` commands one after the other.

By hand (reference), each step one `ssh <node> <command>` process:
  1. docker rm -f <c> on the head, then on the worker
  2. docker run -d ... ray start --head --node-ip-address <ip> (the same argv sparktui uses)
  3. until `docker exec <c> ray status` succeeds (every 0.5 s): the GCS is up
  4. docker run -d ... ray start --address <head ip>:<port> on the worker
  5. until the Ray node table (ray.nodes() in the head container) lists both nodes alive
     under their configured IPs (every 0.5 s)
sparktui: the CLI as a subprocess (Python start-up, SSH connections, plan, audit included);
its own plan removes the containers in parallel, takes the GCS port listening as "GCS up",
waits for the worker's "Ray runtime started" and then reads the same node table.
Rounds alternate (hand, sparktui, hand, ...) on the same lab; medians are compared
(target ≤ 1.3×).
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Row, ratio_row

ROOT = Path(__file__).resolve().parent.parent
POLL = 0.5


def _ssh(lab, node, argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    cmd = [
        "ssh",
        "-i",
        str(lab.key_path),
        "-o",
        f"UserKnownHostsFile={lab.known_hosts}",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=5",
        f"root@{node.ext_ip}",
        shlex.join(argv),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise RuntimeError(
            f"{node.name}: {shlex.join(argv)} exited {r.returncode}: {r.stderr[-500:]}"
        )
    return r


def _until(fn, what: str, timeout: float = 180) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if fn():
            return
        time.sleep(POLL)
    raise RuntimeError(f"by hand: timed out waiting for {what}")


def restart_by_hand(lab, cfg) -> float:
    from sparktui.core.actions.builtin import docker_run_argv
    from sparktui.core.probes.ray import RAY_NODES_SNIPPET, parse_ray_nodes

    head, worker = lab.head, lab.workers[0]
    c = cfg.container.name
    t0 = time.perf_counter()
    for n in (head, worker):
        _ssh(lab, n, ["docker", "rm", "-f", c])
    _ssh(lab, head, docker_run_argv(cfg, cfg.head))
    _until(
        lambda: (
            _ssh(lab, head, ["docker", "exec", c, "ray", "status"], check=False).returncode == 0
        ),
        "the GCS",
    )
    _ssh(lab, worker, docker_run_argv(cfg, cfg.node(worker.name)))
    want = {n.ip for n in cfg.nodes}

    def all_alive() -> bool:
        r = _ssh(lab, head, ["docker", "exec", c, "python3", "-c", RAY_NODES_SNIPPET], check=False)
        nodes, _err = parse_ray_nodes(r.stdout)
        return want <= {x.ip for x in nodes if x.alive}

    _until(all_alive, "both nodes alive in Ray")
    return time.perf_counter() - t0


def restart_sparktui(config_path: Path, state_home: str) -> float:
    env = dict(os.environ, XDG_STATE_HOME=state_home, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "sparktui", "restart", "-c", str(config_path), "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"sparktui restart failed ({r.returncode}): {r.stderr[-2000:]}")
    return elapsed


def run(quick: bool) -> list[Row]:
    from sparktui import config
    from tests.lab import lab as labmod

    rounds = 2 if quick else 4
    lab = labmod.up(nodes=2, pin="worker-only", owner_pid=os.getpid())
    try:
        cfg = config.load(str(lab.config_path))
        hand, ours = [], []
        with tempfile.TemporaryDirectory(prefix="sparktui-bench-state-") as state:
            for _ in range(rounds):
                hand.append(restart_by_hand(lab, cfg))
                ours.append(restart_sparktui(lab.config_path, state))
    finally:
        labmod.down(lab)
    h, o = statistics.median(hand), statistics.median(ours)
    note = (
        f"{rounds} rounds each; sparktui {', '.join(f'{x:.1f}' for x in ours)} s; "
        f"by hand {', '.join(f'{x:.1f}' for x in hand)} s"
    )
    return [
        ratio_row(
            "restart of the 2-node lab (sparktui restart --yes)",
            o,
            "same steps by hand (ssh, sequential)",
            h,
            1.3,
            note=note,
        )
    ]


if __name__ == "__main__":  # pragma: no cover
    for row in run("--quick" in sys.argv):
        print(row)
