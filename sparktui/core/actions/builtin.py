"""The built-in plans (teardown, restart, serve, and doctor's read-only probes), from the
config alone. Every command is an argv; config values travel only as arguments."""

from __future__ import annotations

import posixpath
from functools import partial
from typing import Literal

from sparktui.config import Config, NodeConfig
from sparktui.core.actions.plan import Plan, PlanError, Stage, Step, Verdict
from sparktui.core.command import Command, Result, cmd, sh
from sparktui.core.phases import Timeline, merge_timelines, parse_phases
from sparktui.remote import script

# Bounded waits (seconds). TESTBED: a 2-node Ray cluster is alive in 5-12 s on a slow box.
GCS_TIMEOUT = 90.0
RAY_TIMEOUT = 180.0
RM_TIMEOUT = 60.0
RUN_TIMEOUT = 120.0  # docker run -d (image already on the node)
SERVE_MARKER_PREFIX = "=== sparktui serve "

# The node-side scripts (sparktui/remote/; positional parameters and exit codes are
# documented in each file). Exit 0 done, 1 not yet, 3 the container (or vLLM) is gone: the
# first three share _container_running.sh's check.
RAY_STARTED_SCRIPT = script("ray_started.sh")  # $1 container
GCS_SCRIPT = script("gcs_listening.sh")  # $1 container, $2 GCS port in hex, $3 in decimal
RAY_TABLE_SCRIPT = script("ray_table.sh")  # $1 container, $2 ray_nodes.py
SERVE_SCRIPT = script("serve.sh")  # in the container: $1 log path, then the vllm argv
HEALTH_SCRIPT = script("health.sh")  # $1 http_get.py, $2 vLLM port, $3 container


def container_ip_env(node: NodeConfig) -> list[str]:
    """`-e NAME=value` pairs for the container: VLLM_HOST_IP pinned to the node's ip, then
    the configured env (a configured VLLM_HOST_IP is replaced by the node's own)."""
    out: list[str] = []
    if node.ip:
        out += ["-e", f"VLLM_HOST_IP={node.ip}"]
    for k, v in node.container.env.items():
        if k == "VLLM_HOST_IP" and node.ip:
            continue
        out += ["-e", f"{k}={v}"]
    return out


def docker_run_argv(cfg: Config, node: NodeConfig) -> list[str]:
    """`docker run -d ... ray start --block ...` for one node (head or worker)."""
    c = node.container
    if not c.image:
        raise PlanError(f"node {node.name}: container.image is not set in the config")
    argv = ["docker", "run", "-d", "--name", c.name, *c.run_args, *container_ip_env(node)]
    is_head = node.role == "head"
    if is_head:
        logdir = posixpath.dirname(cfg.vllm.log)
        argv += ["-v", f"{logdir}:{logdir}"]
    argv += [c.image, "ray", "start", "--block"]
    if is_head:
        argv += ["--head"]
        if node.ip:
            argv += ["--node-ip-address", node.ip]
        argv += ["--port", str(cfg.ray.port)]
    else:
        head = cfg.head
        if not head.ip:
            raise PlanError(
                f"the head ({head.name}) has no ip in the config: workers need "
                f"it to join (--address <head ip>:{cfg.ray.port})"
            )
        argv += ["--address", f"{head.ip}:{cfg.ray.port}"]
        if node.ip:
            argv += ["--node-ip-address", node.ip]
    argv += cfg.ray.extra_args
    return argv


def _teardown_stage(cfg: Config) -> Stage:
    return Stage(
        "tear down",
        tuple(
            Step(
                n.name,
                f"remove container {n.container.name}",
                (
                    cmd(
                        "docker",
                        "rm",
                        "-f",
                        n.container.name,
                        mutating=True,
                        timeout=RM_TIMEOUT,
                        description="stop and remove the container",
                    ),
                ),
                verdict=_rm_verdict,
            )
            for n in cfg.nodes
        ),
    )


def _rm_verdict(result: Result) -> Verdict:
    if result.ok:  # `docker rm -f` prints the name it removed; nothing when there was none
        return "ok", "removed" if result.stdout.strip() else "already absent"
    if "no such container" in (result.stderr + result.stdout).lower():
        return "ok", "already absent"
    if result.timed_out:
        return "failed", f"timed out: {result.tail(10)}"
    return "failed", f"exit {result.exit_status}: {result.tail(10)}"


def teardown_plan(cfg: Config) -> Plan:
    return Plan(
        "teardown",
        [_teardown_stage(cfg)],
        title=f"Tear down: remove container(s) on {len(cfg.nodes)} node(s)",
    )


def _run_warnings(cfg: Config) -> list[str]:
    out = []
    for n in cfg.nodes:
        args = n.container.run_args
        joined = " ".join(args)
        if (
            "--network host" not in joined
            and "--network=host" not in joined
            and "--net=host" not in joined
            and "--net host" not in joined
        ):
            out.append(
                f"{n.name}: container.run_args has no '--network host': Ray would "
                f"register the container's own address"
            )
        if not n.ip:
            out.append(
                f"{n.name}: no ip in the config: Ray and vLLM pick the default-route "
                f"address (not pinned)"
            )
    return out


