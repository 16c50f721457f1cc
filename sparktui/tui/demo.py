"""`sparktui --demo`: the seed story with no cluster, through the live code paths.

Two DGX Sparks. spark-1 (head) has its interconnect at 192.168.200.12, but Ray was
started without `--node-ip-address`, so it registered spark-1 under the management NIC's
10.1.230.180; spark-2 joined over the interconnect as 192.168.200.13. VLLM_HOST_IP on
spark-1 says 192.168.200.12, so vLLM's placement group waits for `node:192.168.200.12`,
which no Ray node offers, and fails.

What is real here: the Monitor (its snapshot and live checks), the knowledge base (matcher,
triage, live join), the log follower (FileFollower over a LocalTransport, tailing a local
temp file), the plans shown in confirmations. What is staged: the probes (a Monitor whose
`_probe` returns the story's NodeStates) and the log file's contents, which are the real
vLLM log of this failure (captured in the lab, `demo_data/vllm_ray_ip_mismatch.log`) with
the lab's addresses mapped to the story's. Actions are simulated: nothing is run.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

from sparktui import config as config_mod
from sparktui.core.model import (
    Container,
    Finding,
    Gpu,
    Interface,
    NodeState,
    RayNode,
    RayView,
    VllmStatus,
)
from sparktui.core.monitor import Monitor
from sparktui.core.transport import LocalTransport, Transport
from sparktui.tui.backend import ActionOutcome, Emit, Progress
from sparktui.tui.live import LiveBackend

DEMO_LOG = "vllm_ray_ip_mismatch.log"
#: The lab's addresses in the captured log -> the story's (spark-1 interconnect, external).
IP_MAP = {
    "198.19.200.101": "192.168.200.12",
    "198.18.1.101": "10.1.230.180",
    "198.19.200.102": "192.168.200.13",
    "198.18.1.102": "10.1.230.181",
}

DEMO_CONFIG = """\
cluster:
  name: spark-pair
nodes:
  - {{name: spark-1, host: spark-1.lan, ip: 192.168.200.12, role: head}}
  - {{name: spark-2, host: spark-2.lan, ip: 192.168.200.13, role: worker}}
container:
  name: vllm_node
  image: nvcr.io/nvidia/vllm:26.05-py3
  run_args: ["--gpus", "all", "--network", "host", "--ipc", "host", "--shm-size", "16g"]
  env:
    NCCL_SOCKET_IFNAME: enp1s0f1np1
    GLOO_SOCKET_IFNAME: enp1s0f1np1
vllm:
  model: meta-llama/Llama-3.3-70B-Instruct
  args: ["--tensor-parallel-size", "2", "--distributed-executor-backend", "ray"]
  log: {log}
refresh_interval: 2
"""

GIB = 1024
TOTAL_MIB = 124610  # GB10: MemTotal 127600748 kB


def demo_config(log_path: str = "/tmp/sparktui/vllm.log") -> config_mod.Config:
    return config_mod.parse(DEMO_CONFIG.format(log=log_path), "<demo>")


def _used(base_gib: float, tick: int) -> int:
    wobble = (0, 1, 3, 2, 4, 3, 1, 2)[tick % 8] * 0.4
    return int((base_gib + wobble) * GIB)


def seed_nodes(tick: int = 0) -> list[NodeState]:
    """The story's two nodes as the probes would report them."""
    env_common = {
        "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "RAY_memory_monitor_refresh_ms": "0",
        "HF_TOKEN": "hf_demo_not_a_secret",
    }
    out = []
    for name, ext, ic, role, base in (
        ("spark-1", "10.1.230.180", "192.168.200.12", "head", 81.0),
        ("spark-2", "10.1.230.181", "192.168.200.13", "worker", 78.5),
    ):
        used = _used(base, tick)
        out.append(
            NodeState(
                name=name,
                host=f"{name}.lan",
                role=role,
                configured_ip=ic,
                reachable=True,
                interfaces=[
                    Interface("lo", "UNKNOWN", ["127.0.0.1"]),
                    Interface("enP7s7", "UP", [ext]),
                    Interface("enp1s0f1np1", "UP", [ic]),
                ],
                containers=[
                    Container(
                        "vllm_node",
                        "nvcr.io/nvidia/vllm:26.05-py3",
                        "running",
                        "Up 12 minutes" if role == "head" else "Up 11 minutes",
                    )
                ],
                gpus=[
                    Gpu(
                        0,
                        "NVIDIA GB10",
                        used,
                        TOTAL_MIB,
                        unified=True,
                        utilization_pct=0 if role == "head" else 2,
                    )
                ],
                env={**env_common, "VLLM_HOST_IP": ic},
                mem_total_mib=TOTAL_MIB,
                mem_available_mib=TOTAL_MIB - used,
                probe_seconds=0.04,
            )
        )
    return out


