"""The resident probe (core/resident.py, remote/probe_resident.bash): the real bash through
LocalTransport on this machine, against a real HTTP server and the lab's stand-in nvidia-smi
(the real tool's formats, `-lms` loop included); its answers are the one-off probe's."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from sparktui.core.command import Command, Result
from sparktui.core.probes.script import build_probe, parse_probe
from sparktui.core.resident import SAME, ResidentProbes, request, session_command, variable_args
from sparktui.core.transport import LocalTransport, Transport
from tests.unit.test_probes_script import closed_port, http_server  # noqa: F401 - fixture

STAND_IN = Path(__file__).resolve().parents[1] / "lab" / "gpu" / "nvidia-smi"


def test_a_request_is_the_count_then_each_argument_or_same() -> None:
    assert request(("a", "", "b c")) == b"3\0a\0\0b c\0"
    assert request(("a", "x", "b c"), ("a", "", "b c")) == f"3\0{SAME}\0x\0{SAME}\0".encode()
    with pytest.raises(ValueError):
        request(("a\0b",))


def test_the_helper_programs_travel_once_not_in_every_request() -> None:
    probe = build_probe("n", "c", True, 8000, gcs_port=6379)
    start = session_command(probe, 2.0)
    assert start.argv[:2] == ("bash", "-c") and not start.mutating
    assert probe.argv[2] in start.argv and start.argv[-1] == "2000"  # probe.sh; the GPU loop ms
    args = variable_args(probe)
    assert len(args) == len(probe.argv[4:]) - 3
    assert all(len(a) < 200 for a in args)  # ray_nodes.py, probe_env.sh, http_get.py stay out


def _sections(stdout: str) -> dict[str, str]:
    return {k: v.status for k, v in parse_probe(stdout).sections.items()}


async def test_answers_are_the_one_off_probes(http_server) -> None:  # noqa: F811
    port, seen = http_server
    # an established TCP connection to a "GCS" port: awk lists it in the one-off probe, bash
    # in the resident one
    gcs = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(gcs.getsockname())
    conn, _ = gcs.accept()
    client_port = client.getsockname()[1]
    probe = build_probe("head", None, True, port, query_ray=False, gcs_port=gcs.getsockname()[1])
    t = LocalTransport("local")
    try:
        one_off = await t.run(probe)
        rp = ResidentProbes(2.0)
        try:
            answers = [await rp.run("local", t, probe) for _ in range(3)]
        finally:
            await rp.aclose()
    finally:
        for s in (conn, client, gcs):
            s.close()
    peer = "%08X:%04X" % (0x0100007F, client_port)  # noqa: UP031 - /proc/net/tcp
    assert peer in parse_probe(one_off.stdout).sections["gcs_conns"].body.split()
    assert rp.starts == {"local": 1} and rp.fallbacks == {}
    ref = parse_probe(one_off.stdout)
    for a in answers:
        got = parse_probe(a.stdout)
        assert a.ok and _sections(a.stdout) == _sections(one_off.stdout)
        assert got.hostname == ref.hostname and got.mem.total_mib == ref.mem.total_mib
        assert got.interfaces == ref.interfaces
        assert got.vllm is not None and ref.vllm is not None
        assert got.vllm.healthy and got.vllm.version == ref.vllm.version == "0.32.0"
        assert got.vllm.generation_tokens_total == ref.vllm.generation_tokens_total
        assert got.sections["gcs_conns"].body == ref.sections["gcs_conns"].body
    # bash's own HTTP client asked vLLM: health and metrics every time
    assert sum(p == "/health" for p in seen) == 4 and sum(p == "/metrics" for p in seen) == 4
    # every request is recorded as the one-off probe is
    assert sum(r.argv == probe.argv for r in t.sent) == 4


def _loop_pids() -> set[int]:
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"nvidia-smi" in cmd and b"-lms" in cmd and b"sparktui-resident-test" in cmd:
                out.add(int(d))
    return out


async def test_gpus_come_from_one_nvidia_smi_loop_that_ends_with_the_session(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "sparktui-resident-test"
    bin_dir.mkdir()
    shutil.copy(STAND_IN, bin_dir / "nvidia-smi")
    probe = build_probe("n", None, False, None, query_ray=False)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}

    class WithPath(LocalTransport):
        def _env(self, command: Command) -> dict[str, str] | None:
            return {**os.environ, **env}

    t = WithPath("local")
    one_off = parse_probe((await t.run(probe)).stdout)
    assert one_off.gpus and one_off.gpus[0].name == "NVIDIA GB10"
    rp = ResidentProbes(0.2)
    try:
        first = await rp.run("n", t, probe)  # runs nvidia-smi itself, then starts the loop
        assert _sections(first.stdout)["gpus"] == "rc=0"
        deadline = time.monotonic() + 10
        while not _loop_pids() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        pids = _loop_pids()
        assert len(pids) == 1
        await asyncio.sleep(0.6)
        for _ in range(3):
            got = parse_probe((await rp.run("n", t, probe)).stdout)
            assert [(g.index, g.name, g.uuid, g.power_w) for g in got.gpus] == [
                (g.index, g.name, g.uuid, g.power_w) for g in one_off.gpus
            ]
            await asyncio.sleep(0.3)
    finally:
        await rp.aclose()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in pids), "the loop outlived its session"


class _NoSessions(LocalTransport):
    async def _session(self, command: Command):
        raise NotImplementedError


class _EndsAtOnce(LocalTransport):
    async def _session(self, command: Command):
        return await super()._session(Command(("sh", "-c", "exit 0"), mutating=False))


@pytest.mark.parametrize("transport", [_NoSessions, _EndsAtOnce])
async def test_without_a_session_the_one_off_probe_answers(transport: type[Transport]) -> None:
    probe = build_probe("n", None, False, None, query_ray=False)
    rp = ResidentProbes(2.0)
    t = transport("local")
    try:
        res: Result = await rp.run("n", t, probe)
        again: Result = await rp.run("n", t, probe)  # not tried again at once
    finally:
        await rp.aclose()
    assert res.ok and "@@sparktui:end@@" in res.stdout and again.ok
    assert rp.starts == {} and rp.fallbacks == {"n": 2}
