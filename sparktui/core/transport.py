"""Transports: how commands reach a node. One per node, shared by every probe and action.

`Transport.run()` runs a Command and returns its Result; `Transport.stream()` yields output
chunks of a long-running command (log following); `Transport.session()` starts one that
answers requests on its stdin (the resident probe, core/resident.py). All refuse a mutating Command when the
transport is read-only, whoever asks. Every command sent is recorded (`sent`), so tests and
the audit can prove what reached a node.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sparktui.core.command import Command, Result

MAX_CHANNELS = 4  # sshd MaxSessions is 10 per connection, slots are freed late
SESSION_LIMIT = 1 << 24  # the most a session's answer may hold before its end marker


def _kill_if_running(proc) -> None:
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass


class TransportError(Exception):
    """The node could not be reached, or the connection broke. Message names the node."""


class ReadOnlyError(PermissionError):
    """A mutating command was refused because the transport is read-only."""


@dataclass(frozen=True)
class SentRecord:
    at: float
    node: str
    argv: tuple[str, ...]
    mutating: bool
    refused: bool = False


class Session:
    """A long-running command on a node, fed on stdin: `ask()` writes a request and returns
    the output up to and including `until`. Closing it closes its stdin and channel."""

    def __init__(self, stdin, stdout, closer, waiter=None) -> None:
        self._stdin, self._stdout, self._closer, self._waiter = stdin, stdout, closer, waiter
        self.closed = False

    async def read_until(self, until: bytes) -> bytes:
        """Output up to and including `until`; raises EOFError when the command ended."""
        try:
            return bytes(await self._stdout.readuntil(until))
        except asyncio.IncompleteReadError as e:
            raise EOFError(f"ended after {len(e.partial)} bytes") from None

    async def ask(self, request: bytes, until: bytes) -> bytes:
        self._stdin.write(request)
        await self._stdin.drain()
        return await self.read_until(until)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._closer()

    async def wait_closed(self, timeout: float = 3.0) -> None:
        """After close(): until the command has ended (at most `timeout` s)."""
        if self._waiter is not None:
            try:
                await asyncio.wait_for(self._waiter(), timeout)
            except (asyncio.TimeoutError, OSError):
                pass


class Transport:
    """Base class. Subclasses implement `_run`, `_stream` and `_session`."""

    kind = "base"

    def __init__(self, node: str, *, read_only: bool = False, record_size: int = 2000) -> None:
        self.node = node
        self.read_only = read_only
        self.sent: collections.deque[SentRecord] = collections.deque(maxlen=record_size)
        self._sem = asyncio.Semaphore(MAX_CHANNELS)

    def _admit(self, command: Command) -> None:
        refused = command.mutating and self.read_only
        self.sent.append(
            SentRecord(time.time(), self.node, command.argv, command.mutating, refused)
        )
        if refused:
            raise ReadOnlyError(
                f"{self.node}: read-only mode refuses a command that changes the node: "
                f"{command.masked()}"
            )

    async def run(self, command: Command, *, check: bool = False) -> Result:
        self._admit(command)
        async with self._sem:
            start = time.monotonic()
            try:
                if command.timeout:
                    result = await asyncio.wait_for(self._run(command), command.timeout)
                else:
                    result = await self._run(command)
            except asyncio.TimeoutError:
                result = Result(None, "", f"timed out after {command.timeout:g}s", timed_out=True)
            result.duration = time.monotonic() - start
        if check and not result.ok:
            raise TransportError(
                f"{self.node}: `{command.masked()}` exited {result.exit_status}: {result.tail(3)}"
            )
        return result

    async def stream(self, command: Command) -> AsyncIterator[bytes]:
        """Yield raw output chunks (stdout and stderr merged) until the command ends."""
        self._admit(command)
        async for chunk in self._stream(command):
            yield chunk

    async def session(self, command: Command) -> Session:
        """Start `command` with its stdin open for requests (NotImplementedError where the
        transport cannot)."""
        self._admit(command)
        return await self._session(command)

    async def _session(self, command: Command) -> Session:
        raise NotImplementedError(f"{self.kind} transport has no sessions")

    async def _run(self, command: Command) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    def _stream(self, command: Command) -> AsyncIterator[bytes]:  # pragma: no cover
        raise NotImplementedError

    async def connect(self) -> None:
        """Open the connection now (optional: run() connects on demand)."""

    async def close(self) -> None:
        """Close the connection. Never stops anything on the node."""

    @property
    def connected(self) -> bool:
        return True


class LocalTransport(Transport):
    """The machine sparktui runs on: commands run as local processes (no shell)."""

    kind = "local"

    def _env(self, command: Command) -> dict[str, str] | None:
        if not command.env:
            return None
        env = dict(os.environ)
        env.update(dict(command.env))
        return env

    async def _run(self, command: Command) -> Result:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=asyncio.subprocess.PIPE
                if command.stdin is not None
                else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env(command),
                start_new_session=True,
            )
        except FileNotFoundError:
            return Result(127, "", f"{command.argv[0]}: command not found")
        except OSError as e:
            return Result(126, "", f"{command.argv[0]}: {e.strerror}")
        try:
            out, err = await proc.communicate(
                command.stdin.encode() if command.stdin is not None else None
            )
        except asyncio.CancelledError:  # timed out or cancelled: reap it, then go on
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
            await asyncio.shield(proc.wait())
            raise
        return Result(
            proc.returncode if proc.returncode is not None and proc.returncode >= 0 else None,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        )

    async def _start(self, command: Command, stdin: int, stderr: int, **kw):
        """The long-running local process of a stream or session."""
        try:
            return await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=self._env(command),
                start_new_session=True,
                **kw,
            )
        except OSError as e:
            raise TransportError(f"{self.node}: cannot start {command.argv[0]}: {e}") from e

    async def _session(self, command: Command) -> Session:
        proc = await self._start(
            command, asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL, limit=SESSION_LIMIT
        )

        def closer() -> None:
            assert proc.stdin is not None
            proc.stdin.close()  # the command ends at the end of its requests

        async def waiter() -> None:
            try:
                await asyncio.wait_for(proc.wait(), 2.5)
            except asyncio.TimeoutError:
                _kill_if_running(proc)
                await proc.wait()

        return Session(proc.stdin, proc.stdout, closer, waiter)

    async def _stream(self, command: Command) -> AsyncIterator[bytes]:
        proc = await self._start(command, asyncio.subprocess.DEVNULL, asyncio.subprocess.STDOUT)
        assert proc.stdout is not None
        try:
            while True:
                chunk = await proc.stdout.read(65536)
                if not chunk:
                    break
                yield chunk
        finally:
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                await proc.wait()
