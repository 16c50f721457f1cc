"""Log followers on real files through LocalTransport: tail -F semantics, exact resume."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from sparktui.core.logs import (
    TRUNCATED_MARK,
    DockerLogFollower,
    FileFollower,
    LogBatch,
    merge,
    ray_worker_logs,
    stream_trouble,
)
from sparktui.core.transport import LocalTransport, TransportError

pytestmark = pytest.mark.usefixtures("reap_subprocesses")

FAST = {"poll_interval": 0.05, "backoff": (0.05, 0.2)}


@pytest.fixture(params=["auto", "sh"])
def engine(request) -> str:
    """Every FileFollower test runs with both node-side engines (python3 and the sh loop)."""
    return request.param


async def collect(
    follower, until, timeout: float = 20.0, lines: list[str] | None = None
) -> list[LogBatch]:
    """Batches until `until(lines, batches)` is true (or fail after `timeout`)."""
    batches: list[LogBatch] = []
    lines = [] if lines is None else lines

    async def run() -> None:
        async for b in follower.batches():
            batches.append(b)
            lines.extend(b.lines)
            if until(lines, batches):
                return

    try:
        await asyncio.wait_for(run(), timeout)
    except asyncio.TimeoutError:
        pytest.fail(
            f"timed out; got {len(lines)} lines, last {lines[-3:]}, "
            f"events {[e for b in batches for e in b.events]}"
        )
    return batches


def lines_of(batches: list[LogBatch]) -> list[str]:
    return [ln for b in batches for ln in b.lines]


def events_of(batches: list[LogBatch]) -> list[str]:
    return [e for b in batches for e in b.events]


async def test_initial_lines_then_appends_rotation_and_truncation(tmp_path, engine):
    p = tmp_path / "vllm.log"
    p.write_text("".join(f"old {i}\n" for i in range(10)))
    f = FileFollower(LocalTransport("spark-1"), str(p), initial_lines=3, engine=engine, **FAST)

    seen: list[str] = []

    async def shown(line: str) -> None:
        while line not in seen:
            await asyncio.sleep(0.02)

    async def writer() -> None:
        await shown("old 9")
        with open(p, "a") as fh:
            fh.write("new 1\nnew 2\npart")
        await shown("new 2")
        with open(p, "a") as fh:
            fh.write("ial\n")
        await shown("partial")
        os.rename(p, tmp_path / "vllm.log.1")  # logrotate: rename, then new file
        with open(tmp_path / "vllm.log.1", "a") as fh:
            fh.write("late old\nunfinished")
        await asyncio.sleep(0.1)
        p.write_text("rot 1\n")
        await shown("rot 1")
        p.write_text("")  # copytruncate
        await asyncio.sleep(0.5)
        p.write_text("after trunc\n")

    w = asyncio.create_task(writer())
    batches = await collect(f, lambda lines, _: "after trunc" in lines, lines=seen)
    await w
    assert lines_of(batches) == [
        "old 7",
        "old 8",
        "old 9",
        "new 1",
        "new 2",
        "partial",
        "late old",
        "unfinished",
        "rot 1",
        "after trunc",
    ]
    ev = " | ".join(events_of(batches))
    assert "rotated" in ev and "truncated" in ev
    assert all(b.node == "spark-1" and b.source == str(p) for b in batches)
    # line numbers are continuous across batches
    n = 1
    for b in batches:
        assert b.first_line == n
        n += len(b.lines)


async def test_missing_file_is_waited_for_and_read_from_its_start(tmp_path, engine):
    p = tmp_path / "later.log"
    f = FileFollower(LocalTransport("n"), str(p), initial_lines=1, engine=engine, **FAST)

    async def writer() -> None:
        await asyncio.sleep(0.3)
        p.write_text("a\nb\nc\n")

    w = asyncio.create_task(writer())
    batches = await collect(f, lambda lines, _: len(lines) >= 3)
    await w
    assert lines_of(batches) == ["a", "b", "c"]
    assert any("does not exist" in e for e in events_of(batches))
    # what the log pane shows as trouble, and what as news, on these real events
    assert {e.split()[0]: stream_trouble(e) for e in events_of(batches)} == {
        str(p): True,
        "following": False,
    }


async def test_long_lines_are_cut_and_bad_utf8_replaced(tmp_path, engine):
    p = tmp_path / "x.log"
    p.write_bytes(b"\xff\xfebad\n" + b"L" * 300_000 + b"\nshort\n")
    f = FileFollower(
        LocalTransport("n"), str(p), from_start=True, max_line=1000, engine=engine, **FAST
    )
    batches = await collect(f, lambda lines, _: "short" in lines)
    got = lines_of(batches)
    assert got[0] == "\ufffd\ufffdbad"
    assert got[1] == "L" * 1000 + TRUNCATED_MARK.format(n=299_000)
    assert got[2] == "short"


def _pids_following(path: Path) -> list[int]:
    """Our node-side followers (`sh -c SCRIPT name <path> ...` or
    `python3 -I -S -c PROGRAM <path> ...`): found by their unique path."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] in (b"sh", b"python3") and bytes(path) in argv[3:6]:
            out.append(int(d.name))
    return out


