"""The combined probe: run for real through LocalTransport on this machine (no GPU, no
Docker daemon: the fallback paths), against a real local HTTP server for vLLM and the Ray
dashboard, and parsed from a real run against a private Docker engine
(tests/fixtures/docker/README.md)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparktui.core.command import Command
from sparktui.core.model import NodeState
from sparktui.core.probes.script import (
    ENV_SCRIPT,
    PROBE_SCRIPT,
    SECTION_NAMES,
    build_probe,
    parse_probe,
    split_sections,
)
from sparktui.core.transport import LocalTransport

FIX = Path(__file__).resolve().parents[1] / "fixtures"
METRICS = (FIX / "vllm" / "vllm_metrics_sample_under_load.txt").read_bytes()
DASHBOARD = (FIX / "ray" / "ray2node_case1_autodetect_dashboard_api_v0_nodes.json").read_bytes()


async def run(cmd: Command, **env: str):
    if env:
        cmd = dataclasses.replace(cmd, env=tuple(env.items()))
    return await LocalTransport("local").run(cmd)


def tool_dir(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only `tools` (symlinks to the real binaries)."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for t in ("sh", *tools):
        real = shutil.which(t)
        if real:
            (d / t).symlink_to(real)
    return str(d)


@pytest.fixture
def http_server() -> Iterator[tuple[int, list[str]]]:
    """A real HTTP server on loopback: vLLM's /health, /metrics, /version and the Ray
    dashboard's /api/v0/nodes, answering with the real captures."""
    seen: list[str] = []
    routes = {
        "/health": (200, b""),
        "/metrics": (200, METRICS),
        "/version": (200, b'{"version": "0.32.0"}'),
        "/api/v0/nodes": (200, DASHBOARD),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            seen.append(self.path)
            code, body = routes.get(path, (404, b"not found"))
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield srv.server_address[1], seen
    finally:
        srv.shutdown()
        srv.server_close()


def closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_real_run_on_this_machine(tmp_path: Path) -> None:
    cmd = build_probe(
        "here", "vllm_node", is_head=True, vllm_port=closed_port(), ray_dashboard_port=closed_port()
    )
    r = await run(cmd, DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
    assert r.exit_status == 0 and r.duration < 10
    res = parse_probe(r.stdout)
    assert res.complete
    assert {
        "probe",
        "hostname",
        "addr",
        "containers",
        "env",
        "gpus",
        "gpu_apps",
        "meminfo",
        "health",
    } <= set(res.sections)
    assert res.hostname == os.uname().nodename
    assert any("127.0.0.1" in i.ipv4 for i in res.interfaces)
    assert res.mem.total_mib and res.mem.total_mib > 0
    if shutil.which("nvidia-smi") is None:
        assert res.sections["gpus"].missing and "gpus" in res.missing and res.gpus == []
        assert "gpus" not in res.errors
    if shutil.which("docker"):
        c = res.sections["containers"]
        assert c.rc not in (0, None) and "containers" in res.errors
        assert res.sections["env"].status == "skipped:docker-failed"
        assert res.ray_error and res.ray_nodes is None  # container not running: not asked
    assert res.vllm is not None and res.vllm.healthy is None  # nothing listens on the port
    assert "health" not in res.errors
    node = res.apply_to(NodeState("here", "localhost", "head", None))
    assert node.reachable and node.interfaces == res.interfaces and node.mem_total_mib


async def test_missing_tools_are_marked_missing(tmp_path: Path) -> None:
    path = tool_dir(tmp_path, "uname", "cat")
    r = await run(build_probe("bare", "vllm_node", True, 8000), PATH=path)
    res = parse_probe(r.stdout)
    assert res.complete and res.errors == {}
    for name in ("addr", "containers", "gpus", "gpu_apps"):
        assert res.sections[name].status == "missing", name
    assert res.sections["env"].status == "skipped:no-docker"
    assert res.sections["ray"].status == "skipped:no-docker"
    assert res.sections["health"].status == "unavailable"
    assert res.vllm is not None and res.vllm.healthy is None and "no HTTP client" in res.vllm.detail
    assert res.hostname and res.mem.total_mib  # what is there is still read


async def test_ip_text_fallback_when_json_fails(tmp_path: Path) -> None:
    # an `ip` that rejects -j like iproute2 < 4.14 does; the real one answers the rest
    real_ip = shutil.which("ip")
    if real_ip is None:
        pytest.skip("no ip")
    path = tool_dir(tmp_path, "uname", "cat")
    fake = Path(path) / "ip"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = -j ]; then echo \'Option "-j" is unknown, try '
        f'"ip -help".\' >&2; exit 255; fi\nexec {real_ip} "$@"\n'
    )
    fake.chmod(0o755)
    res = parse_probe((await run(build_probe("old", None, False), PATH=path)).stdout)
    assert res.sections["addr"].rc == 255 and "-j" in res.sections["addr"].stderr
    assert res.sections["addr4"].ok and res.sections["link"].ok
    assert "addr" not in res.errors
    assert any("127.0.0.1" in i.ipv4 and i.state == "UP" for i in res.interfaces)