def ray_ready_verdict(cfg: Config, result: Result) -> Verdict:
    """Every configured node alive in Ray under its configured ip, and GPUs >= TP x PP."""
    from sparktui.core.probes.ray import dedupe_by_ip, parse_ray_nodes

    if result.exit_status == 3:
        return "failed", result.tail(15)
    nodes, error = parse_ray_nodes(result.stdout)
    if error:
        return "pending", error
    alive = [r for r in dedupe_by_ip(nodes) if r.alive]
    ips = {r.ip for r in alive}
    missing = [n for n in cfg.nodes if n.ip and n.ip not in ips]
    unpinned = [n for n in cfg.nodes if not n.ip]
    gpus = sum(r.gpus for r in alive)
    need = cfg.vllm.parallel_size()
    have = f"{len(alive)}/{len(cfg.nodes)} alive ({', '.join(sorted(ips)) or 'none'}), {gpus:g} GPU"
    if missing:
        return "pending", f"{have}; waiting for " + ", ".join(
            f"{n.name} at {n.ip}" for n in missing
        )
    if len(alive) < len(cfg.nodes) and unpinned:
        return "pending", f"{have}; waiting for {len(cfg.nodes) - len(alive)} more node(s)"
    if need > 1 and gpus < need:
        return "pending", f"{have}; vLLM needs {need} GPUs (TP x PP)"
    return "ok", have


def non_carry_over_names(cfg: Config) -> list[str]:
    """The NCCL_/UCX_/GLOO_ variables whose configured values differ between nodes: vLLM's
    Ray executor would copy the head's onto every worker unless they are listed in
    ray_non_carry_over_env_vars.json (doctor's nccl-env-overwritten)."""
    from sparktui.core.actions.fabric import differing_env

    if len(cfg.nodes) < 2:
        return []
    return differing_env(cfg, {n.name: dict(n.container.env) for n in cfg.nodes})


def restart_plan(cfg: Config) -> Plan:
    head = cfg.head
    stages = [_teardown_stage(cfg)]
    stages.append(
        Stage(
            "start the Ray head",
            (
                Step(
                    head.name,
                    f"start {head.container.name} running the Ray head",
                    (
                        Command(
                            tuple(docker_run_argv(cfg, head)),
                            mutating=True,
                            timeout=RUN_TIMEOUT,
                            description="docker run -d: ray start --head",
                        ),
                    ),
                ),
            ),
        )
    )
    stages.append(
        Stage(
            "wait for the GCS",
            (
                Step(
                    head.name,
                    "wait for the Ray head (GCS) to start",
                    (
                        sh(
                            GCS_SCRIPT,
                            head.container.name,
                            f"{cfg.ray.port:04X}",
                            str(cfg.ray.port),
                            timeout=20,
                        ),
                    ),
                    kind="wait",
                    timeout=GCS_TIMEOUT,
                    interval=0.25,
                    until=f"the GCS port {cfg.ray.port} listening on {head.name} (or 'Ray runtime "
                    f"started' in the head container's output)",
                ),
            ),
        )
    )
    if cfg.workers:
        stages.append(
            Stage(
                "start the Ray workers",
                tuple(
                    Step(
                        w.name,
                        f"start {w.container.name} joining {head.ip}:{cfg.ray.port}",
                        (
                            Command(
                                tuple(docker_run_argv(cfg, w)),
                                mutating=True,
                                timeout=RUN_TIMEOUT,
                                description="docker run -d: ray start --address",
                            ),
                        ),
                    )
                    for w in cfg.workers
                ),
            )
        )
    keep = non_carry_over_names(cfg)
    if keep:
        stages.append(
            Stage(
                "keep per-node NCCL/UCX/GLOO values",
                tuple(
                    Step(
                        n.name,
                        f"write {', '.join(keep)} to ray_non_carry_over_env_vars.json in "
                        f"{n.container.name}",
                        (
                            Command(
                                (
                                    "docker",
                                    "exec",
                                    n.container.name,
                                    "python3",
                                    "-c",
                                    script("non_carry_over.py"),
                                    *keep,
                                ),
                                mutating=True,
                                timeout=30,
                                description="$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json: vLLM "
                                "does not copy the head's values of these to the workers",
                            ),
                        ),
                    )
                    for n in cfg.nodes
                ),
            )
        )
    if cfg.workers:
        # Cheap (docker logs) and CPU-light: the expensive Ray table below runs Python in
        # the head container, which on a small box competes with the raylets starting.
        stages.append(
            Stage(
                "wait for the workers' raylets",
                tuple(
                    Step(
                        w.name,
                        "wait for the worker's raylet to start",
                        (sh(RAY_STARTED_SCRIPT, w.container.name, timeout=20),),
                        kind="wait",
                        timeout=RAY_TIMEOUT,
                        interval=0.25,
                        until="'Ray runtime started' in the worker container's output",
                    )
                    for w in cfg.workers
                ),
            )
        )
    need = cfg.vllm.parallel_size()
    stages.append(
        Stage(
            "wait for the Ray cluster",
            (
                Step(
                    head.name,
                    "wait until Ray lists every node alive under its configured ip",
                    (
                        sh(
                            RAY_TABLE_SCRIPT,
                            head.container.name,
                            script("ray_nodes.py"),
                            timeout=30,
                        ),
                    ),
                    kind="wait",
                    timeout=RAY_TIMEOUT,
                    interval=0.5,
                    verdict=partial(ray_ready_verdict, cfg),
                    until=f"{len(cfg.nodes)} alive Ray nodes at "
                    + ", ".join(n.ip or f"{n.name}(any ip)" for n in cfg.nodes)
                    + (f", >= {need} GPUs" if need > 1 else ""),
                ),
            ),
        )
    )
    return Plan(
        "restart",
        stages,
        warnings=_run_warnings(cfg),
        title=f"Restart: tear down, then Ray head on {head.name}"
        + (f" and {len(cfg.workers)} worker(s)" if cfg.workers else "")
        + " pinned to the configured ips",
    )


