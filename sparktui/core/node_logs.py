"""Every node's log in one stream, each batch tagged with its node (Ray backend).

The head's `vllm.log` (vLLM's own output, with the Ray workers' lines forwarded under
`(RayWorkerProc pid=N, ip=...)`), and on every node the Ray container's `docker logs`
(`ray start`'s output: a raylet that dies says so there) and its Ray worker logs
(`/tmp/ray/session_latest/logs/worker-*.{out,err}` inside the container: a vLLM worker that
segfaults writes its reason there, on its own node). Worker logs appear when vLLM starts its
actors, so the list is read again (a `docker exec` on each node): after `relist` seconds,
twice as long each time it found nothing new, up to `relist_max`, and at once when
`relist_now` is set (the console sets it when a node's vLLM or Ray container changed). New
files are followed from their start. Read-only; the followers end with the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sparktui.config import Config
from sparktui.core.logs import (
    DockerLogFollower,
    FileFollower,
    LogBatch,
    _Follower,
    ray_worker_follower,
    ray_worker_logs,
    vllm_log_follower,
)
from sparktui.core.transport import Transport, TransportError

WORKER_LOGS_PER_NODE = 6  # the newest worker-*.out/err followed per node
DOCKER_INITIAL_LINES = 200
# the other nodes' logs are context: a stream that ends (a container not there yet, a
# node down) is tried again after 5 s, then up to a minute - not at the head log's pace,
# which on 32 nodes opened hundreds of SSH channels in ten seconds
OTHER_BACKOFF = (5.0, 60.0)


def sources(cfg: Config) -> list[str]:
    """What `follow_cluster_logs` reads, in words (for the log pane's title)."""
    return [f"{cfg.head.name}:{cfg.vllm.log}"] + [
        f"{n.name}: docker logs {n.container.name} + Ray worker logs"
        for n in cfg.nodes
        if n.container.name
    ]


async def follow_cluster_logs(
    cfg: Config,
    transports: dict[str, Transport],
    *,
    head: _Follower | None = None,
    others: asyncio.Event | None = None,
    relist: float = 15.0,
    relist_max: float = 120.0,
    relist_now: asyncio.Event | None = None,
    queue_size: int = 32,
) -> AsyncIterator[LogBatch]:
    """Batches from every node's logs as they arrive (see the module's docstring). `head`:
    the head's vLLM log follower (default: a new one); `others`: the other logs start when
    it is set (default: at once)."""
    q: asyncio.Queue[LogBatch | None] = asyncio.Queue(queue_size)
    followers: list[_Follower] = []
    tasks: list[asyncio.Task] = []
    followed: dict[str, set[str]] = {n.name: set() for n in cfg.nodes}

    def start(f: _Follower) -> None:
        async def pump() -> None:
            try:
                async for b in f.batches():
                    await q.put(b)
            except (TransportError, OSError):
                pass

        followers.append(f)
        tasks.append(asyncio.ensure_future(pump()))

    start(head if head is not None else vllm_log_follower(cfg, transports[cfg.head.name]))

    async def lister() -> None:
        if others is not None:
            await others.wait()
        for n in cfg.nodes:
            if n.container.name:
                start(
                    DockerLogFollower(
                        transports[n.name],
                        n.container.name,
                        node=n.name,
                        initial_lines=DOCKER_INITIAL_LINES,
                        backoff=OTHER_BACKOFF,
                    )
                )
        wait = relist
        while True:
            found = False
            for n in cfg.nodes:
                if not n.container.name:
                    continue
                try:
                    paths = await ray_worker_logs(
                        transports[n.name], container=n.container.name, limit=WORKER_LOGS_PER_NODE
                    )
                except (TransportError, OSError):
                    continue
                for path in paths:
                    if path not in followed[n.name]:
                        followed[n.name].add(path)
                        found = True
                        f: FileFollower = ray_worker_follower(
                            transports[n.name],
                            path,
                            node=n.name,
                            container=n.container.name,
                            backoff=OTHER_BACKOFF,
                        )
                        start(f)
            wait = relist if found else min(relist_max, wait * 2)
            if relist_now is None:
                await asyncio.sleep(wait)
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(relist_now.wait(), wait)
            if relist_now.is_set():
                relist_now.clear()
                wait = relist

    list_task = asyncio.ensure_future(lister())
    try:
        while True:
            b = await q.get()
            if b is None:
                continue
            yield b
    finally:
        list_task.cancel()
        for f in followers:
            f.stop()
        for t in tasks:
            t.cancel()
        for t in [list_task, *tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