async def test_vllm_and_ray_dashboard_over_real_http(http_server) -> None:
    if shutil.which("curl") is None:
        pytest.skip("no curl")
    port, seen = http_server
    cmd = build_probe("head", "vllm_node", True, port, ray_dashboard_port=port)
    res = parse_probe((await run(cmd)).stdout)
    assert res.vllm is not None and res.vllm.healthy is True and res.vllm_http_code == 200
    assert res.vllm.running == 36.0 and res.vllm.generation_tokens_total == 12918.0
    assert res.vllm.version == "0.32.0"
    # /metrics is filtered on the node to the lines we read (gauges, counters, the TTFT and
    # inter-token latency histograms; the fixture has 309 lines)
    assert len(res.sections["metrics"].body.splitlines()) < 80
    assert res.ray_source == "dashboard" and res.ray_error is None
    assert {n.ip for n in res.ray_nodes or []} == {"198.18.1.101", "198.19.200.102"}
    assert "/api/v0/nodes?limit=10000" in seen


async def test_python_http_fallback_without_curl(http_server, tmp_path: Path) -> None:
    port, _ = http_server
    path = tool_dir(tmp_path, "uname", "cat", "python3", "grep")
    cmd = build_probe("head", None, True, port, query_ray=False)
    res = parse_probe((await run(cmd, PATH=path)).stdout)
    assert res.vllm is not None and res.vllm.healthy is True and res.vllm.running == 36.0
    assert res.sections["ray"].status == "skipped" and res.ray_nodes is None
    assert res.ray_error is None  # skipped on purpose this tick


async def test_skip_ray_and_worker_has_no_head_sections(tmp_path: Path) -> None:
    r = await run(
        build_probe("w", "vllm_node", False, 8000), DOCKER_HOST=f"unix://{tmp_path}/none.sock"
    )
    secs = parse_probe(r.stdout).sections
    assert not {"ray", "ray_dashboard", "health", "metrics"} & set(secs)


