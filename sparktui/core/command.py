"""Remote commands as argv lists, declared mutating or not, quoted only at the edge."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Command:
    """A command to run on one node.

    `argv` is never passed through f-string shell building: `shell()` quotes it with
    `shlex.join` when (and only when) a transport needs a command line. `mutating`
    declares whether it changes the node; a read-only transport refuses mutating ones.
    """

    argv: tuple[str, ...]
    mutating: bool = False
    timeout: float | None = 30.0
    stdin: str | None = None
    description: str = ""
    env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("empty command")
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))

    def shell(self) -> str:
        line = shlex.join(self.argv)
        if self.env:
            line = shlex.join(["env", *(f"{k}={v}" for k, v in self.env)]) + " " + line
        return line

    def masked(self) -> str:
        """`shell()` with secret-looking values masked (`NAME=value`, `--token value`): the
        command line as messages, errors and logs may show it."""
        from sparktui.core.secrets import mask_argv

        line = shlex.join(mask_argv(self.argv))
        if self.env:
            env = mask_argv([f"{k}={v}" for k, v in self.env])
            line = shlex.join(["env", *env]) + " " + line
        return line

    def __str__(self) -> str:
        return self.shell()


def cmd(*argv: str, mutating: bool = False, timeout: float | None = 30.0, **kw) -> Command:
    return Command(tuple(argv), mutating=mutating, timeout=timeout, **kw)


def sh(
    script: str, *args: str, mutating: bool = False, timeout: float | None = 30.0, **kw
) -> Command:
    """A constant shell script; variable data goes in as positional parameters ($1, $2 ...).

    The script text must be a literal written in this package (a file of `sparktui.remote`,
    loaded with `script(name)`), never built from config values: config values travel only
    as `args`, so quoting cannot be broken.
    """
    return Command(("sh", "-c", script, "sh", *args), mutating=mutating, timeout=timeout, **kw)


@dataclass
class Result:
    exit_status: int | None  # None: killed by signal or timed out
    stdout: str
    stderr: str
    duration: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def tail(self, n: int = 10) -> str:
        text = self.stderr.strip() or self.stdout.strip()
        return "\n".join(text.splitlines()[-n:])
