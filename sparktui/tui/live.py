"""The live Backend: the real Monitor, log follower, knowledge base and actions layer.

Nothing here decides anything the CLI does not: snapshots and checks come from the
Monitor, log findings from `sparktui.knowledge` (matcher, triage, live join), plans and
runs from `sparktui.core.actions`. Actions share the monitor's transports (one connection
per node); a read-only config makes those transports refuse every mutating command.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from sparktui.core.model import ClusterSnapshot, Finding
from sparktui.tui.backend import (
    ActionOutcome,
    Backend,
    Emit,
    LogMark,
    PlanLine,
    PlanView,
    Progress,
)

if TYPE_CHECKING:
    from sparktui.config import Config
    from sparktui.core.actions import ActionEvent, Plan
    from sparktui.core.logs import FileFollower
    from sparktui.core.monitor import Monitor


def plan_view(plan: Plan) -> PlanView:
    """A core Plan as the confirmation dialog shows it: per step and node, exact commands."""
    from sparktui.core.actions.plan import shell_masked

    lines = []
    for _i, stage, step in plan.steps:
        what = step.description
        if step.kind == "wait":
            what += f" (every {step.interval:g}s, up to {step.timeout:g}s"
            what += f", until {step.until})" if step.until else ")"
        lines.append(
            PlanLine(stage.name, step.node, what, tuple(shell_masked(c) for c in step.commands))
        )
    return PlanView(
        plan.action,
        plan.title or plan.action,
        plan.mutating,
        lines,
        list(plan.warnings),
        plan.preflight,
    )


def _workers_key(snap: ClusterSnapshot) -> tuple:
    """What the nodes' Ray worker logs depend on: each node's containers and vLLM process,
    and the nodes Ray knows."""
    return (
        tuple(
            (n.name, n.reachable, n.vllm_pid, tuple((c.id, c.state) for c in n.containers))
            for n in snap.nodes
        ),
        tuple(sorted((r.node_id, r.alive) for r in snap.ray_nodes)),
    )


class LiveBackend(Backend):
    def __init__(
        self, cfg: Config, *, read_only: bool = False, monitor: Monitor | None = None
    ) -> None:
        super().__init__(cfg, read_only=read_only)
        from sparktui.core.monitor import Monitor
        from sparktui.knowledge import Diagnosis, Matcher, load_for_config

        self.monitor = monitor or Monitor(cfg, read_only=self.read_only, resident=True)
        kb = load_for_config(cfg)
        self._matcher = Matcher(kb)
        self._scanner = self._matcher.scanner(1)
        self._diagnosis = Diagnosis(kb)
        self._follower: FileFollower | None = None
        self._followers: list[FileFollower] = []  # native: one per rank
        self._hit_nodes: dict[int, str] = {}  # matched line -> the node whose log it is
        self._all_logs = asyncio.Event()  # set: every node's logs follow too (Ray backend)
        # set: list the nodes' Ray worker logs again now (their vLLM or container changed)
        self._relist_logs = asyncio.Event()
        self._workers_key: tuple | None = None

    async def refresh(self) -> ClusterSnapshot:
        snap = await self.monitor.refresh(wait=self.cfg.refresh_interval)
        # once the monitor has really probed another node, its logs are followed too
        states = getattr(self.monitor, "states", {})
        if self.all_node_logs and any(
            s.reachable and s.probe_seconds is not None
            for name, s in states.items()
            if name != self.cfg.head.name
        ):
            self._all_logs.set()
        key = _workers_key(snap)
        if self._workers_key is not None and key != self._workers_key:
            self._relist_logs.set()
        self._workers_key = key
        return snap

    async def probe_now(self, node: str) -> ClusterSnapshot | None:
        probe = getattr(self.monitor, "probe_now", None)
        return await probe(node) if probe is not None else None

    def want_all_logs(self) -> None:
        self._all_logs.set()

    async def bundle(self, directory: str) -> str:
        import os

        from sparktui.core.bundle import build_bundle

        b = await build_bundle(self.cfg, self.monitor.transports)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{b.name}.tar.gz")
        b.write(path)
        return path

    @property
    def native_logs(self) -> bool:
        """The native backend (configured): every rank's log, on its own node, is followed."""
        return (
            self.cfg.backend_configured and self.cfg.backend == "native" and len(self.cfg.nodes) > 1
        )

    @property
    def all_node_logs(self) -> bool:
        """Ray backend, several nodes: every node's Ray logs follow with the head's vLLM log."""
        return not self.native_logs and len(self.cfg.nodes) > 1

    @property
    def log_label(self) -> str:
        if self.native_logs:
            return f"{self.cfg.vllm.log} on every node (one rank each)"
        return super().log_label

    async def follow_log(self) -> AsyncIterator[tuple[str, list[str], list[str]]]:
        from sparktui.core.logs import merge, vllm_log_follower

        if self.native_logs:
            from sparktui.core.native import rank_log_followers

            followers = rank_log_followers(self.cfg, self.monitor.transports)
            self._followers = followers
            async for batch in merge(followers):
                yield batch.node, list(batch.lines), list(batch.events)
            return
        follower = self._follower = vllm_log_follower(
            self.cfg, self.monitor.transports[self.cfg.head.name]
        )
        if self.all_node_logs:
            from sparktui.core.node_logs import follow_cluster_logs

            async for batch in follow_cluster_logs(
                self.cfg,
                self.monitor.transports,
                head=follower,
                others=self._all_logs,
                relist_now=self._relist_logs,
            ):
                yield batch.node, list(batch.lines), list(batch.events)
            return
        async for batch in follower.batches():
            yield batch.node, list(batch.lines), list(batch.events)

    def scan_log(self, lines: list[str], node: str | None = None) -> list[LogMark]:
        hits = self._scanner.feed_lines(lines)
        if not hits:
            return []
        if node is not None:
            for h in hits:
                self._hit_nodes[h.line] = node
        self._diagnosis.add(hits)
        return [
            LogMark(h.line, h.pattern.severity, h.pattern.id)
            for h in hits
            # a line is marked for a signature; weak hits (hints, signals, the fallback,
            # healthy markers) only matter to the whole log's diagnosis
            if h.pattern.role not in ("benign", "context", "hint", "signal", "fallback", "healthy")
        ]

    def log_findings(self, snapshot: ClusterSnapshot | None) -> list[Finding]:
        from dataclasses import replace

        from sparktui.knowledge import join

        out = []
        head = self.cfg.head.name
        for f in join(self._diagnosis.findings(), snapshot):
            where = self._hit_nodes.get(f.line) if f.line is not None else None
            # a line from another node's own log is that node's, whatever it names (the
            # head's vLLM log speaks for the whole cluster: its findings keep their node)
            if where is not None and where != head:
                f = replace(f, node=where)
            out.append(f)
        return out

    def plan(self, action: str) -> PlanView:
        from sparktui.core.actions import PlanError, build_plan

        try:
            return plan_view(build_plan(action, self.cfg))
        except PlanError as e:
            return PlanView(action, action, False, error=str(e))

    async def execute(self, action: str, emit: Emit) -> ActionOutcome:
        from sparktui.core.actions import run_action

        def on_event(ev: ActionEvent) -> None:
            emit(
                Progress(
                    ev.action, ev.step, ev.node, ev.description, ev.state, ev.message or ev.output
                )
            )

        result = await run_action(action, self.cfg, self.monitor.transports, on_event)
        return ActionOutcome(
            result.ok, result.message or result.state, list(result.findings), matrix=result.matrix
        )

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.stop()
        for f in self._followers:
            f.stop()
        await self.monitor.close()
