"""vLLM's native multi-node mode (`cluster.backend: native`): no Ray. Every node runs
`vllm serve <model> ... --nnodes N --node-rank R --master-addr <head ip> [--master-port P]`,
the workers with `--headless`; rank 0 (the head, which runs the API server) hosts the
torch.distributed rendezvous (a TCPStore on master-addr:master-port) that the other ranks
join.

Pure functions over the config, a node's vLLM argv (read by the probe from the container's
`/proc/<pid>/cmdline`) and the ranks' logs: the per-node command line, what a running rank
was started with, which backend the nodes show when the config does not say, and the live
checks of this mode.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sparktui.config import Config, NodeConfig
from sparktui.core.model import ClusterSnapshot, Finding, NodeState

NATIVE_MASTER_PORT = 29501  # vLLM's ParallelConfig.master_port default
# Flags sparktui sets per node in native mode; vllm.args must not give them.
RANK_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
_SHORT = {
    "-n": "--nnodes",
    "-r": "--node-rank",
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
}
_SHELLS = ("sh", "bash", "dash", "ash")


@dataclass(frozen=True)
class NativeArgs:
    """What one `vllm serve` process was started with (None: the flag is absent)."""

    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    headless: bool = False
    tp: int = 1
    pp: int = 1
    dp: int = 1
    executor: str | None = None  # --distributed-executor-backend

    @property
    def world_size(self) -> int:
        """DP x TP x PP: the ranks `--nnodes` must divide."""
        return self.dp * self.tp * self.pp

    @property
    def multi_node(self) -> bool:
        return (self.nnodes or 1) > 1

    @property
    def port(self) -> int:
        return self.master_port or NATIVE_MASTER_PORT

    @property
    def rendezvous(self) -> str:
        return f"{self.master_addr or '127.0.0.1'}:{self.port}"


def serve_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments after `serve` of a `vllm serve` command line (a shell's `-c` string is
    split first), or None when the argv runs no vLLM server."""
    argv = list(argv)
    if argv and argv[0].rsplit("/", 1)[-1] in _SHELLS and "-c" in argv:
        i = argv.index("-c")
        if i + 1 < len(argv):
            try:
                argv = shlex.split(argv[i + 1])
            except ValueError:
                argv = argv[i + 1].split()
    for i, a in enumerate(argv):
        if a == "serve" and i > 0 and "vllm" in argv[i - 1].rsplit("/", 1)[-1]:
            return argv[i + 1 :]
        if a.endswith("vllm.entrypoints.openai.api_server"):
            return argv[i + 1 :]
    return None


def parse_args(args: Sequence[str]) -> NativeArgs:
    """The native-mode flags of vLLM arguments (`--flag value` or `--flag=value`)."""
    values: dict[str, str] = {}
    headless = False
    i = 0
    args = list(args)
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        name = _SHORT.get(name, name)
        if name == "--headless":
            headless = val.lower() not in ("false", "0") if eq else True
        elif name.startswith("--") and name in (
            *RANK_FLAGS,
            "--tensor-parallel-size",
            "--pipeline-parallel-size",
            "--data-parallel-size",
            "--distributed-executor-backend",
        ):
            if eq:
                values[name] = val
            elif i + 1 < len(args):
                values[name] = args[i + 1]
                i += 1
        i += 1

    def num(flag: str, default: int | None) -> int | None:
        try:
            return int(values[flag]) if flag in values else default
        except ValueError:
            return default

    return NativeArgs(
        nnodes=num("--nnodes", None),
        node_rank=num("--node-rank", None),
        master_addr=values.get("--master-addr"),
        master_port=num("--master-port", None),
        headless=headless,
        tp=num("--tensor-parallel-size", 1) or 1,
        pp=num("--pipeline-parallel-size", 1) or 1,
        dp=num("--data-parallel-size", 1) or 1,
        executor=values.get("--distributed-executor-backend"),
    )


