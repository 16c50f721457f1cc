"""Transports: how commands reach a node. One per node, shared by every probe and action.

`Transport.run()` runs a Command and returns its Result; `Transport.stream()` yields output
chunks of a long-running command (log following). Both refuse a mutating Command when the
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


class Transport:
    """Base class. Subclasses implement `_run` and `_stream`."""

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

    async def _stream(self, command: Command) -> AsyncIterator[bytes]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env(command),
                start_new_session=True,
            )
        except OSError as e:
            raise TransportError(f"{self.node}: cannot start {command.argv[0]}: {e}") from e
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