async def _numbered_writer(p: Path, total: int, burst: int = 200) -> None:
    i = 0
    rng = random.Random(1)
    while i < total:
        n = min(burst, total - i)
        with open(p, "a") as fh:
            # lines split across writes on purpose: a partial line may sit at EOF
            chunk = "".join(f"line {j:06d} {'x' * rng.randint(0, 120)}\n" for j in range(i, i + n))
            cut = rng.randint(0, len(chunk))
            fh.write(chunk[:cut])
            fh.flush()
            await asyncio.sleep(0.005)
            fh.write(chunk[cut:])
        i += n
        await asyncio.sleep(0.01)


def _check_sequence(lines: list[str], total: int) -> None:
    numbers = [int(ln.split()[1]) for ln in lines]
    assert numbers == list(range(total)), (
        f"lost {sorted(set(range(total)) - set(numbers))[:5]}, "
        f"repeated {[n for n in set(numbers) if numbers.count(n) > 1][:5]}"
    )


async def test_killing_the_remote_follower_loses_and_repeats_nothing(tmp_path, engine):
    p = tmp_path / "numbered.log"
    p.write_text("")
    total = 6000
    f = FileFollower(LocalTransport("n"), str(p), from_start=True, engine=engine, **FAST)
    kills = 0

    async def killer() -> None:
        nonlocal kills
        while kills < 6:
            await asyncio.sleep(0.15)
            for pid in _pids_following(p):
                os.kill(pid, signal.SIGKILL)
                kills += 1

    w = asyncio.create_task(_numbered_writer(p, total))
    k = asyncio.create_task(killer())
    batches = await collect(
        f,
        lambda lines, _: len(lines) >= total and lines[-1].startswith(f"line {total - 1:06d}"),
        timeout=60,
    )
    await w
    k.cancel()
    assert kills >= 3 and f.reconnects >= 3
    _check_sequence(lines_of(batches), total)
    assert any("connection lost" in e for e in events_of(batches))
    assert any("resumed" in e for e in events_of(batches))


class FlakyTransport(LocalTransport):
    """Drops the stream like a lost SSH connection: mid-chunk, at random."""

    def __init__(self, node: str, seed: int = 3, p: float = 0.25) -> None:
        super().__init__(node)
        self.rng = random.Random(seed)
        self.p = p
        self.drops = 0

    async def _stream(self, command):
        gen = super()._stream(command)
        try:
            async for chunk in gen:
                if self.drops < 8 and self.rng.random() < self.p:
                    self.drops += 1
                    yield chunk[: self.rng.randint(0, len(chunk))]
                    raise TransportError(f"{self.node}: connection lost (simulated)")
                yield chunk
        finally:
            await gen.aclose()


async def test_dropped_connection_mid_frame_resumes_exactly(tmp_path, engine):
    p = tmp_path / "numbered.log"
    p.write_text("")
    total = 4000
    t = FlakyTransport("spark-2")
    f = FileFollower(t, str(p), from_start=True, max_block=4096, engine=engine, **FAST)
    w = asyncio.create_task(_numbered_writer(p, total, burst=100))
    batches = await collect(f, lambda lines, _: len(lines) >= total, timeout=60)
    await w
    assert t.drops >= 3
    _check_sequence(lines_of(batches), total)
    assert all(b.node == "spark-2" for b in batches)


