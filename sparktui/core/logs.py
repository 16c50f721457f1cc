"""Log followers: the vLLM log on the head, `docker logs -f`, Ray worker logs on demand.

A follower runs one long remote command through a node's `Transport.stream()` and turns its
output into `LogBatch`es (node, first line number, lines, events) for an async consumer::

    follower = FileFollower(transport, cfg.vllm.log, node="spark-1")
    async for batch in follower.batches():
        scanner.feed_lines(batch.lines)

Files are followed with `tail -F` semantics (rotation: finish the old file, then follow the
new one from its start; truncation: start again at 0) by a small constant program on the node
(`follow_remote`: python3 where it exists, else POSIX sh) that takes the path and position as
positional arguments and frames what it sends: length-prefixed data blocks tagged with the
file's inode and byte offset. The follower
therefore always knows the exact (inode, offset) after the last complete line it delivered;
when the stream drops (SSH connection lost, remote process killed) it reconnects with
backoff and resumes from there: no line lost, none repeated. Memory is bounded: data blocks,
the unfinished line (`max_line`, longer lines are cut with a mark) and the batch queue all
have fixed caps; a slow consumer applies backpressure to the remote side instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from sparktui.core.command import Command, cmd, sh
from sparktui.core.follow_remote import AUTO, FOLLOW_PY, FOLLOW_SH, MAGIC
from sparktui.core.safe_text import clean_text
from sparktui.core.transport import Transport, TransportError
from sparktui.remote import script

log = logging.getLogger(__name__)

RAY_LOG_DIR = "/tmp/ray/session_latest/logs"
TRUNCATED_MARK = " … [line truncated: {n} more bytes]"
# Ray worker logs of one node, newest first: $1 directory, $2 pid or "" (all), $3 how many.
LIST_WORKER_LOGS = script("worker_logs.sh")


@dataclass(frozen=True)
class LogBatch:
    """Lines of one source on one node. `first_line` numbers lines[0] (1-based, per follower)."""

    node: str
    source: str
    first_line: int
    lines: tuple[str, ...]
    events: tuple[str, ...] = ()


def stream_trouble(event: str) -> bool:
    """Whether a follower event means the stream is not flowing (lost, file missing, an engine
    given up on), as opposed to news (following, resumed, rotated)."""
    return event.startswith(("connection lost", "python3 on")) or " does not exist on " in event


class _Desync(Exception):
    """The framed stream did not parse: restart from the last good position."""


class _Lines:
    """Bytes to complete, decoded, length-capped lines."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.partial = bytearray()
        self.dropped = 0  # bytes of the current line beyond max_line

    def feed(self, data: bytes) -> tuple[list[str], list[int]]:
        """Complete lines in `data` and, for each, the number of bytes it consumed."""
        lines: list[str] = []
        sizes: list[int] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            piece = data[start:nl]
            size = len(self.partial) + self.dropped + len(piece) + 1
            lines.append(self._finish(piece))
            sizes.append(size)
            start = nl + 1
        rest = data[start:]
        room = self.max_line - len(self.partial)
        if len(rest) > room:
            self.partial += rest[: max(room, 0)]
            self.dropped += len(rest) - max(room, 0)
        else:
            self.partial += rest
        return lines, sizes

    def _finish(self, piece: bytes) -> str:
        room = self.max_line - len(self.partial)
        if len(piece) > room:
            self.dropped += len(piece) - max(room, 0)
            piece = piece[: max(room, 0)]
        raw = bytes(self.partial) + piece
        dropped = self.dropped
        self.partial.clear()
        self.dropped = 0
        text = raw.decode("utf-8", "replace")
        if text.endswith("\r"):
            text = text[:-1]
        if dropped:
            text += TRUNCATED_MARK.format(n=dropped)
        return text

    def flush(self) -> tuple[str | None, int]:
        """The unfinished line as a line (rotation/truncation/end), and its size."""
        if not self.partial and not self.dropped:
            return None, 0
        size = len(self.partial) + self.dropped
        return self._finish(b""), size

    def pending_bytes(self) -> int:
        return len(self.partial) + self.dropped

    def reset(self) -> None:
        self.partial.clear()
        self.dropped = 0


BatchCallback = Callable[[LogBatch], "Awaitable[None] | None"]