def node_args(node: NodeState) -> NativeArgs | None:
    """What the node's running `vllm serve` was started with; None when none runs."""
    if node.vllm_argv is None:
        return None
    rest = serve_args(node.vllm_argv)
    return parse_args(rest) if rest is not None else None


def rank_of(cfg: Config, name: str) -> int:
    """The rank sparktui gives a node: the head 0, the workers 1.. in config order."""
    order = [cfg.head.name] + [w.name for w in cfg.workers]
    return order.index(name)


def given_rank_flags(args: Sequence[str]) -> list[str]:
    """The per-node flags that `vllm.args` gives (sparktui sets them itself)."""
    out = []
    for a in args:
        name = _SHORT.get(a.partition("=")[0], a.partition("=")[0])
        if name in RANK_FLAGS and name not in out:
            out.append(name)
    return out


def rank_argv(cfg: Config, node: NodeConfig) -> list[str]:
    """The flags of one node's rank: `--nnodes N --node-rank R --master-addr <head ip>`
    (`--master-port P` when configured), `--headless` on the workers."""
    head = cfg.head
    argv = [
        "--nnodes",
        str(len(cfg.nodes)),
        "--node-rank",
        str(rank_of(cfg, node.name)),
        "--master-addr",
        str(head.ip),
    ]
    if cfg.vllm.master_port is not None:
        argv += ["--master-port", str(cfg.vllm.master_port)]
    if node.role != "head":
        argv.append("--headless")
    return argv


# --------------------------------------------------------------------------- the backend seen


def detect_backend(snapshot: ClusterSnapshot, container: dict[str, str]) -> tuple[str, str]:
    """Which backend the nodes show, and why, in words: `native` when a node's vLLM runs
    with `--nnodes` > 1; `ray` when a configured container runs `ray start` or Ray's table
    answered; else `ray` (the default) with nothing to go by. `container`: node -> the
    configured container name."""
    for n in snapshot.nodes:
        a = node_args(n)
        if a is not None and a.multi_node:
            return "native", f"vllm serve --nnodes {a.nnodes} runs on {n.name}"
    for n in snapshot.nodes:
        c = n.container(container.get(n.name))
        if c is not None and c.running and "ray start" in c.command:
            return "ray", f"container {c.name} on {n.name} runs ray start"
    if snapshot.ray_error is None and snapshot.ray_nodes:
        return "ray", f"Ray's node table answered on {snapshot.ray_source}"
    return "ray", "nothing on the nodes tells yet (the default)"


# --------------------------------------------------------------------------- live checks


def _owner(cfg: Config, ip: str | None) -> NodeConfig | None:
    return next((n for n in cfg.nodes if ip and n.ip == ip), None)


