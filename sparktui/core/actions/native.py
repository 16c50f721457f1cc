"""The built-in plans of the native backend (`cluster.backend: native`, no Ray).

- restart: tear down; `docker run -d ... <image> sleep infinity` on every node in parallel
  (the container only holds the environment: `VLLM_HOST_IP=<node ip>`, `container.env`,
  the log directory mounted); wait until each runs and has `vllm` on its PATH.
- serve: (doctor first) `vllm serve <model> <args> --nnodes N --node-rank R --master-addr
  <head ip> [--master-port P]` detached in every node's container (`docker exec -d -e
  VLLM_HOST_IP=<node ip>`), the workers `--headless`, each rank's output appended to
  `vllm.log` on its own node; then wait for `/health` on the head while every worker's
  rank must keep running.

Every command is an argv; config values travel only as arguments.
"""

from __future__ import annotations

import asyncio
import posixpath
import re

from sparktui.config import Config, NodeConfig
from sparktui.core import native
from sparktui.core.actions.builtin import (
    HEALTH_SCRIPT,
    RUN_TIMEOUT,
    SERVE_SCRIPT,
    _has_flag,
    _teardown_stage,
    container_ip_env,
    serve_wait_verdict,
)
from sparktui.core.actions.plan import Plan, PlanError, Stage, Step
from sparktui.core.command import Command, sh
from sparktui.core.model import ClusterSnapshot, Finding
from sparktui.core.transport import Transport, TransportError
from sparktui.remote import script

IDLE = ("sleep", "infinity")  # the container's own process: vLLM is started by serve
READY_TIMEOUT = 60.0
READY_SCRIPT = script("native_ready.sh")  # $1 container
RANK_SCRIPT = script("native_rank.sh")  # $1 container, $2 log path


def docker_run_argv(cfg: Config, node: NodeConfig) -> list[str]:
    """`docker run -d ... <image> sleep infinity` for one node: no Ray."""
    c = node.container
    if not c.image:
        raise PlanError(f"node {node.name}: container.image is not set in the config")
    logdir = posixpath.dirname(cfg.vllm.log)
    return [
        "docker",
        "run",
        "-d",
        "--name",
        c.name,
        *c.run_args,
        *container_ip_env(node),
        "-v",
        f"{logdir}:{logdir}",
        c.image,
        *IDLE,
    ]


def restart_plan(cfg: Config) -> Plan:
    stages = [
        _teardown_stage(cfg),
        Stage(
            "start the containers",
            tuple(
                Step(
                    n.name,
                    f"start {n.container.name} (no Ray: vLLM's own multi-node mode)",
                    (
                        Command(
                            tuple(docker_run_argv(cfg, n)),
                            mutating=True,
                            timeout=RUN_TIMEOUT,
                            description="docker run -d: the container, idle until serve",
                        ),
                    ),
                )
                for n in cfg.nodes
            ),
        ),
        Stage(
            "wait for the containers",
            tuple(
                Step(
                    n.name,
                    f"wait until {n.container.name} runs and has vllm",
                    (sh(READY_SCRIPT, n.container.name, timeout=20),),
                    kind="wait",
                    timeout=READY_TIMEOUT,
                    interval=0.5,
                    until=f"container {n.container.name} running with `vllm` on its PATH",
                )
                for n in cfg.nodes
            ),
        ),
    ]
    warnings = [
        f"{n.name}: no ip in the config: its rank cannot be pinned (VLLM_HOST_IP)"
        for n in cfg.nodes
        if not n.ip
    ]
    return Plan(
        "restart",
        stages,
        warnings=warnings,
        title=f"Restart (native, no Ray): tear down, then the containers on "
        f"{len(cfg.nodes)} node(s)",
    )