class _Follower:
    """Shared machinery: reconnect loop with backoff, batching, bounded queue."""

    source = ""

    def __init__(
        self,
        transport: Transport,
        *,
        node: str | None = None,
        max_line: int = 64 * 1024,
        max_batch_lines: int = 1000,
        queue_size: int = 16,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self.transport = transport
        self.node = node or transport.node
        self.max_line = max_line
        self.max_batch_lines = max_batch_lines
        self.backoff = backoff
        self._queue: asyncio.Queue[LogBatch | BaseException | None] = asyncio.Queue(queue_size)
        self._stopped = False
        self._task: asyncio.Task | None = None
        self._lines = _Lines(max_line)
        self._out: list[str] = []
        self._events: list[str] = []
        self.lines_delivered = 0
        self.reconnects = 0
        self.connected = False

    # -- public API -----------------------------------------------------------------------
    async def batches(self) -> AsyncIterator[LogBatch]:
        """Batches as they come, until `stop()` (reconnects happen inside)."""
        self._task = asyncio.ensure_future(self._pump())
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._stopped = True
            if self._task and not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task

    async def run(self, callback: BatchCallback) -> None:
        """Call `callback(batch)` (sync or async) for every batch until `stop()`."""
        async for batch in self.batches():
            res = callback(batch)
            if asyncio.iscoroutine(res):
                await res

    def stop(self) -> None:
        """Stop following (the remote command is ended; nothing else on the node is)."""
        self._stopped = True
        if self._task and not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    # -- internals ------------------------------------------------------------------------
    def _command(self) -> Command:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _handle(self, chunk: bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _on_disconnect(self) -> None:
        """Forget what was received but not delivered; it is read again after reconnect."""
        self._lines.reset()

    async def _pump(self) -> None:
        attempt = 0
        try:
            while not self._stopped:
                reason = "the remote command ended"
                delivered_before = self.lines_delivered
                try:
                    self.connected = True
                    async for chunk in self.transport.stream(self._command()):
                        await self._handle(chunk)
                        await self._flush()
                        if self._stopped:
                            break
                except TransportError as e:
                    reason = str(e)
                except _Desync as e:
                    reason = f"stream out of step ({e})"
                finally:
                    self.connected = False
                if self._stopped:
                    break
                self._on_disconnect()
                if self.lines_delivered > delivered_before:
                    attempt = 0
                lo, hi = self.backoff
                delay = min(hi, lo * (2**attempt))
                attempt += 1
                self.reconnects += 1
                self._events.append(f"connection lost: {reason}; reconnecting in {delay:.1f}s")
                await self._flush()
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: hand it to the consumer rather than die silently
            log.exception("log follower %s crashed", self.source)
            await self._queue.put(e)
            return
        await self._queue.put(None)

    def _emit(self, lines: Sequence[str]) -> None:
        self._out.extend(lines)

    async def _flush(self) -> None:
        while self._out or self._events:
            lines = self._out[: self.max_batch_lines]
            del self._out[: self.max_batch_lines]
            batch = LogBatch(
                self.node, self.source, self.lines_delivered + 1, tuple(lines), tuple(self._events)
            )
            self._events = []
            self.lines_delivered += len(lines)
            self._committed(len(lines))
            await self._queue.put(batch)

    def _committed(self, n_lines: int) -> None:
        """Hook: `n_lines` more lines are now delivered (advance the resume position)."""


class FileFollower(_Follower):
    """`tail -F` a file on a node (optionally inside a container), resumable after drops.

    `position` is (inode, byte offset) of the first byte not yet delivered as a line.
    `initial_lines` lines of existing content are shown first (`from_start=True`: all).
    """

    def __init__(
        self,
        transport: Transport,
        path: str,
        *,
        node: str | None = None,
        container: str | None = None,
        initial_lines: int = 500,
        from_start: bool = False,
        poll_interval: float = 0.3,
        event_wait: float = 2.0,
        max_block: int = 256 * 1024,
        docker: str = "docker",
        engine: str = "auto",
        **kw,
    ) -> None:
        super().__init__(transport, node=node, **kw)
        if engine not in ("auto", "sh"):
            raise ValueError(f"engine must be 'auto' or 'sh', not {engine!r}")
        self.engine = engine  # auto: python3 on the node where it exists; sh: the shell loop
        self._framed = False  # the current stream has sent a valid frame
        self.path = path
        self.container = container
        self.initial_lines = -1 if from_start else max(0, initial_lines)
        self.poll_interval = poll_interval
        self.event_wait = event_wait
        self.max_block = max_block
        self.docker = docker
        self.source = f"{container}:{path}" if container else path
        self.inode: str | None = None  # resume point: after the last delivered line
        self.offset = -1
        self._recv_ino: str | None = None
        self._recv_off = 0  # offset of the next byte the stream will send
        self._line_pos = 0  # offset where the unfinished line starts
        self._positions: list[tuple[str | None, int]] = []  # after each undelivered line
        self._buf = bytearray()
        self._block: tuple[str, int, int] | None = None  # (inode, offset, len) being read

    @property
    def position(self) -> tuple[str | None, int]:
        return self.inode, self.offset

    def _command(self) -> Command:
        args: tuple[str, ...] = (
            self.path,
            self.inode or "",
            str(self.offset),
            str(self.initial_lines),
            f"{self.poll_interval:g}",
            str(self.max_block),
            f"{self.event_wait:g}",
        )
        script, args = (AUTO, (FOLLOW_PY, *args)) if self.engine == "auto" else (FOLLOW_SH, args)
        self._framed = False
        if self.container:
            return cmd(
                self.docker,
                "exec",
                self.container,
                "sh",
                "-c",
                script,
                "sparktui-follow",
                *args,
                timeout=None,
                description=f"follow {self.source}",
            )
        return sh(script, *args, timeout=None, description=f"follow {self.path}")

    def _unframed(self, why: str, output: bytes) -> _Desync:
        """The stream is not our protocol. If that is python3 failing on the node (too old,
        broken) before its first frame under `auto`, use the shell loop from now on."""
        said_python = any(w in output for w in (b"python", b"Python", b"Traceback"))
        if not self._framed and self.engine == "auto" and said_python:
            self.engine = "sh"
            self._events.append(
                f"python3 on {self.node} could not follow {self.path} ({why}); "
                "following with the shell loop instead"
            )
        return _Desync(why)

    def _on_disconnect(self) -> None:
        super()._on_disconnect()
        self._buf.clear()
        self._block = None
        # lines decoded but not yet delivered are dropped: they are read again
        self._out.clear()
        self._positions.clear()

    def _committed(self, n_lines: int) -> None:
        if n_lines:
            self.inode, self.offset = self._positions[n_lines - 1]
            del self._positions[:n_lines]

    async def _handle(self, chunk: bytes) -> None:
        self._buf += chunk
        while True:
            if self._block is None:
                nl = self._buf.find(b"\n")
                if nl < 0:
                    if len(self._buf) > 256:
                        raise self._unframed("header too long", bytes(self._buf[:256]))
                    return
                header = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._header(header)
                continue
            ino, off, length = self._block
            if len(self._buf) < length + len(MAGIC) + 2:
                return
            data = bytes(self._buf[:length])
            trailer = bytes(self._buf[length : length + len(MAGIC) + 2])
            if trailer != MAGIC + b"E\n":
                raise _Desync("data block shorter than announced")
            del self._buf[: length + len(MAGIC) + 2]
            self._block = None
            if off != self._recv_off or ino != self._recv_ino:
                raise _Desync(f"block at {off}, expected {self._recv_off}")
            self._recv_off += length
            lines, sizes = self._lines.feed(data)
            for size in sizes:
                self._line_pos += size
                self._positions.append((ino, self._line_pos))
            self._out.extend(lines)
            if len(self._out) >= self.max_batch_lines:
                await self._flush()

    def _header(self, header: bytes) -> None:
        if not header.startswith(MAGIC):
            text = clean_text(header[:160].decode("utf-8", "replace"))
            raise self._unframed(f"the node answered: {text}", header)
        parts = header[len(MAGIC) :].decode("ascii", "replace").split()
        if not parts:
            raise _Desync("empty header")
        kind, args = parts[0], parts[1:]
        self._framed = True
        try:
            if kind == "H" and not args:
                pass  # the shell loop's idle heartbeat
            elif kind == "D" and len(args) == 3:
                self._block = (args[0], int(args[1]), int(args[2]))
                if not 0 <= self._block[2] <= self.max_block:
                    raise _Desync("bad block length")
            elif kind == "F" and len(args) == 2:
                ino, off = args[0], int(args[1])
                if self.inode is None:
                    self._events.append(f"following {self.path} on {self.node}")
                    self.inode, self.offset = ino, off  # the starting point is fixed now
                elif ino != self._recv_ino and self._recv_ino is not None:
                    self._rotated("replaced (rotated)")
                elif ino != self.inode:
                    self._events.append(
                        f"{self.path} was replaced while disconnected; "
                        "following the new file from its start"
                    )
                elif self.lines_delivered:
                    self._events.append(f"resumed {self.path} at byte {off}")
                self._recv_ino, self._recv_off, self._line_pos = ino, off, off
            elif kind == "T" and len(args) == 1:
                self._rotated("truncated")
                self._recv_off = self._line_pos = 0
            elif kind == "M":
                self._events.append(f"{self.path} does not exist on {self.node}; waiting for it")
            else:
                raise _Desync(f"unknown header {header[:60]!r}")
        except ValueError as e:
            raise _Desync(f"bad header {header[:60]!r}") from e

    def _rotated(self, how: str) -> None:
        """The old content ended: its unfinished last line becomes a line."""
        line, _size = self._lines.flush()
        if line is not None:
            # resuming after it means: the old file is done (its inode no longer matches)
            self._out.append(line)
            self._positions.append((self._recv_ino, self._recv_off))
        self._events.append(f"{self.path} was {how}; following the new content from its start")


class DockerLogFollower(_Follower):
    """`docker logs -f -t` of a container; resumes with `--since` the last delivered line."""

    TS_RE = re.compile(rb"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")

    def __init__(
        self,
        transport: Transport,
        container: str,
        *,
        node: str | None = None,
        initial_lines: int = 500,
        docker: str = "docker",
        **kw,
    ) -> None:
        super().__init__(transport, node=node, **kw)
        self.container = container
        self.initial_lines = initial_lines
        self.docker = docker
        self.source = f"docker logs {container}"
        self.last_ts: str | None = None  # raw timestamp of the last delivered line
        self._last_key: int | None = None  # it, in nanoseconds
        self._same_ts = 0  # delivered lines carrying exactly that stamp
        self._skip_key: int | None = None
        self._skip_n = 0
        self._keys: list[tuple[int, str]] = []  # stamps of emitted, undelivered lines

    def _command(self) -> Command:
        argv = [self.docker, "logs", "-f", "-t"]
        if self.last_ts is not None:
            argv += ["--since", self.last_ts]
            self._skip_key, self._skip_n = self._last_key, self._same_ts
        else:
            argv += ["--tail", str(self.initial_lines)]
        argv += ["--", self.container]
        return cmd(*argv, timeout=None, description=f"docker logs -f {self.container}")

    def _on_disconnect(self) -> None:
        super()._on_disconnect()
        self._out.clear()
        self._keys.clear()

    @classmethod
    def ts_key(cls, stamp: bytes) -> int | None:
        m = cls.TS_RE.match(stamp + b" ")
        if not m:
            return None
        base = _dt.datetime.fromisoformat(
            m.group(1).decode() + ("+00:00" if m.group(3) == b"Z" else m.group(3).decode())
        )
        frac = (m.group(2) or b"0").decode().ljust(9, "0")
        return int(base.timestamp()) * 1_000_000_000 + int(frac)

    async def _handle(self, chunk: bytes) -> None:
        lines, _sizes = self._lines.feed(chunk)
        for line in lines:
            raw = line.encode("utf-8", "surrogateescape")
            m = self.TS_RE.match(raw)
            if not m:
                self._events.append(f"docker: {line[:200]}")
                continue
            stamp = raw[: m.end() - 1]
            key = self.ts_key(stamp)
            assert key is not None
            if self._skip_key is not None:
                if key < self._skip_key:
                    continue
                if key == self._skip_key and self._skip_n > 0:
                    self._skip_n -= 1
                    continue
                self._skip_key = None
            self._out.append(line[m.end() :])
            self._keys.append((key, stamp.decode()))
        if len(self._out) >= self.max_batch_lines:
            await self._flush()

    def _committed(self, n_lines: int) -> None:
        for key, stamp in self._keys[:n_lines]:
            if key == self._last_key:
                self._same_ts += 1
            else:
                self._last_key, self.last_ts, self._same_ts = key, stamp, 1
        del self._keys[:n_lines]


def vllm_log_follower(cfg, transport: Transport, **kw) -> FileFollower:
    """The follower of `vllm.log` on the head node, as configured."""
    return FileFollower(transport, cfg.vllm.log, node=cfg.head.name, **kw)


async def ray_worker_logs(
    transport: Transport,
    *,
    container: str | None = None,
    pid: str = "",
    limit: int = 10,
    docker: str = "docker",
    log_dir: str = RAY_LOG_DIR,
) -> list[str]:
    """Paths of a node's Ray worker logs, newest first (`pid`: only that worker's)."""
    if container:
        command = cmd(
            docker,
            "exec",
            container,
            "sh",
            "-c",
            LIST_WORKER_LOGS,
            "sparktui-ls",
            log_dir,
            pid,
            str(limit),
        )
    else:
        command = sh(LIST_WORKER_LOGS, log_dir, pid, str(limit))
    result = await transport.run(command)
    return [ln for ln in result.stdout.splitlines() if ln.strip()]


def ray_worker_follower(
    transport: Transport, path: str, *, node: str | None = None, container: str | None = None, **kw
) -> FileFollower:
    """Follow one Ray worker log (e.g. the dead worker's .err named by a finding)."""
    kw.setdefault("from_start", True)
    return FileFollower(transport, path, node=node, container=container, **kw)


async def merge(followers: Sequence[_Follower], queue_size: int = 32) -> AsyncIterator[LogBatch]:
    """Batches of several followers (several nodes) as they arrive, each tagged with its node."""
    q: asyncio.Queue[LogBatch | None] = asyncio.Queue(queue_size)

    async def pump(f: _Follower) -> None:
        try:
            async for b in f.batches():
                await q.put(b)
        finally:
            await q.put(None)

    tasks = [asyncio.ensure_future(pump(f)) for f in followers]
    live = len(tasks)
    try:
        while live:
            b = await q.get()
            if b is None:
                live -= 1
                continue
            yield b
    finally:
        for f in followers:
            f.stop()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
