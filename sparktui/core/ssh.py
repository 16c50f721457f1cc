"""SSH transport: one persistent asyncssh connection per node.

At most MAX_CHANNELS commands in flight on it (the base class's semaphore), connect
timeout, keepalive, reconnect with exponential backoff. Honours ~/.ssh/config (aliases,
ProxyJump), the agent, and known_hosts strictly unless the config opts out.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import asyncssh

from sparktui.config import NodeConfig
from sparktui.core.command import Command, Result
from sparktui.core.transport import Session, Transport, TransportError

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0


def _describe(node: NodeConfig, exc: BaseException) -> str:
    """A short, operator-facing reason for a failed connection."""
    where = f"{node.name} ({node.host})"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        kh = node.ssh.known_hosts or "~/.ssh/known_hosts"
        return (
            f"{where}: host key not trusted ({exc.reason}); check {kh} "
            f"(ssh-keyscan the node, or fix a changed key)"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return (
            f"{where}: SSH login refused (permission denied for user {node.ssh.user or 'default'})"
        )
    if isinstance(exc, asyncssh.DisconnectError):
        return f"{where}: SSH disconnected: {exc.reason}"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"{where}: SSH connect timed out after {node.ssh.connect_timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return f"{where}: SSH connection refused (is sshd running?)"
    if isinstance(exc, OSError):
        return f"{where}: {exc.strerror or exc}"
    if isinstance(exc, asyncssh.ChannelOpenError):
        return f"{where}: SSH channel refused: {exc.reason}"
    return f"{where}: {type(exc).__name__}: {exc}"


class SshTransport(Transport):
    kind = "ssh"

    def __init__(self, node: NodeConfig, *, read_only: bool = False) -> None:
        super().__init__(node.name, read_only=read_only)
        self.cfg = node
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._backoff = 0.0
        self._next_attempt = 0.0
        self.last_error: str | None = None
        self.connects = 0  # how many connections were opened (tests and benchmarks read it)

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def _options(self) -> dict:
        s = self.cfg.ssh
        opts: dict = {
            "connect_timeout": s.connect_timeout,
            "keepalive_interval": s.keepalive_interval,
            "keepalive_count_max": 3,
        }
        if s.user:
            opts["username"] = s.user
        if s.port:
            opts["port"] = s.port
        if s.identity_file:
            opts["client_keys"] = [s.identity_file]
        if s.config_file:
            opts["config"] = [s.config_file]
        if s.ciphers:
            opts["encryption_algs"] = s.ciphers
        if not s.strict_host_key_checking:
            opts["known_hosts"] = None  # the config says so explicitly
        elif s.known_hosts:
            opts["known_hosts"] = s.known_hosts
        elif not os.path.exists(os.path.expanduser("~/.ssh/known_hosts")):
            # asyncssh would accept any key with no known_hosts file; strict means refuse.
            opts["known_hosts"] = ([], [], [])
        return opts

    async def connect(self) -> None:
        await self._connection()

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self.connected:
            assert self._conn is not None
            return self._conn
        async with self._lock:
            if self.connected:
                assert self._conn is not None
                return self._conn
            now = time.monotonic()
            if now < self._next_attempt and self.last_error:
                raise TransportError(
                    f"{self.last_error} (retrying in {self._next_attempt - now:.0f}s)"
                )
            try:
                self._conn = await asyncio.wait_for(
                    asyncssh.connect(self.cfg.host, **self._options()),
                    self.cfg.ssh.connect_timeout + 1,
                )
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - every failure becomes one message
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                self._backoff = min(BACKOFF_MAX, max(BACKOFF_START, self._backoff * 2))
                self._next_attempt = time.monotonic() + self._backoff
                self.last_error = _describe(self.cfg, e)
                self._conn = None
                raise TransportError(self.last_error) from None
            self._backoff = 0.0
            self.last_error = None
            self.connects += 1
            return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.abort()
        self._conn = None

    async def _run(self, command: Command) -> Result:
        for attempt in (1, 2):
            conn = await self._connection()
            try:
                proc = await conn.run(
                    command.shell(),
                    input=command.stdin,
                    check=False,
                    encoding="utf-8",
                    errors="replace",
                )
            except asyncssh.ChannelOpenError as e:
                if attempt == 2:
                    raise TransportError(_describe(self.cfg, e)) from None
                await asyncio.sleep(0.2)  # MaxSessions slot not freed yet
                continue
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError) as e:
                self._drop()
                self.last_error = _describe(self.cfg, e)
                if attempt == 2:
                    raise TransportError(self.last_error) from None
                continue
            status = proc.exit_status
            if status is not None and status < 0:
                status = None
            return Result(status, str(proc.stdout or ""), str(proc.stderr or ""))
        raise TransportError(f"{self.node}: command could not be run")  # pragma: no cover

    async def _session(self, command: Command) -> Session:
        conn = await self._connection()
        try:
            proc = await conn.create_process(
                command.shell(), encoding=None, stderr=asyncssh.DEVNULL
            )
        except (asyncssh.ChannelOpenError, asyncssh.ConnectionLost, OSError) as e:
            raise TransportError(_describe(self.cfg, e)) from None

        def closer() -> None:
            try:
                proc.stdin.write_eof()  # the command ends at the end of its requests
            except (OSError, asyncssh.Error):
                pass
            proc.close()

        return Session(proc.stdin, proc.stdout, closer, proc.wait_closed)

    async def _stream(self, command: Command) -> AsyncIterator[bytes]:
        conn = await self._connection()
        try:
            proc = await conn.create_process(command.shell(), encoding=None, stderr=asyncssh.STDOUT)
        except (asyncssh.ChannelOpenError, asyncssh.ConnectionLost, OSError) as e:
            self._drop()
            raise TransportError(_describe(self.cfg, e)) from None
        try:
            while True:
                try:
                    chunk = await proc.stdout.read(65536)
                except (asyncssh.ConnectionLost, asyncssh.DisconnectError, OSError) as e:
                    self._drop()
                    raise TransportError(_describe(self.cfg, e)) from None
                if not chunk:
                    break
                yield chunk
        finally:
            proc.close()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2)
            except (asyncio.TimeoutError, OSError):
                pass
        self._conn = None


def transport_for(node: NodeConfig, *, read_only: bool = False) -> Transport:
    """The right transport for a configured node: local for `host: local`, else SSH."""
    from sparktui.core.transport import LocalTransport

    if node.local:
        return LocalTransport(node.name, read_only=read_only)
    return SshTransport(node, read_only=read_only)
