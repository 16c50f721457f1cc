"""The resident probe: for a long run (the console), each node's probe is one bash that
stays (`sparktui/remote/probe_resident.bash`), asked once a tick over its own channel,
instead of a new SSH session and shell every tick.

It runs `probe.sh` as a function, so the answer is the one-off probe's output and
`parse_probe()` reads it unchanged; between ticks it keeps what has not changed (see the
bash file) and reads the GPUs from one `nvidia-smi -lms` loop. A node without bash, or a
session that cannot start, falls back to the one-off probe, and the session is tried again
after `RETRY` seconds; a session that breaks or times out is closed and started again.
Every request is recorded in the transport's `sent`, as a one-off probe is.
"""

from __future__ import annotations

import asyncio
import logging
import time

from sparktui.core.command import Command, Result
from sparktui.core.transport import Session, Transport, TransportError
from sparktui.remote import script

log = logging.getLogger(__name__)

RESIDENT_SCRIPT = script("probe_resident.bash")
BANNER = b"@@sparktui:resident 1@@\n"
END = b"@@sparktui:end@@\n"
# probe.sh's positional parameters $7-$9 (0-based 6-8 of build_probe's args) are the helper
# programs: constant, so the session is given them once when it starts
CONSTANT = slice(6, 9)
START_TIMEOUT = 15.0
RETRY = 60.0  # seconds before a node whose session failed is tried again


def _args(command: Command) -> tuple[str, ...]:
    """probe.sh's positional parameters in a `build_probe()` command (`sh -c S sh ARGS`)."""
    assert command.argv[:2] == ("sh", "-c") and len(command.argv) >= 13, command.argv[:2]
    return command.argv[4:]


def session_command(probe: Command, interval: float) -> Command:
    """The command that starts the resident probe for `probe`'s node."""
    args = _args(probe)
    return Command(
        (
            "bash",
            "-c",
            RESIDENT_SCRIPT,
            "bash",
            probe.argv[2],
            *args[CONSTANT],
            str(max(200, int(interval * 1000))),
        ),
        mutating=False,
        timeout=None,
        description=f"resident probe {probe.description or ''}".strip(),
    )


SAME = "\x01"  # in a request: the argument the last request had at this place


def variable_args(probe: Command) -> tuple[str, ...]:
    """The arguments a request carries: probe.sh's less the constant ones."""
    args = _args(probe)
    return args[: CONSTANT.start] + args[CONSTANT.stop :]


def request(args: tuple[str, ...], last: tuple[str, ...] | None = None) -> bytes:
    """One tick's request: the count of `args`, then each NUL-terminated, or SAME where it
    equals the `last` request's argument at that place."""
    if any("\0" in a or a == SAME for a in args):
        raise ValueError("a probe argument holds a NUL byte or is \\x01")
    last = last or ()
    parts = [SAME if i < len(last) and a == last[i] else a for i, a in enumerate(args)]
    return (f"{len(args)}\0" + "".join(f"{p}\0" for p in parts)).encode()


class ResidentProbes:
    """The nodes' resident probe sessions of one monitor."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._retry_at: dict[str, float] = {}
        self._last: dict[str, tuple[str, ...]] = {}  # each session's last request
        self._closing: list[Session] = []  # closed, not yet waited for
        self.starts: dict[str, int] = {}  # sessions started per node (tests, bench)
        self.fallbacks: dict[str, int] = {}  # one-off probes run instead, per node

    def active(self, name: str) -> bool:
        return name in self._sessions

    async def run(self, name: str, transport: Transport, probe: Command) -> Result:
        """`probe` through the node's session, started when needed; the one-off probe
        while the node has none."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            sess = self._sessions.get(name) or await self._start(name, transport, probe)
            if sess is None:
                self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
                return await transport.run(probe)
            transport._admit(probe)  # recorded as the one-off probe would be
            start = time.monotonic()
            args = variable_args(probe)
            try:
                ask = sess.ask(request(args, self._last.get(name)), END)
                self._last[name] = args
                out = await asyncio.wait_for(ask, probe.timeout)
            except asyncio.TimeoutError:
                self._drop(name, retry=False)
                return Result(None, "", f"timed out after {probe.timeout:g}s", timed_out=True)
            except asyncio.CancelledError:
                self._drop(name, retry=False)  # its answer would arrive in the next ask
                raise
            except Exception as e:  # noqa: BLE001 - the session broke: the one-off probe
                log.debug("%s: resident probe broke: %s", name, e)
                self._drop(name, retry=True)
                return await transport.run(probe)
            res = Result(0, out.decode("utf-8", "replace"), "")
            res.duration = time.monotonic() - start
            return res

    async def _start(self, name: str, transport: Transport, probe: Command) -> Session | None:
        if time.monotonic() < self._retry_at.get(name, 0.0):
            return None
        sess: Session | None = None
        try:
            sess = await transport.session(session_command(probe, self.interval))
            await asyncio.wait_for(sess.read_until(BANNER), START_TIMEOUT)
        except NotImplementedError:
            self._retry_at[name] = float("inf")
            return None
        except (TransportError, OSError, EOFError, asyncio.TimeoutError) as e:
            log.debug("%s: no resident probe: %s", name, e)
            if sess is not None:
                sess.close()
                self._closing.append(sess)
            self._retry_at[name] = time.monotonic() + RETRY
            return None
        self.starts[name] = self.starts.get(name, 0) + 1
        self._sessions[name] = sess
        return sess

    def _drop(self, name: str, *, retry: bool) -> None:
        sess = self._sessions.pop(name, None)
        self._last.pop(name, None)
        if sess is not None:
            self._closing.append(sess)
            try:
                sess.close()
            except Exception:  # noqa: BLE001 - a broken channel closes as it can
                log.debug("%s: closing the resident probe failed", name, exc_info=True)
        if retry:
            self._retry_at[name] = time.monotonic() + RETRY

    def close(self) -> None:
        """Close every session (each bash ends at the end of its stdin, and stops the
        helpers it started)."""
        for name in list(self._sessions):
            self._drop(name, retry=False)

    async def aclose(self) -> None:
        """close(), then wait (briefly) until each session's command has ended."""
        sessions = list(self._sessions.values()) + self._closing
        self._closing = []
        self.close()
        await asyncio.gather(*(s.wait_closed() for s in sessions), return_exceptions=True)