async def test_position_resumes_a_new_follower_where_the_old_one_stopped(tmp_path, engine):
    p = tmp_path / "a.log"
    p.write_text("".join(f"l{i}\n" for i in range(5)))
    f1 = FileFollower(LocalTransport("n"), str(p), from_start=True, engine=engine, **FAST)
    await collect(f1, lambda lines, _: len(lines) >= 5)
    ino, off = f1.position
    assert (ino, off) == (str(p.stat().st_ino), p.stat().st_size)
    with open(p, "a") as fh:
        fh.write("l5\nl6\n")
    f2 = FileFollower(LocalTransport("n"), str(p), engine=engine, **FAST)
    f2.inode, f2.offset = ino, off
    batches = await collect(f2, lambda lines, _: len(lines) >= 2)
    assert lines_of(batches) == ["l5", "l6"]


async def test_batches_are_bounded(tmp_path, engine):
    p = tmp_path / "big.log"
    p.write_text("".join(f"{i}\n" for i in range(5000)))
    f = FileFollower(
        LocalTransport("n"),
        str(p),
        from_start=True,
        max_batch_lines=300,
        queue_size=2,
        engine=engine,
        **FAST,
    )
    batches = await collect(f, lambda lines, _: len(lines) >= 5000)
    assert max(len(b.lines) for b in batches) <= 300
    assert lines_of(batches) == [str(i) for i in range(5000)]
    assert f._queue.maxsize == 2


async def test_callback_api_and_stop(tmp_path, engine):
    p = tmp_path / "c.log"
    p.write_text("one\ntwo\n")
    f = FileFollower(LocalTransport("n"), str(p), engine=engine, **FAST)
    seen: list[str] = []

    async def cb(batch: LogBatch) -> None:
        seen.extend(batch.lines)
        if len(seen) >= 2:
            f.stop()

    await asyncio.wait_for(f.run(cb), 10)
    assert seen == ["one", "two"]
    await asyncio.sleep(0.2)
    assert _pids_following(p) == []  # the remote command ended with the follower


async def test_merge_tags_batches_with_their_node(tmp_path, engine):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("from a\n")
    b.write_text("from b\n")
    fa = FileFollower(LocalTransport("spark-1"), str(a), engine=engine, **FAST)
    fb = FileFollower(LocalTransport("spark-2"), str(b), engine=engine, **FAST)
    got: dict[str, list[str]] = {}

    async def run() -> None:
        async for batch in merge([fa, fb]):
            got.setdefault(batch.node, []).extend(batch.lines)
            if sum(map(len, got.values())) >= 2:
                return

    await asyncio.wait_for(run(), 10)
    assert got == {"spark-1": ["from a"], "spark-2": ["from b"]}


