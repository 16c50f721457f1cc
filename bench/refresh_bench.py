"""Refresh cost.

1. One refresh of the 2-node lab (Ray table included) against its slowest single probe
   command run alone over the same warm connection (target ≤ 1.5×).
2. 64 nodes refreshed at 1 Hz: 64 SSH "nodes" on loopback addresses 127.0.1.1-64 (real
   sshd processes of our own), CPU of the jump-host process (target ≤ 25 % of one core).
   On a real cluster the probe's work happens on 64 other machines; here they would share
   this machine's 2 cores, so each node answers with the real captured output of a lab
   worker's probe (sshd ForceCommand) while the jump host does all of its real work:
   64 SSH channels a second, receiving, parsing, checking.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Row, limit_row, ratio_row
from sparktui import config
from sparktui.core.command import Command, sh
from sparktui.core.monitor import Monitor
from sparktui.core.probes import script as probe_script
from sparktui.core.probes.docker import DOCKER_PS_ARGV
from sparktui.core.probes.gpu import APPS_QUERY_ARGV, GPU_QUERY_ARGV
from sparktui.core.probes.ray import RAY_NODES_SNIPPET

PROBE_OUTPUT = (
    Path(__file__).parent.parent / "tests" / "fixtures" / "probe" / "lab_worker_probe.txt"
)


async def _median(transport, command: Command, n: int) -> float:
    times = []
    for _ in range(n):
        r = await transport.run(command)
        times.append(r.duration)
    times.sort()
    return times[len(times) // 2]


async def _lab_figures(cfg: config.Config, n: int) -> tuple[float, float, str]:
    m = Monitor(cfg)
    try:
        await m.refresh(wait=None, with_ray=True)  # connect + warm
        refresh = []
        for _ in range(n):
            t0 = time.perf_counter()
            snap = await m.refresh(wait=None, with_ray=True)
            refresh.append(time.perf_counter() - t0)
            assert all(node.reachable for node in snap.nodes), snap.nodes
        refresh.sort()
        head = m.transports[cfg.head.name]
        c = cfg.container.name
        singles = {
            "docker exec python3 ray.nodes()": Command(
                ("docker", "exec", c, "python3", "-c", RAY_NODES_SNIPPET)
            ),
            "docker ps": Command(tuple(DOCKER_PS_ARGV)),
            "docker exec env": Command(("docker", "exec", c, "sh", "-c", probe_script.ENV_SCRIPT)),
            "nvidia-smi gpus": Command(tuple(GPU_QUERY_ARGV)),
            "nvidia-smi apps": Command(tuple(APPS_QUERY_ARGV)),
            "ip -j addr": Command(("ip", "-j", "addr")),
            "meminfo": sh("cat /proc/meminfo"),
        }
        timed = {name: await _median(head, cmd, n) for name, cmd in singles.items()}
        slowest = max(timed, key=timed.get)
        return refresh[len(refresh) // 2], timed[slowest], slowest
    finally:
        await m.close()


def _lab_rows(quick: bool) -> list[Row]:
    from tests.lab import lab as labmod

    lab = labmod.up(nodes=2, pin="all", owner_pid=os.getpid())
    try:
        cfg = config.load(str(lab.config_path))
        value, ref, slowest = asyncio.run(_lab_figures(cfg, 3 if quick else 7))
    finally:
        labmod.down(lab)
    return [
        ratio_row(
            "one refresh of the 2-node lab", value, f"slowest probe alone ({slowest})", ref, 1.5
        )
    ]


SSHD_CONFIG = """\
Port {port}
{listen}
HostKey {dir}/host_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200:30:400
MaxSessions 20
ForceCommand cat {dir}/probe_output.txt
"""


def _loopback_sshd(n_nodes: int, port: int, d: Path) -> list[subprocess.Popen]:
    """Real sshd processes serving 127.0.1.1..n (sshd listens on at most 16 addresses each)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True
    )
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id")], check=True)
    shutil.copy(d / "id.pub", d / "authorized_keys")
    shutil.copy(PROBE_OUTPUT, d / "probe_output.txt")
    pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(
        "".join(f"[127.0.1.{i}]:{port} {pub[0]} {pub[1]}\n" for i in range(1, n_nodes + 1))
    )
    os.makedirs("/run/sshd", exist_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    procs = []
    for first in range(1, n_nodes + 1, 16):
        last = min(n_nodes, first + 15)
        listen = "\n".join(f"ListenAddress 127.0.1.{i}:{port}" for i in range(first, last + 1))
        conf = d / f"sshd_config.{first}"
        conf.write_text(
            SSHD_CONFIG.format(port=port, listen=listen, dir=d).replace(
                "sshd.pid", f"sshd.{first}.pid"
            )
        )
        # A private mount namespace with an empty /root: this machine's root .bashrc (pyenv
        # init, ~130 ms) would otherwise run for every command (bash reads it under sshd).
        procs.append(
            subprocess.Popen(
                [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    'mount -t tmpfs tmpfs /root && exec "$0" -D -e -f "$1"',
                    sshd,
                    str(conf),
                ],
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def _fanout_rows(quick: bool) -> list[Row]:
    return [fanout_row(64, 10 if quick else 30, 22022)]


def fanout_row(n_nodes: int, seconds: float, port: int) -> Row:
    """`n_nodes` loopback sshds probed at 1 Hz for `seconds`: the jump host's CPU (<= 25 %)."""
    with tempfile.TemporaryDirectory(prefix="sparktui-bench-") as tmp:
        d = Path(tmp)
        procs = _loopback_sshd(n_nodes, port, d)
        try:
            time.sleep(0.5)
            nodes = "\n".join(
                f"  - {{name: n{i:03d}, host: 127.0.1.{i}, ip: 127.0.1.{i}"
                + (", role: head}" if i == 1 else "}")
                for i in range(1, n_nodes + 1)
            )
            cfg = config.parse(
                f"cluster: {{name: fanout}}\nrefresh_interval: 1\n"
                f"ssh: {{user: root, port: {port}, identity_file: {d}/id, "
                f"known_hosts: {d}/known_hosts}}\nnodes:\n{nodes}\n",
                "fanout.yaml",
            )
            cpu, ticks, reachable, probes = asyncio.run(_fanout(cfg, seconds))
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)
    pct = 100 * cpu / seconds
    return limit_row(
        f"{n_nodes} nodes at 1 Hz: CPU of one core",
        pct,
        "%",
        25,
        note=f"{ticks} ticks, {reachable}/{n_nodes} reachable, "
        f"{probes / seconds:.0f} probes/s answered",
    )


async def _fanout(cfg: config.Config, seconds: float) -> tuple[float, int, int, int]:
    m = Monitor(cfg)
    try:
        await m.refresh(wait=None, with_ray=False)  # connect everything first
        sent0 = sum(len(t.sent) for t in m.transports.values())
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        ticks = 0
        reachable = 0
        end = time.monotonic() + seconds
        async for snap in m.watch(interval=1.0):
            ticks += 1
            reachable = sum(n.reachable for n in snap.nodes)
            if time.monotonic() >= end:
                break
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        probes = sum(len(t.sent) for t in m.transports.values()) - sent0
        return cpu, ticks, reachable, probes
    finally:
        await m.close()


def run(quick: bool) -> list[Row]:
    return _lab_rows(quick) + _fanout_rows(quick)