def vllm_argv(cfg: Config, node: NodeConfig) -> list[str]:
    """One node's exact `vllm serve` command line: the configured model and args, then its
    rank's flags (`--port` only on the head, which serves the API)."""
    if not cfg.vllm.model:
        raise PlanError("vllm.model is not set in the config")
    if not cfg.head.ip:
        raise PlanError(
            f"the head ({cfg.head.name}) has no ip in the config: native mode "
            f"needs it as --master-addr"
        )
    given = native.given_rank_flags(cfg.vllm.args)
    if given:
        raise PlanError(
            f"vllm.args gives {', '.join(given)}: in native mode sparktui sets "
            f"{', '.join(native.RANK_FLAGS)} per node; remove them"
        )
    executor = native.parse_args(cfg.vllm.args).executor
    if executor not in (None, "mp"):
        raise PlanError(
            f"vllm.args has --distributed-executor-backend {executor}: native "
            f"mode runs vLLM's own multiprocessing executor (use mp, or leave it "
            f"out)"
        )
    argv = ["vllm", "serve", cfg.vllm.model, *cfg.vllm.args]
    if node.role == "head" and not _has_flag(cfg.vllm.args, "--port"):
        argv += ["--port", str(cfg.vllm.port)]
    return argv + native.rank_argv(cfg, node)


def serve_plan(cfg: Config) -> Plan:
    head = cfg.head
    order = [head, *cfg.workers]
    starts = []
    for n in order:
        rank = native.rank_of(cfg, n.name)
        # the rank announces its configured ip even in a container sparktui did not start
        pin = ("-e", f"VLLM_HOST_IP={n.ip}") if n.ip else ()
        starts.append(
            Step(
                n.name,
                f"start vllm serve rank {rank}{' (headless)' if n is not head else ''} in "
                f"{n.container.name} (log: {cfg.vllm.log} on {n.name})",
                (
                    Command(
                        (
                            "docker",
                            "exec",
                            "-d",
                            *pin,
                            n.container.name,
                            "sh",
                            "-c",
                            SERVE_SCRIPT,
                            "sh",
                            cfg.vllm.log,
                            *vllm_argv(cfg, n),
                        ),
                        mutating=True,
                        timeout=30,
                        description=f"docker exec -d: vllm serve rank {rank}, output to the log",
                    ),
                ),
            )
        )
    waits = [
        Step(
            head.name,
            f"wait for vLLM's /health on port {cfg.vllm.port}",
            (
                sh(
                    HEALTH_SCRIPT,
                    script("http_get.py"),
                    str(cfg.vllm.port),
                    head.container.name,
                    cfg.vllm.log,
                    timeout=20,
                ),
            ),
            kind="wait",
            verdict=serve_wait_verdict,
            timeout=cfg.vllm.health_timeout,
            interval=2.0,
            grace=2.0,
            sufficient=True,
            until=f"HTTP 200 from http://127.0.0.1:{cfg.vllm.port}/health on {head.name}",
        )
    ]
    waits += [
        Step(
            w.name,
            f"watch rank {native.rank_of(cfg, w.name)} (it must keep running)",
            (sh(RANK_SCRIPT, w.container.name, cfg.vllm.log, timeout=20),),
            kind="wait",
            timeout=cfg.vllm.health_timeout,
            interval=2.0,
            grace=2.0,
            until=f"the head's /health (fails if vllm serve on {w.name} exits)",
        )
        for w in cfg.workers
    ]
    return Plan(
        "serve",
        [Stage("start vLLM on every node", tuple(starts)), Stage("wait for /health", tuple(waits))],
        preflight=True,
        title=f"Serve {cfg.vllm.model} (native, {len(cfg.nodes)} nodes, no Ray): rank 0 "
        f"on {head.name}",
    )


# --------------------------------------------------------------------------- doctor

REACH_SCRIPT = script("native_reach.sh")  # $1 container, $2 addr, $3 port, $4 reach.py
_ROUTE = re.compile(r"\bdev (?P<dev>\S+).*?\bsrc (?P<src>\S+)")


def reach_command(cfg: Config, node: NodeConfig) -> Command:
    port = cfg.vllm.master_port or native.NATIVE_MASTER_PORT
    return sh(
        REACH_SCRIPT,
        node.container.name,
        str(cfg.head.ip),
        str(port),
        script("reach.py"),
        timeout=20,
        description="doctor: route and TCP to rank 0's rendezvous",
    )


def parse_reach(text: str) -> tuple[str | None, str | None, str]:
    """native_reach.sh's output -> (route device, route source ip, tcp verdict)."""
    dev = src = None
    tcp = "error: no answer"
    for line in text.splitlines():
        if line.startswith("route ") and (m := _ROUTE.search(line)):
            dev, src = m["dev"], m["src"]
        elif line.startswith("tcp "):
            tcp = line[4:].strip()
    return dev, src, tcp