def check(snapshot: ClusterSnapshot, cfg: Config) -> list[Finding]:
    """The native mode's live findings: every rank's flags against the config, against
    each other, and VLLM_HOST_IP against each node's configured ip."""
    out: list[Finding] = []
    head = cfg.head
    nodes = len(cfg.nodes)
    ranks: dict[int, str] = {}
    running: list[str] = []
    idle: list[str] = []
    ports: dict[int, list[str]] = {}
    for n in snapshot.nodes:
        ncfg = cfg.node(n.name)
        if ncfg is None or not n.reachable:
            continue
        c = n.container(ncfg.container.name)
        if c is None or not c.running:
            continue
        host_ip = n.env.get("VLLM_HOST_IP")
        if host_ip and ncfg.ip and host_ip != ncfg.ip:
            owner = _owner(cfg, host_ip)
            where = f" (the ip of {owner.name})" if owner else " (not a configured ip)"
            out.append(
                Finding(
                    "vllm-host-ip-mismatch",
                    "error",
                    n.name,
                    f"VLLM_HOST_IP on {n.name} is {host_ip}{where}, the config says {ncfg.ip}: "
                    f"this rank would announce an address the others cannot use",
                    fix=f"Set VLLM_HOST_IP={ncfg.ip} in the container on {n.name} "
                    f"(sparktui restart sets it to each node's configured ip).",
                    captures={"vllm_host_ip": host_ip, "configured_ip": ncfg.ip},
                )
            )
        a = node_args(n)
        if a is None:
            idle.append(n.name)
            continue
        running.append(n.name)
        rank = a.node_rank or 0
        if not a.multi_node:
            if nodes > 1:
                out.append(
                    Finding(
                        "native-nnodes-mismatch",
                        "error",
                        n.name,
                        f"vllm serve on {n.name} runs without --nnodes (one node on its own), "
                        f"the config has {nodes} nodes",
                        fix=f"Serve with --nnodes {nodes} on every node (sparktui serve does).",
                    )
                )
            continue
        if a.nnodes != nodes:
            out.append(
                Finding(
                    "native-nnodes-mismatch",
                    "error",
                    n.name,
                    f"vllm serve on {n.name} has --nnodes {a.nnodes}, the config has {nodes} nodes",
                    fix=f"Serve with --nnodes {nodes} on every node (sparktui serve "
                    f"does), or list every node in the config.",
                    captures={"nnodes": str(a.nnodes)},
                )
            )
        if a.world_size % (a.nnodes or 1):
            out.append(
                Finding(
                    "native-nnodes-indivisible",
                    "error",
                    n.name,
                    f"--nnodes {a.nnodes} on {n.name} does not divide the world size "
                    f"{a.world_size} (DP {a.dp} x TP {a.tp} x PP {a.pp})",
                    fix="Make TP x PP (x DP) a multiple of the node count in vllm.args.",
                )
            )
        if rank in ranks:
            out.append(
                Finding(
                    "native-rank-conflict",
                    "error",
                    n.name,
                    f"{n.name} and {ranks[rank]} both run --node-rank {rank}",
                    fix="Give every node its own rank: the head 0, the workers 1.. (sparktui "
                    "serve does).",
                )
            )
        ranks.setdefault(rank, n.name)
        if (rank == 0) == a.headless:
            what = (
                "rank 0 runs --headless: no API server will start"
                if rank == 0
                else f"rank {rank} runs without --headless: it starts a second API server"
            )
            out.append(
                Finding(
                    "native-headless-mismatch",
                    "error",
                    n.name,
                    f"vllm serve on {n.name}: {what}",
                    fix="Only rank 0 (the head) serves the API; every other rank runs "
                    "--headless (sparktui serve does).",
                )
            )
        if rank == 0 and n.name != head.name:
            out.append(
                Finding(
                    "native-rank-conflict",
                    "error",
                    n.name,
                    f"{n.name} runs rank 0, but the config's head is {head.name}",
                    fix=f"Run rank 0 on {head.name} (its ip is the master address), or make "
                    f"{n.name} the head in the config.",
                )
            )
        addr = a.master_addr or "127.0.0.1"
        if head.ip and addr != head.ip:
            owner = _owner(cfg, addr)
            where = (
                f"{owner.name}'s ip"
                if owner
                else "not a configured ip"
                if not addr.startswith("127.")
                else "this node's own loopback"
            )
            out.append(
                Finding(
                    "native-master-addr-mismatch",
                    "error",
                    n.name,
                    f"vllm serve on {n.name} has --master-addr {addr} ({where}); rank 0 on "
                    f"{head.name} listens at {head.ip}:{a.port}",
                    fix=f"Serve with --master-addr {head.ip} (the head's configured ip) on every "
                    f"node (sparktui serve does).",
                    captures={"master_addr": addr, "head_ip": head.ip},
                )
            )
        ports.setdefault(a.port, []).append(n.name)
    if len(ports) > 1:
        listing = "; ".join(f"{p} on {', '.join(ns)}" for p, ns in sorted(ports.items()))
        out.append(
            Finding(
                "native-master-port-mismatch",
                "error",
                None,
                f"the ranks use different --master-port values ({listing})",
                fix="Use one --master-port on every node (vllm.master_port in the config).",
            )
        )
    if running and idle:
        out.extend(
            Finding(
                "native-rank-not-running",
                "error",
                name,
                f"vllm serve runs on {', '.join(running)} but not on {name}: rank "
                f"{rank_of(cfg, name)} never joins, rank 0 waits for it until its timeout",
                fix=f"See {name}'s own log ({cfg.vllm.log} on {name}), then sparktui restart "
                f"and sparktui serve (the ranks still running would wait for it).",
            )
            for name in idle
        )
    return out


