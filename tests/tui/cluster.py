"""A console over N synthetic nodes (issue 17's sizes): the seed story's two Sparks grown
to N. The real Monitor (snapshot, Ray join, live checks) over probe answers in the real
NodeState form, as `sparktui.tui.demo.DemoMonitor` does for two: spark-1 (head) registered
by Ray under its management IP (the seed mismatch), the workers on the interconnect, and
from 8 nodes on, spark-5 unreachable (an ssh error as ssh prints it)."""

from __future__ import annotations

import asyncio

from sparktui import config as config_mod
from sparktui.core.model import ClusterSnapshot, NodeState, RayNode, RayView, VllmStatus
from sparktui.core.monitor import Monitor
from sparktui.core.transport import LocalTransport, Transport
from sparktui.tui.demo import DEMO_CONFIG, seed_nodes

DOWN_NODE = "spark-5"
SSH_ERROR = "ssh: connect to host spark-5.lan port 22: No route to host"


def ic_ip(i: int) -> str:
    return f"192.168.200.{11 + i}"


def cluster_config(nodes: int, log_path: str = "/tmp/sparktui-test/vllm.log") -> config_mod.Config:
    rows = "\n".join(
        f"  - {{name: spark-{i}, host: spark-{i}.lan, ip: {ic_ip(i)}, "
        f"role: {'head' if i == 1 else 'worker'}}}"
        for i in range(1, nodes + 1)
    )
    text = DEMO_CONFIG.format(log=log_path)
    head, rest = text.split("nodes:\n", 1)
    rest = rest.split("container:", 1)[1]
    text = f"{head}nodes:\n{rows}\ncontainer:{rest}".replace("spark-pair", f"spark-{nodes}")
    text = text.replace('"--tensor-parallel-size", "2"', f'"--tensor-parallel-size", "{nodes}"')
    return config_mod.parse(text, "<cluster>")


def node_states(nodes: int, tick: int = 0) -> list[NodeState]:
    head, worker = seed_nodes(tick)
    out = [head]
    for i in range(2, nodes + 1):
        n = NodeState(**{**vars(worker)})
        n.name, n.host, n.configured_ip = f"spark-{i}", f"spark-{i}.lan", ic_ip(i)
        n.env = {**worker.env, "VLLM_HOST_IP": ic_ip(i)}
        n.interfaces = [
            type(f)(
                f.name,
                f.state,
                [
                    ic_ip(i)
                    if ip == worker.configured_ip
                    else f"10.1.230.{179 + i}"
                    if ip.startswith("10.")
                    else ip
                    for ip in f.ipv4
                ],
            )
            for f in worker.interfaces
        ]
        n.gpus = [
            type(g)(**{**vars(g), "utilization_pct": (i * 7) % 100, "power_w": 30.0 + i})
            for g in worker.gpus
        ]
        if nodes >= 8 and n.name == DOWN_NODE:
            n.reachable, n.error, n.containers, n.gpus = False, SSH_ERROR, [], []
            n.interfaces, n.env, n.mem_total_mib, n.mem_available_mib = [], {}, None, None
        out.append(n)
    return out


def ray_nodes(nodes: int) -> list[RayNode]:
    out = [
        RayNode(
            "a3f9c1d2e4b5",
            "10.1.230.180",
            True,
            is_head=True,
            hostname="spark-1",
            gpus=1.0,
            cpus=20.0,
        )
    ]
    for i in range(2, nodes + 1):
        out.append(
            RayNode(
                f"{i:012x}",
                ic_ip(i),
                not (nodes >= 8 and i == 5),
                hostname=f"spark-{i}",
                gpus=1.0,
                cpus=20.0,
            )
        )
    return out


class ClusterMonitor(Monitor):
    def __init__(self, cfg: config_mod.Config) -> None:
        transports: dict[str, Transport] = {
            n.name: LocalTransport(n.name, read_only=True) for n in cfg.nodes
        }
        super().__init__(cfg, transports, read_only=True)
        self.count = len(cfg.nodes)

    async def _probe(self, name: str, with_ray: bool) -> NodeState:
        await asyncio.sleep(0)
        state = next(n for n in node_states(self.count, self.tick) if n.name == name)
        if state.role == "head":
            self._ray_nodes = ray_nodes(self.count)
            self._ray_error = None
            self._ray_source = name
            self._vllm = VllmStatus(healthy=None, detail="no answer on :8000 (waiting for Ray)")
        state.ray = RayView()
        return state


async def cluster_snapshot(cfg: config_mod.Config, tick: int = 3) -> ClusterSnapshot:
    m = ClusterMonitor(cfg)
    m.tick = tick - 1
    snap = await m.refresh(wait=None, with_ray=True)
    await m.close()
    return snap


def cluster_app(nodes: int, theme: str = "sparktui-dark"):
    """The console over `nodes` nodes (one refresh: the interval is an hour), the seed
    story's memory history on every node; feed it with `tests.tui.scenes.feeder`."""
    cfg = cluster_config(nodes)
    return _app(cfg, asyncio.run(cluster_snapshot(cfg)), theme)


async def cluster_app_async(nodes: int, theme: str = "sparktui-dark"):
    """cluster_app inside a running event loop (pilot tests)."""
    cfg = cluster_config(nodes)
    return _app(cfg, await cluster_snapshot(cfg), theme)


def _app(cfg: config_mod.Config, snapshot: ClusterSnapshot, theme: str):
    from collections import deque

    from sparktui.tui.app import SparkApp
    from tests.tui.scenes import HISTORY
    from tests.tui.support import TestBackend

    cfg.refresh_interval = 3600.0
    backend = TestBackend(cfg, snapshot)
    app = SparkApp(backend, theme=theme)
    for n in cfg.nodes:
        app.main.history[n.name] = deque(
            HISTORY["spark-1" if n.role == "head" else "spark-2"], maxlen=60
        )
    return app, backend


def plain_lines(n: int = 60) -> list[str]:
    """Log lines no knowledge-base pattern matches: the layout's snapshots do not move
    when the knowledge base learns something (its own tests cover that)."""
    return [
        f"(EngineCore pid=4242) INFO 12-01 08:{i // 60:02d}:{i % 60:02d} layout line {i}"
        for i in range(n)
    ]


def plain_feeder(backend):
    """run_before: stream plain_lines() in and wait until they are all shown."""
    from tests.tui.support import detail_follows, shown, wait_until

    async def run_before(pilot) -> None:
        lines = plain_lines()
        backend.feed(lines)
        main = pilot.app.main
        await wait_until(pilot, lambda: backend.queue.empty(), 10, "the log fed")
        await shown(pilot, main.log_view, len(lines))
        await detail_follows(pilot)
        await pilot.wait_for_scheduled_animations()

    return run_before