def vllm_argv(cfg: Config) -> list[str]:
    """`vllm serve <model> <args>`, with `--port` from vllm.port unless args give one."""
    if not cfg.vllm.model:
        raise PlanError("vllm.model is not set in the config")
    argv = ["vllm", "serve", cfg.vllm.model, *cfg.vllm.args]
    if not _has_flag(cfg.vllm.args, "--port"):
        argv += ["--port", str(cfg.vllm.port)]
    return argv


def _has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


class ServeWait:
    """The /health wait's verdict (exit 0 ready, 1 not yet, else failed), its message led by
    the start-up phase read from the log tail health.sh appends (core/phases.py): serve
    prints each phase as it passes, and a timeout or a death says where start-up stopped.
    One per plan: it remembers the phase seen, so a tail that no longer reaches the phase's
    first lines does not go back."""

    def __init__(self) -> None:
        self.timeline: Timeline | None = None

    def __call__(self, result: Result) -> Verdict:
        from dataclasses import replace

        from sparktui.core.actions.plan import exit_verdict

        own, sep, log = result.stdout.partition(LOG_SEPARATOR)
        verdict, msg = exit_verdict(replace(result, stdout=own))
        if not sep or verdict == "ok":
            return verdict, msg
        lines = log.split("\n")[1:]  # the tail starts inside a line
        self.timeline = tl = merge_timelines(self.timeline, parse_phases(lines))
        if tl.phase is None:
            return verdict, msg
        return _phase_message(verdict, msg, own, tl)


def serve_wait_verdict(result: Result) -> Verdict:
    """ServeWait for one result alone (no memory of earlier polls)."""
    return ServeWait()(result)


def _phase_message(
    verdict: Literal["ok", "pending", "failed"], msg: str, own: str, tl: Timeline
) -> Verdict:
    status = own.strip().splitlines()[-1] if own.strip() else ""
    if verdict == "pending":
        return verdict, f"phase: {tl.describe()}" + (f" ({status})" if status else "")
    return verdict, f"{msg} (start-up phase: {tl.describe()})"


LOG_SEPARATOR = "@@sparktui:log@@\n"


def serve_plan(cfg: Config) -> Plan:
    head = cfg.head
    c = head.container.name
    start = Command(
        ("docker", "exec", "-d", c, "sh", "-c", SERVE_SCRIPT, "sh", cfg.vllm.log, *vllm_argv(cfg)),
        mutating=True,
        timeout=30,
        description="docker exec -d: vllm serve, output to the log",
    )
    return Plan(
        "serve",
        [
            Stage(
                "start vLLM",
                (Step(head.name, f"start vllm serve in {c} (log: {cfg.vllm.log})", (start,)),),
            ),
            Stage(
                "wait for /health",
                (
                    Step(
                        head.name,
                        f"wait for vLLM's /health on port {cfg.vllm.port}",
                        (
                            sh(
                                HEALTH_SCRIPT,
                                script("http_get.py"),
                                str(cfg.vllm.port),
                                c,
                                cfg.vllm.log,
                                timeout=20,
                            ),
                        ),
                        kind="wait",
                        verdict=ServeWait(),
                        timeout=cfg.vllm.health_timeout,
                        interval=2.0,
                        grace=2.0,
                        until=f"HTTP 200 from http://127.0.0.1:{cfg.vllm.port}/health on {head.name}",
                    ),
                ),
            ),
        ],
        preflight=True,
        title=f"Serve {cfg.vllm.model} on {head.name}",
    )
