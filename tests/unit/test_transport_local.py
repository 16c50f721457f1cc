"""Commands as argv, read-only refusal and the sent-record, on real local processes."""

from __future__ import annotations

import asyncio

import pytest

from sparktui.core.command import Command, cmd, sh
from sparktui.core.transport import LocalTransport, ReadOnlyError


def test_shell_quoting_keeps_metacharacters_literal(tmp_path):
    canary = tmp_path / "canary"
    hostile = f"x; touch {canary}; $(touch {canary}) `touch {canary}` ' \" \n"
    c = cmd("printf", "%s", hostile)
    assert "touch" in c.shell()
    out = asyncio.run(LocalTransport("n").run(sh(c.shell())))
    assert out.ok and out.stdout == hostile
    assert not canary.exists()


def test_sh_passes_data_as_positional_args(tmp_path):
    canary = tmp_path / "canary"
    c = sh('printf "%s|%s" "$1" "$2"', f"; touch {canary}", "$(id)")
    r = asyncio.run(LocalTransport("n").run(c))
    assert r.stdout == f"; touch {canary}|$(id)"
    assert not canary.exists()


def test_read_only_refuses_mutating_and_records(tmp_path):
    t = LocalTransport("spark-1", read_only=True)
    target = tmp_path / "f"
    with pytest.raises(ReadOnlyError, match="spark-1: read-only"):
        asyncio.run(t.run(cmd("touch", str(target), mutating=True)))
    assert not target.exists()
    r = asyncio.run(t.run(cmd("true")))
    assert r.ok
    assert [(s.argv[0], s.mutating, s.refused) for s in t.sent] == [
        ("touch", True, True),
        ("true", False, False),
    ]


def test_timeout_and_missing_program():
    t = LocalTransport("n")
    r = asyncio.run(t.run(Command(("sleep", "5"), timeout=0.3)))
    assert r.timed_out and r.exit_status is None and r.duration < 2
    r = asyncio.run(t.run(cmd("definitely-not-a-program-xyz")))
    assert r.exit_status == 127


def test_stream_yields_output_until_exit():
    async def go():
        chunks = []
        async for c in LocalTransport("n").stream(sh("for i in 1 2 3; do echo $i; done")):
            chunks.append(c)
        return b"".join(chunks)

    assert asyncio.run(go()) == b"1\n2\n3\n"


def test_channels_are_bounded():
    t = LocalTransport("n")

    async def go():
        start = asyncio.get_running_loop().time()
        await asyncio.gather(*(t.run(cmd("sleep", "0.3")) for _ in range(8)))
        return asyncio.get_running_loop().time() - start

    # 8 commands, 4 at a time: two waves of 0.3 s
    assert asyncio.run(go()) >= 0.55
