"""The monitor: probes every node concurrently, one combined probe command per node per
tick, and turns the answers into a ClusterSnapshot with findings.

A slow or dead node never delays the others: each node is probed by its own task; a tick
waits at most `wait` seconds, and a node still in flight keeps its last state. A node silent
for more than 1.5 refresh intervals (plus the Ray query's allowance on the head) is shown
unreachable ("no answer for Ns") until it answers: a cut cable hangs a TCP connection for
as long as keepalive allows, and the operator must see it within two refreshes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from sparktui.config import Config
from sparktui.core import checks
from sparktui.core.command import Result
from sparktui.core.lifecycle import Lifecycle
from sparktui.core.model import (
    ClusterSnapshot,
    NodeState,
    PlacementGroup,
    RayDemand,
    RayView,
    VllmStatus,
    sort_findings,
)
from sparktui.core.phases import parse_log_tail
from sparktui.core.probe_reuse import APPS_EVERY_RESIDENT, ENV_MAX_AGE_RESIDENT, ProbeReuse
from sparktui.core.probes import script as probe_script
from sparktui.core.probes.ray import dedupe_by_ip
from sparktui.core.resident import ResidentProbes
from sparktui.core.safe_text import clean_text, sanitize
from sparktui.core.ssh import transport_for
from sparktui.core.transport import Transport, TransportError

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 262144  # the end of vllm.log read for the start-up phase, while not healthy

RAY_ALLOWANCE = 8.0  # the head's Ray query may take this long before it counts as silence
RAY_EVERY = 3  # the Ray table costs ~1 s of Python in the head container: every Nth tick
# ... unless the head lists who is connected to Ray's GCS: then only when that (or a node's
# reachability, or a Ray container) changed since the table was read, or it is this old
RAY_MAX_AGE = 120.0
# Above this many nodes a tick's probes start spread over STAGGER seconds (at most a quarter
# of the refresh interval) instead of all at once: their answers, parsed and drawn, then
# arrive spread out too, and the console keeps answering keys.
STAGGER_FROM = 8
STAGGER = 0.5


def _fresh_state(cfg: Config, name: str) -> NodeState:
    n = cfg.node(name)
    assert n is not None
    return NodeState(name=n.name, host=n.host, role=n.role, configured_ip=n.ip)


class Monitor:
    def __init__(
        self,
        cfg: Config,
        transports: dict[str, Transport] | None = None,
        *,
        read_only: bool | None = None,
        resident: bool = False,
    ) -> None:
        """`resident`: probe each node through a bash that stays between ticks
        (core/resident.py), for a long run such as the console."""
        self.cfg = cfg
        ro = cfg.read_only if read_only is None else read_only
        self.transports: dict[str, Transport] = transports or {
            n.name: transport_for(n, read_only=ro) for n in cfg.nodes
        }
        self.states: dict[str, NodeState] = {n.name: _fresh_state(cfg, n.name) for n in cfg.nodes}
        self._tasks: dict[str, asyncio.Task] = {}
        self._started: dict[str, float] = {}
        self._allowance: dict[str, float] = {}
        self.tick = 0
        self._ray_nodes: list = []
        self._ray_error: str | None = "not read yet"
        self._ray_source: str | None = None
        self._ray_via: str | None = None  # dashboard | python: how the table was last read
        self._ray_read_at: float | None = None
        self._ray_key_read: tuple | None = None  # _ray_key() when the table was last read
        self._gcs_peers: tuple[str, ...] | None = None  # from the head's last probe
        # what Ray cannot place (read with the table), and when each group was first seen
        self._ray_pgs: list[PlacementGroup] = []
        self._ray_demands: list[RayDemand] = []
        self._ray_pending_error: str | None = None
        self._pg_first_seen: dict[str, float] = {}
        self._vllm = VllmStatus()
        self._last_tokens: tuple[float, float] | None = None
        self.lifecycle = Lifecycle(cfg.vllm.stall_seconds)  # phases, stalls, latency
        self.probe_timeout = 60.0  # the probe command has its own, shorter timeout
        self.resident = ResidentProbes(cfg.refresh_interval) if resident else None
        # what a probe may skip (env, GPU processes) and keeps
        self._reuse = (
            ProbeReuse(APPS_EVERY_RESIDENT, ENV_MAX_AGE_RESIDENT) if resident else ProbeReuse()
        )
        self.last_probe: dict[str, probe_script.ProbeResult] = {}  # each node's last answer
        # the configured backend, else the last one seen on the nodes (native: Ray not asked)
        self._backend_seen: str = cfg.backend
        # at most probe_concurrency probes in flight; a node's silence counts from its turn
        self._slots = asyncio.Semaphore(cfg.probe_concurrency)
        self.in_flight = 0
        self.max_in_flight = 0  # the most probes seen in flight at once (tests, bench)

    # ------------------------------------------------------------------ one node

    async def _probe_after(self, delay: float, name: str, with_ray: bool) -> NodeState:
        """`_probe`, `delay` seconds from now (a tick's probes spread above STAGGER_FROM)."""
        if delay > 0:
            await asyncio.sleep(delay)
        return await self._probe(name, with_ray)

    async def _probe(self, name: str, with_ray: bool) -> NodeState:
        ncfg = self.cfg.node(name)
        assert ncfg is not None
        transport = self.transports[name]
        state = _fresh_state(self.cfg, name)
        gpu_queries, env_key = self._reuse.args(name, time.monotonic())
        want_phase = ncfg.role == "head" and not (
            self._vllm.healthy and self.lifecycle.timeline is not None
        )
        command = probe_script.build_probe(
            name,
            ncfg.container.name,
            is_head=ncfg.role == "head",
            vllm_port=self.cfg.vllm.port,
            query_ray=with_ray,
            ray_dashboard_port=self.cfg.ray.dashboard_port,
            gcs_port=self.cfg.ray.port,
            vllm_log=self.cfg.vllm.log if want_phase else None,
            vllm_log_bytes=LOG_TAIL_BYTES,
            gpu_queries=gpu_queries,
            env_key=env_key,
        )
        result: Result | TransportError
        async with self._slots:
            start = self._started[name] = time.monotonic()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if self.resident is not None:
                    result = await self.resident.run(name, transport, command)
                else:
                    result = await transport.run(command)
            except TransportError as e:
                result = e
            finally:
                self.in_flight -= 1
        if isinstance(result, TransportError):
            self._reuse.forget(name)
            state.reachable = False
            state.error = str(result).removeprefix(f"{name}: ")
            return state
        state.probe_seconds = time.monotonic() - start
        if result.timed_out:
            self._reuse.forget(name)
            state.reachable = False
            state.error = f"probe timed out after {command.timeout:g}s"
            return state
        parsed = probe_script.parse_probe(result.stdout)
        if not parsed.sections:
            self._reuse.forget(name)
            state.reachable = False
            state.error = (
                f"probe failed (exit {result.exit_status}): {result.tail(2) or 'no output'}"
            )
            return state
        self._reuse.merge(name, parsed, time.monotonic())
        self.last_probe[name] = parsed
        parsed.apply_to(state)
        if ncfg.role == "head":
            self._gcs_peers = parsed.gcs_peers
            if parsed.ray_nodes is not None or parsed.ray_error:
                self._ray_nodes = sanitize(dedupe_by_ip(parsed.ray_nodes or []))
                self._ray_error = parsed.ray_error and clean_text(parsed.ray_error)
                self._ray_source = name
                self._ray_via = parsed.ray_source
                self._ray_read_at = time.monotonic()
                self._ray_key_read = self._ray_key(state)
                self._read_pending(parsed)
            self._vllm = sanitize(self._vllm_status(parsed))
            self._read_phase(parsed.vllm_log_tail)
            self.lifecycle.feed_status(self._vllm, time.monotonic())
        return state

    def _read_pending(self, parsed: probe_script.ProbeResult) -> None:
        """The placement groups and pending demands read with the Ray table; a group's age
        is the head's own figure (dashboard) or, without one, since this monitor first saw
        it."""
        now = time.monotonic()
        pgs = sanitize(parsed.ray_pgs or [])
        seen = {}
        for pg in pgs:
            first = seen[pg.pg_id] = self._pg_first_seen.get(pg.pg_id, now)
            pg.age_s = max(pg.age_s or 0.0, now - first)
        self._pg_first_seen = seen
        self._ray_pgs = pgs
        self._ray_demands = sanitize(parsed.ray_demands or [])
        self._ray_pending_error = parsed.ray_pending_error and clean_text(parsed.ray_pending_error)

    def _read_phase(self, tail: str | None) -> None:
        """While vLLM is not healthy (and once at the start), the end of its log on the head,
        read by the same probe, gives the start-up phase."""
        if tail is None:
            return
        tl, mtime = parse_log_tail(tail)
        if tl is not None:
            self.lifecycle.feed_timeline(sanitize(tl), time.monotonic(), mtime)

    def _vllm_status(self, parsed) -> VllmStatus:
        v = parsed.vllm if parsed.vllm is not None else VllmStatus()
        total = v.generation_tokens_total
        now = time.monotonic()
        if total is not None:
            if self._last_tokens is not None and now > self._last_tokens[0]:
                dt = now - self._last_tokens[0]
                v.tokens_per_s = max(0.0, (total - self._last_tokens[1]) / dt)
            self._last_tokens = (now, total)
        else:
            self._last_tokens = None
        return v

    async def probe_now(self, name: str) -> ClusterSnapshot:
        """Probe one node at once (the one the operator selected, a failing one) instead
        of at its next tick, and return the snapshot with its answer; a probe of it
        already in flight is awaited instead."""
        if name not in self.states:
            return self.snapshot()
        task = self._tasks.get(name)
        if task is None or task.done():
            self._started[name] = time.monotonic()
            task = self._tasks[name] = asyncio.create_task(
                asyncio.wait_for(self._probe(name, False), self.probe_timeout)
            )
        try:
            self.states[name] = sanitize(await asyncio.shield(task))
        except Exception:  # the next tick reports it as usual
            log.debug("on-demand probe of %s failed", name, exc_info=True)
        return self.snapshot()

    # ------------------------------------------------------------------ ticks

    def _ray_key(self, head_state: NodeState | None = None) -> tuple:
        """What the Ray table depends on, as the probes see it: the GCS's remote peers, each
        node's reachability and its Ray container (id, state)."""
        key: list = [self._gcs_peers]
        for name, st in self.states.items():
            if head_state is not None and name == head_state.name:
                st = head_state
            c = self.cfg.node(name)
            cname = c.container.name if c is not None else None
            key.append(
                (
                    name,
                    st.reachable,
                    tuple((x.id, x.state) for x in st.containers if x.name == cname),
                )
            )
        return tuple(key)

    def _want_ray(self) -> bool:
        """Whether this tick asks for the Ray table. Without the GCS peer list (old probe,
        no awk, Ray not on the host network) or with the dashboard answering (cheap), every
        RAY_EVERY ticks; else when what it depends on changed, after an error, or when the
        table is RAY_MAX_AGE old: no Python start in the container on an idle cluster."""
        every = self.tick % RAY_EVERY == 0
        if self._gcs_peers is None or self._ray_via == "dashboard" or self._ray_error:
            return every
        if self._watch_pending():
            return every
        if self._ray_read_at is None or time.monotonic() - self._ray_read_at >= RAY_MAX_AGE:
            return True
        return self._ray_key() != self._ray_key_read

    def _watch_pending(self) -> bool:
        """While something waits on Ray (a placement group or demand not placed) or vLLM is
        starting on the head (it asks for its placement group then), the table and what Ray
        cannot place are read every RAY_EVERY ticks: a GCS client on the head itself does
        not change the peer list."""
        if any(p.pending for p in self._ray_pgs) or self._ray_demands:
            return True
        head = self.states.get(self.cfg.head.name)
        return bool(head and head.vllm_argv is not None and not self._vllm.healthy)

    async def refresh(
        self, *, wait: float | None = None, with_ray: bool | None = None
    ) -> ClusterSnapshot:
        """Start a probe on every idle node, wait up to `wait` seconds (None: until all
        finish), and return the snapshot of what is known now."""
        if with_ray is None:
            with_ray = self._want_ray()
        if self._backend_seen == "native":
            with_ray = False  # no Ray in this mode: its table is never asked for
        self.tick += 1
        n = len(self.states)
        step = min(STAGGER, self.cfg.refresh_interval / 4) / n if n > STAGGER_FROM else 0.0
        for i, name in enumerate(self.states):
            task = self._tasks.get(name)
            if task is None or task.done():
                self._started[name] = time.monotonic()
                is_head = name == self.cfg.head.name
                self._allowance[name] = RAY_ALLOWANCE if (with_ray and is_head) else 0.0
                self._tasks[name] = asyncio.create_task(
                    asyncio.wait_for(
                        self._probe_after(i * step, name, with_ray), self.probe_timeout
                    )
                )
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=wait)
        now = time.monotonic()
        for name, task in self._tasks.items():
            if not task.done():
                silent = now - self._started[name]
                limit = self.cfg.refresh_interval * 1.5 + self._allowance.get(name, 0.0)
                if silent > limit and self.states[name].reachable:
                    self.states[name].reachable = False
                    self.states[name].error = f"no answer for {silent:.0f}s"
                continue
            try:
                self.states[name] = sanitize(task.result())  # node text: terminal-safe
            except (asyncio.TimeoutError, TimeoutError):
                s = _fresh_state(self.cfg, name)
                s.error = f"no answer within {self.probe_timeout:g}s"
                self.states[name] = s
            except Exception as e:  # a probe bug must not take the monitor down
                s = _fresh_state(self.cfg, name)
                s.reachable = False
                s.error = clean_text(f"probe failed: {type(e).__name__}: {e}")
                self.states[name] = s
        return self.snapshot()

    def snapshot(self) -> ClusterSnapshot:
        nodes = [self.states[n.name] for n in self.cfg.nodes]
        head = self.states[self.cfg.head.name]
        ray_error = self._ray_error
        if not head.reachable:
            ray_error = f"head {head.name} unreachable"
        snap = ClusterSnapshot(
            cluster=self.cfg.cluster_name,
            nodes=nodes,
            ray_nodes=list(self._ray_nodes),
            ray_source=self._ray_source if ray_error is None else None,
            ray_error=ray_error,
            vllm=self._vllm,
            tick=self.tick,
        )
        if ray_error is None:
            snap.ray_via = self._ray_via
            snap.ray_pgs, snap.ray_demands = list(self._ray_pgs), list(self._ray_demands)
            snap.ray_pending_error = self._ray_pending_error
        self._set_backend(snap)
        if snap.backend == "native":  # no Ray: nothing about it is shown or checked
            snap.ray_nodes, snap.ray_source, snap.ray_error = [], None, None
            snap.ray_pgs, snap.ray_demands, snap.ray_pending_error = [], [], None
            snap.ray_via = None
        for node in nodes:
            entry = (
                checks.ray_entry_for(node, snap.ray_nodes)
                if ray_error is None and snap.backend != "native"
                else None
            )
            node.ray = (
                RayView()
                if snap.backend == "native"
                else RayView(
                    registered_ip=entry.ip if entry else None,
                    alive=entry.alive if entry else (False if ray_error is None else None),
                    gpus=entry.gpus if entry else None,
                    node_id=entry.node_id if entry else None,
                    death_reason=entry.death_reason if entry else "",
                )
            )
        snap.findings = checks.check(snap, self.cfg)
        if head.reachable:
            snap.vllm.phase_ranks = {
                self._rank_node(snap, key): value for key, value in snap.vllm.phase_ranks.items()
            }
            snap.findings = sort_findings(
                snap.findings + self.lifecycle.findings(snap, time.monotonic(), head.name)
            )
        return snap

    def _rank_node(self, snap: ClusterSnapshot, key: str) -> str:
        """A start-up rank's key (Ray's `ip=` prefix; "" = the head) -> the node's name."""
        node = snap.node_by_ip(key) if key else None
        return self.cfg.head.name if not key else (node.name if node else key)

    def _set_backend(self, snap: ClusterSnapshot) -> None:
        """The configured backend, else the one the nodes show (said in `backend_note`)."""
        from sparktui.core import native

        if self.cfg.backend_configured:
            snap.backend, snap.backend_note = self.cfg.backend, ""
            return
        seen, why = native.detect_backend(snap, {n.name: n.container.name for n in self.cfg.nodes})
        snap.backend = self._backend_seen = seen
        snap.backend_note = f"cluster.backend not set; {seen} seen: {why}"

    async def watch(
        self, interval: float | None = None, paused: Callable[[], bool] | None = None
    ) -> AsyncIterator[ClusterSnapshot]:
        """A snapshot per tick, forever. The tick waits at most one interval for slow nodes."""
        interval = interval or self.cfg.refresh_interval
        while True:
            if paused is not None and paused():
                await asyncio.sleep(interval)
                continue
            start = time.monotonic()
            yield await self.refresh(wait=interval)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - start)))

    async def close(self) -> None:
        """Stop probing and close connections. Never stops anything on the nodes."""
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self.resident is not None:
            await self.resident.aclose()
        await asyncio.gather(*(t.close() for t in self.transports.values()), return_exceptions=True)