async def test_hostile_container_name_is_data(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    name = f"x'; touch {marker}; echo '$(touch {marker})`touch {marker}`"
    cmd = build_probe("n", name, True, None)
    assert cmd.argv[:3] == ("sh", "-c", PROBE_SCRIPT) and name not in cmd.argv[2]
    assert not cmd.mutating
    r = await run(cmd, DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    assert not marker.exists()
    assert f"container={name} " in split_sections(r.stdout)["probe"].body


def test_parse_real_run_against_private_docker_engine() -> None:
    out = (FIX / "docker" / "probe_head_private_dockerd.txt").read_text()
    res = parse_probe(out)
    assert res.complete
    assert {c.name: c.state for c in res.containers}["vllm_node"] == "running"
    assert len(res.containers) == 5
    # the env of the `python3 .../vllm serve` process started by `docker exec -e`, not PID 1
    assert (res.env_pid, res.env_source) == (43, "vllm")
    assert res.env == {
        "VLLM_HOST_IP": "192.168.100.10",
        "NCCL_SOCKET_IFNAME": "=enp1s0f1np1",
        "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
        "VLLM_API_KEY": "****",
    }
    # that image has no python3: the Ray query fails with a readable reason
    assert res.ray_nodes == [] and res.ray_error and "python3" in res.ray_error
    assert "gpus" in res.missing


def test_env_section_fixture_and_script_shape() -> None:
    body = (FIX / "env" / "docker_exec_probe_env_section.bin").read_text()
    assert body.startswith("pid=43 source=vllm\n") and "\0" in body
    # the script's own command line never matches what it looks for
    assert "vllm serve" not in ENV_SCRIPT and "api_server" not in ENV_SCRIPT
    assert "vllm serve" not in PROBE_SCRIPT


def test_garbage_and_cut_output() -> None:
    res = parse_probe("sh: 1: Syntax error\n")
    assert res.errors["probe"].startswith("no probe output") and not res.complete
    full = (FIX / "docker" / "probe_head_private_dockerd.txt").read_text()
    cut = full[: full.index("@@sparktui:gpus@@")]
    res = parse_probe(cut)
    assert not res.complete and res.containers and res.gpus == []
    node = res.apply_to(NodeState("n", "h", "head", None))
    assert node.error == "probe output was cut short"


async def test_every_section_seen_is_declared(tmp_path: Path) -> None:
    # what a real run and the captured runs emit is all in script.SECTIONS (the script side
    # is checked statically in test_remote_scripts.py)
    r = await run(
        build_probe(
            "here",
            "vllm_node",
            is_head=True,
            vllm_port=closed_port(),
            ray_dashboard_port=closed_port(),
        ),
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
    )
    outs = [r.stdout, (FIX / "docker" / "probe_head_private_dockerd.txt").read_text()]
    for out in outs:
        secs = split_sections(out)
        assert secs and set(secs) <= SECTION_NAMES, set(secs) - SECTION_NAMES


def test_undeclared_section_is_kept_but_not_parsed() -> None:
    out = (
        "@@sparktui:hostname@@\nspark-1\n@@sparktui:/hostname rc=0@@\n"
        "@@sparktui:newthing@@\nx\n@@sparktui:/newthing rc=1@@\n@@sparktui:end@@\n"
    )
    res = parse_probe(out)
    assert res.complete and res.hostname == "spark-1"
    assert "newthing" in res.sections and res.errors == {"newthing": "exit 1: x"}


# --- issue 19: who is connected to Ray's GCS ---------------------------------------------

# /proc/net/tcp6 rem_address column as the lab head printed it (v4-mapped), plus a
# /proc/net/tcp (v4) loopback row: a worker's two connections and the head's own ones
GCS_CONNS = """0000000000000000FFFF00000C0C13C6:E3D6
0000000000000000FFFF00000B0C13C6:E4FE
0000000000000000FFFF00000C0C13C6:86A8
0100007F:C4A2
"""


def test_gcs_conns_lists_remote_peers_without_the_heads_own():
    from sparktui.core.probes.script import parse_gcs_conns

    assert parse_gcs_conns(GCS_CONNS, {"198.19.12.11"}) == (
        "198.19.12.12:34472",
        "198.19.12.12:58326",
    )
    assert parse_gcs_conns("", set()) == ()


def test_probe_passes_the_gcs_port_in_hex():
    from sparktui.core.probes.script import build_probe

    assert build_probe("h", "c", True, gcs_port=6379).argv[-5] == "18EB"
    assert build_probe("h", "c", True).argv[-5] == ""  # not listed


def test_the_vllm_log_tail_rides_in_the_same_probe(tmp_path):
    """While vLLM starts, the end of its log comes in the one probe (no second command)."""
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 12-01 10:00:00 [api_server.py:1] vLLM API server version 0.11\n"
        "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:06<00:06]\n"
    )
    r = subprocess.run(
        build_probe("h", "", True, vllm_log=str(log), vllm_log_bytes=4096).argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    parsed = parse_probe(r.stdout)
    assert parsed.vllm_log_tail is not None
    first = parsed.vllm_log_tail.splitlines()[0]
    assert first.startswith("mtime=") and f"size={log.stat().st_size}" in first
    assert "4/8" in parsed.vllm_log_tail
    missing = subprocess.run(
        build_probe("h", "", True, vllm_log=str(tmp_path / "none")).argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert parse_probe(missing.stdout).vllm_log_tail.strip() == "missing"
    assert (
        parse_probe(
            subprocess.run(
                build_probe("h", "", True).argv, capture_output=True, text=True, timeout=60
            ).stdout
        ).vllm_log_tail
        is None
    )
