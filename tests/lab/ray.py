"""The Ray cluster of a lab: one container per node running `ray start --block`.

Head on node 1, workers join the head's interconnect IP. Pinning (`--node-ip-address`):
`all` = every node on its interconnect IP; `none` = nobody (head registers its default-route,
i.e. external, IP; workers the IP towards the head = interconnect); `worker-only` = head
unpinned, workers pinned (the mixed registration seen on real Sparks).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from tests.lab import node as nodemod
from tests.lab.proc import LabError, wait_for
from tests.lab.state import IC_IF, Lab, Node

# /dev/shm as real recipes size it (run_cluster.sh --shm-size 10.24g): doctor's shm-small
# stays quiet on a healthy lab (a tmpfs: nothing is allocated until used).
RUN_ARGS = ["--gpus", "all", "--network", "host", "--shm-size", "1g"]
EXTRA_ARGS = ["--num-cpus", "1"]

NODES_SCRIPT = (
    "import json, ray\n"
    "ray.init(address='auto', logging_level='ERROR', log_to_driver=False,"
    " configure_logging=False)\n"
    "print('@@NODES@@' + json.dumps(ray.nodes()))\n"
)


def container_env(node: Node) -> dict[str, str]:
    """What real recipes pass: the node's interconnect IP and NIC for vLLM/NCCL/Gloo."""
    return {"VLLM_HOST_IP": node.ic_ip, "NCCL_SOCKET_IFNAME": IC_IF, "GLOO_SOCKET_IFNAME": IC_IF}


def ray_start_args(lab: Lab, node: Node, pin: str | None = None) -> list[str]:
    pin = pin or lab.pin
    if node.role == "head":
        args = [
            "ray",
            "start",
            "--block",
            "--head",
            "--port",
            str(lab.ray_port),
            "--include-dashboard=false",
        ]  # ~0.3 GB less per lab on a 2-core machine
        pinned = pin == "all"
    else:
        args = ["ray", "start", "--block", "--address", f"{lab.head.ic_ip}:{lab.ray_port}"]
        pinned = pin in ("all", "worker-only")
    args += EXTRA_ARGS
    if pinned:
        args += ["--node-ip-address", node.ic_ip]
    return args


def run_argv(lab: Lab, node: Node, pin: str | None = None) -> list[str]:
    """The `docker run` that starts the node's Ray container."""
    if not lab.image:
        raise LabError(f"lab {lab.id} has no image (brought up with --no-ray?)")
    env = [a for k, v in container_env(node).items() for a in ("-e", f"{k}={v}")]
    return [
        "docker",
        "run",
        "-d",
        "--name",
        lab.container,
        *RUN_ARGS,
        *env,
        lab.image,
        *ray_start_args(lab, node, pin),
    ]


def start_node(lab: Lab, node: Node, pin: str | None = None) -> None:
    """(Re)create the node's Ray container."""
    nodemod.exec_(node, ["docker", "rm", "-f", lab.container], check=False)
    nodemod.exec_(node, run_argv(lab, node, pin))


def start(lab: Lab, pin: str | None = None) -> None:
    """Start Ray on every node (head and workers at once: workers retry until the GCS is up)."""
    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        list(pool.map(lambda n: start_node(lab, n, pin), lab.nodes))


def stop(lab: Lab) -> None:
    """Remove the Ray containers on every running node."""

    def rm(n: Node) -> None:
        if nodemod.is_ours(n, n.init_pid):
            nodemod.exec_(n, ["docker", "rm", "-f", lab.container], check=False, timeout=60)

    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        list(pool.map(rm, lab.nodes))


def node_table(lab: Lab, via: Node | None = None, timeout: float = 60) -> list[dict]:
    """The real Ray node table (`ray.nodes()`), read inside the head's container."""
    via = via or lab.head
    cp = nodemod.exec_(
        via, ["docker", "exec", lab.container, "python3", "-c", NODES_SCRIPT], timeout=timeout
    )
    for line in cp.stdout.splitlines():
        if line.startswith("@@NODES@@"):
            return json.loads(line[len("@@NODES@@") :])
    raise LabError(f"no node table in output: {cp.stdout[-500:]} {cp.stderr[-500:]}")


def alive_addresses(table: list[dict]) -> list[str]:
    return sorted(n["NodeManagerAddress"] for n in table if n.get("Alive"))


def wait_alive(lab: Lab, timeout: float = 300) -> list[dict]:
    """Until every node of the lab is alive in Ray; returns the node table."""
    t0 = time.monotonic()

    def ready() -> list[dict] | None:
        table = node_table(lab, timeout=30)
        alive = [n for n in table if n.get("Alive")]
        return table if len(alive) >= len(lab.nodes) else None

    try:
        return wait_for(ready, timeout, 0.5, f"{len(lab.nodes)} alive Ray nodes")
    except LabError as e:
        logs = nodemod.exec_(
            lab.head, ["docker", "logs", "--tail", "30", lab.container], check=False
        )
        raise LabError(
            f"{e} after {time.monotonic() - t0:.0f}s; head container log:\n"
            f"{logs.stdout[-3000:]}{logs.stderr[-3000:]}"
        ) from None