# --------------------------------------------------------------------------- the ranks' logs

_INIT = re.compile(
    r"world_size=(?P<world>\d+) rank=(?P<rank>\d+) local_rank=\d+ "
    r"distributed_init_method=tcp://(?P<addr>[^\s,]+)"
)
_HEADLESS = re.compile(
    r"headless multiproc executor, with head node address (?P<addr>\S+?) "
    r"for torch\.distributed"
)
_LEADER = re.compile(
    r"DP group leader: node_rank=(?P<rank>\d+).*?master_addr=(?P<addr>[^,\s]+)"
    r".*?world_size=(?P<world>\d+)"
)


@dataclass
class Rendezvous:
    """What one rank's log says about the rendezvous it joined."""

    addresses: set[str] = field(default_factory=set)  # tcp://<addr> host:port
    world_sizes: set[int] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)  # global worker ranks on this node
    leader_addr: str | None = None  # rank 0's `master_addr=` (host only)

    @property
    def empty(self) -> bool:
        return not (self.addresses or self.world_sizes or self.leader_addr)


def rendezvous_of(lines: Iterable[str]) -> Rendezvous:
    """The rendezvous lines of one rank's vLLM log (vLLM 0.32's wording, captured on the
    lab: `world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://A:P`, the
    headless executor's `head node address A:P`, rank 0's `DP group leader: ...
    master_addr=A ... world_size=N`)."""
    r = Rendezvous()
    for line in lines:
        if "distributed_init_method=tcp://" in line and (m := _INIT.search(line)):
            r.addresses.add(m["addr"])
            r.world_sizes.add(int(m["world"]))
            r.ranks.add(int(m["rank"]))
        elif "headless multiproc executor" in line and (m := _HEADLESS.search(line)):
            r.addresses.add(m["addr"])
        elif "DP group leader" in line and (m := _LEADER.search(line)):
            r.leader_addr = m["addr"]
            r.world_sizes.add(int(m["world"]))
    return r


def rendezvous_findings(cfg: Config, logs: dict[str, Rendezvous]) -> list[Finding]:
    """Whether the ranks' logs agree: one rendezvous address (the head's configured ip and
    the master port), one world size, no rank twice."""
    seen = {name: r for name, r in logs.items() if not r.empty}
    if not seen:
        return []
    out: list[Finding] = []
    head = cfg.head
    port = cfg.vllm.master_port or NATIVE_MASTER_PORT
    want = f"{head.ip}:{port}" if head.ip else None
    addrs = {name: sorted(r.addresses) for name, r in seen.items() if r.addresses}
    distinct = {a for v in addrs.values() for a in v}
    if len(distinct) > 1 or (want and distinct and distinct != {want}):
        listing = "; ".join(f"{name}: {', '.join(v)}" for name, v in addrs.items())
        wrong = [name for name, v in addrs.items() if want and v != [want]]
        out.append(
            Finding(
                "native-rendezvous-disagree",
                "error",
                wrong[0] if len(wrong) == 1 else None,
                f"the ranks' logs disagree on the rendezvous ({listing})"
                + (f"; rank 0 listens at {want}" if want else ""),
                fix=f"Start every rank with --master-addr {head.ip} --master-port {port} "
                f"(sparktui serve does), then serve again.",
                captures={"expected": want or ""},
            )
        )
    worlds = {name: sorted(r.world_sizes) for name, r in seen.items() if r.world_sizes}
    if len({w for v in worlds.values() for w in v}) > 1:
        listing = "; ".join(f"{name}: {', '.join(map(str, v))}" for name, v in worlds.items())
        out.append(
            Finding(
                "native-rendezvous-disagree",
                "error",
                None,
                f"the ranks' logs disagree on the world size ({listing})",
                fix="Serve every node with the same vllm.args (TP, PP, DP) and --nnodes.",
            )
        )
    owners: dict[int, str] = {}
    for name, r in seen.items():
        for rank in sorted(r.ranks):
            if rank in owners and owners[rank] != name:
                out.append(
                    Finding(
                        "native-rank-conflict",
                        "error",
                        name,
                        f"the logs of {owners[rank]} and {name} both show worker rank {rank}",
                        fix="Give every node its own --node-rank (sparktui serve does).",
                    )
                )
            owners.setdefault(rank, name)
    return out