async def test_ray_worker_logs_lists_newest_first(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    for i, name in enumerate(
        ["worker-aa-01-100.err", "worker-bb-01-442.err", "worker-bb-01-442.out", "raylet.out"]
    ):
        (d / name).write_text("x\n")
        os.utime(d / name, (1000 + i, 1000 + i))
    t = LocalTransport("n")
    all_logs = await ray_worker_logs(t, log_dir=str(d))
    assert all_logs == [
        str(d / "worker-bb-01-442.out"),
        str(d / "worker-bb-01-442.err"),
        str(d / "worker-aa-01-100.err"),
    ]
    assert await ray_worker_logs(t, log_dir=str(d), pid="442", limit=1) == [
        str(d / "worker-bb-01-442.out")
    ]


async def test_the_node_side_follower_ends_once_its_reader_is_gone(tmp_path, engine):
    """A dropped SSH channel closes the remote stdout without a signal: the program on the
    node must notice and end by itself, never linger there (python3: POLLERR on stdout at
    once; sh: its idle heartbeat hits SIGPIPE within one event wait)."""
    p = tmp_path / "idle.log"
    p.write_text("only line\n")
    f = FileFollower(LocalTransport("n"), str(p), event_wait=0.5, engine=engine, **FAST)
    argv = f._command().argv
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), 10)
        assert first.startswith(b"@@SPTUI F "), first
        await asyncio.sleep(0.3)  # idle now: waiting for the file to grow
        assert proc.returncode is None
        proc._transport.get_pipe_transport(1).close()  # the reader goes away, no signal
        await asyncio.wait_for(proc.wait(), 10)
        assert _pids_following(p) == []
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_node_whose_python3_fails_is_followed_by_the_shell_loop(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    broken = bin_dir / "python3"  # what an unusable interpreter prints instead of frames
    broken.write_text(
        "#!/bin/sh\necho 'python3: error while loading shared libraries' >&2\nexit 127\n"
    )
    broken.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    p = tmp_path / "vllm.log"
    p.write_text("one\ntwo\n")
    f = FileFollower(LocalTransport("spark-1"), str(p), from_start=True, **FAST)
    assert f.engine == "auto"

    async def append() -> None:
        await asyncio.sleep(0.5)
        with open(p, "a") as fh:
            fh.write("three\n")

    w = asyncio.create_task(append())
    batches = await collect(f, lambda lines, _: "three" in lines)
    await w
    assert lines_of(batches) == ["one", "two", "three"]
    assert f.engine == "sh"
    assert any(
        "python3 on spark-1 could not follow" in e and "shell loop" in e for e in events_of(batches)
    )


async def test_other_unframed_output_does_not_switch_engines(tmp_path, monkeypatch):
    """`docker exec` failing (the container is gone) is not python3's fault: the follower
    keeps its engine and retries, and says what the node answered."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"  # what docker prints when the container does not exist
    fake.write_text(
        "#!/bin/sh\necho 'Error response from daemon: No such container: ray' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    f = FileFollower(LocalTransport("spark-2"), "/tmp/ray/x.err", container="ray", **FAST)
    batches = await collect(
        f, lambda _l, bs: sum("connection lost" in e for b in bs for e in b.events) >= 2
    )
    assert f.engine == "auto"
    assert any("No such container" in e for e in events_of(batches))
    assert not any("python3" in e for e in events_of(batches))
    f.stop()


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="engine"):
        FileFollower(LocalTransport("n"), "/tmp/x.log", engine="perl")


# --- docker logs -f ------------------------------------------------------------------------

FAKE_DOCKER = textwrap.dedent("""\
    #!{python}
    # A stand-in for `docker logs -f -t [--since TS | --tail N] -- NAME`: serves NAME.log
    # (lines "RFC3339NANO text") from this directory, inclusive of --since like docker.
    import os, sys, time
    from datetime import datetime
    a = sys.argv[1:]
    assert a[:3] == ["logs", "-f", "-t"], a
    name = a[-1]
    since = a[a.index("--since") + 1] if "--since" in a else None
    tail = int(a[a.index("--tail") + 1]) if "--tail" in a else None
    def key(ts):
        base, _, frac = ts.rstrip("Z").partition(".")
        return (base, frac.ljust(9, "0"))
    path = os.path.join(os.path.dirname(__file__), name + ".log")
    sent = 0
    first = True
    while True:
        with open(path) as f:
            lines = f.read().splitlines(True)
        complete = [l for l in lines if l.endswith("\\n")]
        todo = complete[sent:]
        if first:
            if since is not None:
                todo = [l for l in todo if key(l.split(" ", 1)[0]) >= key(since)]
            elif tail is not None:
                todo = todo[-tail:] if tail else []
            first = False
        sys.stdout.write("".join(todo))
        sys.stdout.flush()
        sent = len(complete)
        time.sleep(0.03)
""")


async def test_docker_logs_follower_resumes_with_since(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER.format(python=sys.executable))
    fake.chmod(0o755)
    log = bin_dir / "vllm_node.log"
    log.write_text("")
    total = 1500

    async def writer() -> None:
        for i in range(total):
            # several lines share a timestamp: resume must not repeat or lose them
            ts = f"2026-11-29T22:{(i // 600) % 60:02d}:{(i // 10) % 60:02d}.{(i // 3):09d}Z"
            with open(log, "a") as fh:
                fh.write(f"{ts} line {i:06d}\n")
            if i % 50 == 0:
                await asyncio.sleep(0.01)

    t = FlakyTransport("spark-1", seed=11, p=0.6)
    f = DockerLogFollower(
        t, "vllm_node", docker=str(fake), initial_lines=100_000, backoff=(0.05, 0.2)
    )
    w = asyncio.create_task(writer())
    batches = await collect(f, lambda lines, _: len(lines) >= total, timeout=60)
    await w
    assert t.drops >= 2
    _check_sequence(lines_of(batches), total)
    assert f.source == "docker logs vllm_node"


def test_docker_timestamps_compare_with_variable_precision():
    k = DockerLogFollower.ts_key
    assert (
        k(b"2026-11-29T22:00:00Z")
        < k(b"2026-11-29T22:00:00.5Z")
        < k(b"2026-11-29T22:00:00.500000001Z")
    )
    assert k(b"2026-11-29T22:00:00.1Z") == k(b"2026-11-29T22:00:00.100000000Z")
    assert k(b"nonsense") is None