def config_findings(cfg: Config) -> list[Finding]:
    """What the config alone says is wrong for native mode."""
    out = []
    nodes = len(cfg.nodes)
    world = cfg.vllm.parallel_size()
    if nodes > 1 and world % nodes:
        out.append(
            Finding(
                "native-nnodes-indivisible",
                "error",
                None,
                f"--nnodes {nodes} (one rank per configured node) does not divide the world size "
                f"{world} (TP x PP in vllm.args)",
                fix=f"Make TP x PP a multiple of {nodes} in vllm.args, or change the nodes.",
            )
        )
    try:
        vllm_argv(cfg, cfg.head)
    except PlanError as e:
        out.append(
            Finding(
                "native-serve-config",
                "error",
                None,
                str(e),
                fix="Fix vllm in the config; `sparktui serve --dry-run` shows each "
                "node's command line.",
            )
        )
    return out


async def doctor_findings(
    cfg: Config,
    snap: ClusterSnapshot,
    transports: dict[str, Transport],
    listening: dict[str, set[int]],
) -> list[Finding]:
    """Doctor's native checks: the config, every rank's route and TCP path to rank 0's
    master address and port, the port free on the head before serve, and (while vLLM runs)
    whether the ranks' logs agree on the rendezvous."""
    from sparktui.core.actions import serve_log_text

    out = config_findings(cfg)
    head = cfg.head
    port = cfg.vllm.master_port or native.NATIVE_MASTER_PORT
    head_state = snap.node(head.name)
    head_serving = head_state is not None and native.node_args(head_state) is not None
    if port in listening.get(head.name, set()) and not head_serving:
        out.append(
            Finding(
                "port-busy",
                "error",
                head.name,
                f"port {port} (vLLM's --master-port, rank 0's rendezvous) is already in use on "
                f"{head.name}, and no vllm serve runs there",
                fix=f"Find the process (ss -ltnp 'sport = :{port}' on {head.name}) and stop it, "
                f"or set vllm.master_port.",
            )
        )
    if not head.ip:
        return out
    reachable = [
        w
        for w in cfg.workers
        if (st := snap.node(w.name)) is not None and st.reachable and w.name in transports
    ]

    async def reach(w: NodeConfig) -> tuple[NodeConfig, str]:
        try:
            r = await transports[w.name].run(reach_command(cfg, w))
            return w, r.stdout
        except TransportError as e:
            return w, f"tcp error: {e}"

    for w, text in await asyncio.gather(*(reach(w) for w in reachable)):
        dev, src, tcp = parse_reach(text)
        if tcp in ("timeout", "unreachable") or tcp.startswith("error"):
            out.append(
                Finding(
                    "native-master-unreachable",
                    "error",
                    w.name,
                    f"{w.name} cannot reach rank 0's rendezvous {head.ip}:{port} on {head.name} "
                    f"(TCP: {tcp})",
                    fix=f"Check the interconnect between {w.name} and {head.name} (ping {head.ip} "
                    f"from {w.name}) and that {head.ip} is {head.name}'s interconnect ip.",
                    captures={"master_addr": head.ip, "port": str(port)},
                )
            )
        if src and w.ip and src != w.ip:
            out.append(
                Finding(
                    "native-route-not-interconnect",
                    "warning",
                    w.name,
                    f"{w.name} reaches {head.ip} via {dev} from {src}, not from its configured ip "
                    f"{w.ip}: the ranks' traffic leaves by another interface",
                    fix=f"Make {head.ip} reachable over the interconnect from {w.name} (a route "
                    f"via the interface that holds {w.ip}), or fix the ips in the config.",
                )
            )
    running = [n for n in snap.nodes if native.node_args(n) is not None]
    if running:
        names = [n.name for n in cfg.nodes]
        texts = await asyncio.gather(*(serve_log_text(cfg, transports, n) for n in names))
        out += native.rendezvous_findings(
            cfg,
            {n: native.rendezvous_of(t.splitlines()) for n, t in zip(names, texts, strict=True)},
        )
    return out