def rank_summary(node: NodeState) -> str:
    """One line for a node pane / `status`: its rank and whether its vllm serve runs."""
    if not node.reachable:
        return "unknown (unreachable)"
    a = node_args(node)
    if a is None:
        return "vllm serve not running"
    pid = f" (pid {node.vllm_pid})" if node.vllm_pid else ""
    if not a.multi_node:
        return f"vllm serve running{pid}, single node (no --nnodes)"
    role = "headless" if a.headless else "API server"
    return (
        f"rank {a.node_rank or 0}/{a.nnodes} · vllm serve running{pid} · {role} · "
        f"master {a.rendezvous}"
    )


def process_to_dict(node: NodeState) -> dict | None:
    """The `vllm_process` of a node in `status --json` (None: no vllm serve runs)."""
    a = node_args(node)
    if a is None:
        return None
    return {
        "pid": node.vllm_pid,
        "argv": list(node.vllm_argv or []),
        "nnodes": a.nnodes,
        "node_rank": a.node_rank,
        "master_addr": a.master_addr,
        "master_port": a.master_port,
        "headless": a.headless,
    }


def rank_log_followers(cfg: Config, transports: dict, **kw) -> list:
    """One follower of `vllm.log` per node (each rank writes its own on its own node), in
    rank order; `core.logs.merge` streams them tagged by node."""
    from sparktui.core.logs import FileFollower

    order = [cfg.head, *cfg.workers]
    return [FileFollower(transports[n.name], cfg.vllm.log, node=n.name, **kw) for n in order]


def backend_findings(snapshot: ClusterSnapshot, cfg: Config) -> list[Finding]:
    """A configured backend the nodes contradict (a warning): `ray` while a vllm serve runs
    with `--nnodes` > 1, or `native` while a container runs `ray start`."""
    if not cfg.backend_configured:
        return []
    containers = {n.name: n.container.name for n in cfg.nodes}
    for n in snapshot.nodes:
        a = node_args(n)
        if cfg.backend == "ray" and a is not None and a.multi_node:
            return [
                Finding(
                    "backend-mismatch",
                    "warning",
                    n.name,
                    f"cluster.backend is ray, but vllm serve on {n.name} runs vLLM's native "
                    f"multi-node mode (--nnodes {a.nnodes}, no Ray)",
                    fix="Set cluster.backend: native in the config (the Ray checks and actions "
                    "do not apply to this launch).",
                )
            ]
        c = n.container(containers.get(n.name))
        if cfg.backend == "native" and c is not None and c.running and "ray start" in c.command:
            return [
                Finding(
                    "backend-mismatch",
                    "warning",
                    n.name,
                    f"cluster.backend is native, but container {c.name} on {n.name} runs ray start",
                    fix="Set cluster.backend: ray in the config, or sparktui restart (native: "
                    "the containers without Ray).",
                )
            ]
    return []