SEED_RAY = [
    RayNode(
        "a3f9c1d2e4b5", "10.1.230.180", True, is_head=True, hostname="spark-1", gpus=1.0, cpus=20.0
    ),
    RayNode("7c1e0b9f2d34", "192.168.200.13", True, hostname="spark-2", gpus=1.0, cpus=20.0),
]

SEED_VLLM = VllmStatus(healthy=None, detail="no answer on :8000 (waiting for Ray)")


class DemoMonitor(Monitor):
    """The real Monitor (snapshot, Ray join, live checks) over the story's probe answers."""

    def __init__(self, cfg: config_mod.Config) -> None:
        transports: dict[str, Transport] = {
            n.name: LocalTransport(n.name, read_only=True) for n in cfg.nodes
        }
        super().__init__(cfg, transports, read_only=True)

    async def _probe(self, name: str, with_ray: bool) -> NodeState:
        await asyncio.sleep(0.02)
        state = next(n for n in seed_nodes(self.tick) if n.name == name)
        if state.role == "head":
            self._ray_nodes = list(SEED_RAY)
            self._ray_error = None
            self._ray_source = name
            self._vllm = VllmStatus(**vars(SEED_VLLM))
        state.ray = RayView()
        return state


def demo_log_lines() -> list[str]:
    """The captured log of the failure, with the lab's IPs mapped to the story's."""
    text = (resources.files("sparktui.tui") / "demo_data" / DEMO_LOG).read_text(encoding="utf-8")
    for lab, story in IP_MAP.items():
        text = text.replace(lab, story)
    return text.splitlines()


class DemoBackend(LiveBackend):
    """LiveBackend over the DemoMonitor and a local log file the story is written into."""

    demo = True

    def __init__(self, *, line_delay: float = 0.05, read_only: bool = False) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sparktui-demo-"))
        self.log_path = self._dir / "vllm.log"
        self.log_path.touch()
        cfg = demo_config(str(self.log_path))
        super().__init__(cfg, read_only=read_only, monitor=DemoMonitor(cfg))
        self.line_delay = line_delay
        self._writer: asyncio.Task | None = None

    @property
    def log_label(self) -> str:
        return "spark-1:/tmp/sparktui/vllm.log (DEMO: replayed)"

    async def _write_story(self) -> None:
        await asyncio.sleep(0.5)
        with self.log_path.open("a", encoding="utf-8") as f:
            for line in demo_log_lines():
                f.write(line + "\n")
                f.flush()
                slow = "placement group" in line or "autoscaler" in line
                await asyncio.sleep(self.line_delay * (12 if slow else 1))

    async def follow_log(self) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        from sparktui.core.logs import FileFollower

        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write_story())
        follower = self._follower = FileFollower(
            LocalTransport("spark-1"),
            str(self.log_path),
            node="spark-1",
            from_start=True,
            poll_interval=0.2,
        )
        async for batch in follower.batches():
            yield batch.node, list(batch.lines), list(batch.events)

    async def execute(self, action: str, emit: Emit) -> ActionOutcome:
        """Walk the real plan's steps without running anything."""
        plan = self.plan(action)
        for i, pl in enumerate(plan.lines):
            emit(Progress(action, i, pl.node, pl.description, "running"))
            await asyncio.sleep(0.3)
            emit(Progress(action, i, pl.node, pl.description, "ok", "DEMO: not run"))
        findings: list[Finding] = []
        if action == "doctor":
            findings = list(self.monitor.snapshot().findings)
        return ActionOutcome(True, "DEMO: simulated, nothing was run on any node", findings)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
        await super().close()
        shutil.rmtree(self._dir, ignore_errors=True)
