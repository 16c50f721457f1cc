"""Doctor's own preflight findings (image, model path, memory, stale containers, ports,
VLLM_HOST_IP) on snapshots, and its probe run for real on this machine."""

from __future__ import annotations

import asyncio
import socket
import textwrap

from sparktui import config as config_mod
from sparktui.core.actions.doctor import (
    NodeExtras,
    doctor_command,
    doctor_findings,
    parse_doctor_probe,
    parse_listening,
    preflight_findings,
)
from sparktui.core.model import ClusterSnapshot, Container, Gpu, NodeState, VllmStatus
from sparktui.core.transport import LocalTransport

CFG = textwrap.dedent("""\
    nodes:
      - {name: spark-1, host: 198.18.250.11, ip: 198.19.250.11, role: head}
      - {name: spark-2, host: 198.18.250.12, ip: 198.19.250.12}
    container: {name: vllm_node, image: "img:1", run_args: [--network, host]}
    vllm: {model: /models/tiny, args: [--tensor-parallel-size, "2", --gpu-memory-utilization, "0.5"]}
""")


def cfg(text=CFG):
    return config_mod.parse(text, "c.yaml")


def node(name, ip, *, running=True, env=None, gpus=(), avail=None, containers=()):
    st = NodeState(
        name=name,
        host="h",
        role="head" if name == "spark-1" else "worker",
        configured_ip=ip,
        reachable=True,
    )
    if running:
        st.containers.append(
            Container("vllm_node", "img:1", "running", "Up 1 minute", command="ray start --block")
        )
    st.containers.extend(containers)
    st.env = dict(env if env is not None else {"VLLM_HOST_IP": ip})
    st.gpus = list(gpus)
    st.mem_available_mib = avail
    return st


def snap(nodes, *, ray_error=None, healthy=None):
    return ClusterSnapshot(
        "c",
        nodes,
        ray_source=None if ray_error else "spark-1",
        ray_error=ray_error,
        vllm=VllmStatus(healthy=healthy),
    )


def ids(findings):
    return sorted((f.id, f.node) for f in findings)


def healthy_pair():
    return [node("spark-1", "198.19.250.11"), node("spark-2", "198.19.250.12")]


def same_extras():
    return {
        "spark-1": NodeExtras(
            container_image="sha256:aa",
            image_id="sha256:aa",
            model="container",
            listening={22, 6379},
        ),
        "spark-2": NodeExtras(
            container_image="sha256:aa", image_id="sha256:aa", model="container", listening={22}
        ),
    }


def test_clean_cluster_has_no_preflight_findings():
    assert preflight_findings(cfg(), snap(healthy_pair()), same_extras()) == []


def test_image_differs_by_id_is_a_warning_by_digest_an_error():
    x = same_extras()
    x["spark-2"].container_image = "sha256:bb"
    f = preflight_findings(cfg(), snap(healthy_pair()), x)
    assert [(i.id, i.severity) for i in f] == [("image-mismatch", "warning")]
    x["spark-1"].repo_digests = ["img@sha256:11"]
    x["spark-2"].repo_digests = ["img@sha256:22"]
    f = preflight_findings(cfg(), snap(healthy_pair()), x)
    assert [(i.id, i.severity) for i in f] == [("image-mismatch", "error")]
    x["spark-2"].repo_digests = ["img@sha256:11"]  # same digest: same image, re-tagged ids
    assert preflight_findings(cfg(), snap(healthy_pair()), x) == []


def test_image_missing_when_no_container():
    nodes = [node("spark-1", "198.19.250.11", running=False), node("spark-2", "198.19.250.12")]
    x = same_extras()
    x["spark-1"] = NodeExtras(listening=set())
    assert ("image-missing", "spark-1") in ids(preflight_findings(cfg(), snap(nodes), x))


def test_model_path_missing_or_not_mounted():
    x = same_extras()
    x["spark-2"].model = "missing"
    x["spark-1"].model = "host"
    f = preflight_findings(cfg(), snap(healthy_pair()), x)
    assert ids(f) == [("model-path-missing", "spark-2"), ("model-path-not-mounted", "spark-1")]
    hub = cfg(CFG.replace("/models/tiny", "meta-llama/Llama-3.3-70B-Instruct"))
    assert preflight_findings(hub, snap(healthy_pair()), x) == []


def test_memory_unified_warning_discrete_error_skipped_while_serving():
    gb10 = Gpu(0, "NVIDIA GB10", 100_000, 120_000, unified=True)
    h200 = Gpu(0, "NVIDIA H200", 100_000, 140_000)
    nodes = [
        node("spark-1", "198.19.250.11", gpus=[gb10], avail=20_000),
        node("spark-2", "198.19.250.12", gpus=[h200]),
    ]
    f = preflight_findings(cfg(), snap(nodes), same_extras())
    assert [(i.id, i.node, i.severity) for i in f] == [
        ("insufficient-memory", "spark-1", "warning"),
        ("insufficient-memory", "spark-2", "error"),
    ]
    assert "0.5 x total" in f[0].message
    x = same_extras()
    x["spark-1"].listening.add(8000)
    f = preflight_findings(cfg(), snap(nodes, healthy=True), x)
    assert ids(f) == [("vllm-already-serving", "spark-1")]


def test_busy_ports_and_stale_containers():
    stale = Container("old-ray", "img:1", "running", "Up 3 days", command="ray start --head")
    nodes = [
        node("spark-1", "198.19.250.11", running=False, containers=[stale]),
        node("spark-2", "198.19.250.12"),
    ]
    x = same_extras()
    x["spark-1"].listening = {6379, 8000}
    f = preflight_findings(cfg(), snap(nodes, ray_error="Ray: ConnectionError"), x)
    assert ids(f) == [
        ("port-busy", "spark-1"),
        ("port-busy", "spark-1"),
        ("ray-unavailable", "spark-1"),
        ("stale-container", "spark-1"),
    ]
    # 6379 held by our own healthy Ray is fine
    assert preflight_findings(cfg(), snap(healthy_pair()), same_extras()) == []


def test_vllm_host_ip_unset_or_different():
    nodes = [
        node("spark-1", "198.19.250.11", env={}),
        node("spark-2", "198.19.250.12", env={"VLLM_HOST_IP": "198.18.250.12"}),
    ]
    f = preflight_findings(cfg(), snap(nodes), same_extras())
    assert [(i.id, i.node, i.severity) for i in f] == [
        ("vllm-host-ip-unset", "spark-1", "warning"),
        ("vllm-host-ip-mismatch", "spark-2", "error"),
    ]


def test_doctor_findings_keep_the_live_checks_and_sort_errors_first():
    from sparktui.core.model import Finding

    s = snap(healthy_pair())
    s.findings = [Finding("ray-ip-mismatch", "error", "spark-2", "m")]
    x = same_extras()
    x["spark-2"].container_image = "sha256:bb"
    f = doctor_findings(cfg(), s, x)
    assert [i.id for i in f] == ["ray-ip-mismatch", "image-mismatch"]


def test_parse_listening_on_this_machines_proc_net_tcp():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with open("/proc/net/tcp") as fh:
            text = fh.read()
        assert port in parse_listening(text)
    with socket.socket() as s2:  # bound but not listening: not reported
        s2.bind(("127.0.0.1", 0))
        with open("/proc/net/tcp") as fh:
            assert s2.getsockname()[1] not in parse_listening(fh.read())


def test_doctor_probe_runs_for_real_and_parses(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    c = cfg(CFG.replace("/models/tiny", str(model)).replace("vllm_node", "sparktui-no-such-c"))
    r = asyncio.run(LocalTransport("spark-1").run(doctor_command(c, "spark-1")))
    x = parse_doctor_probe(r.stdout)
    assert x.error is None and x.model == "host" and x.container_image is None
    assert not doctor_command(c, "spark-1").mutating
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        r = asyncio.run(LocalTransport("spark-1").run(doctor_command(c, "spark-1")))
        assert srv.getsockname()[1] in parse_doctor_probe(r.stdout).listening
    gone = cfg(CFG.replace("/models/tiny", str(tmp_path / "nope")))
    r = asyncio.run(LocalTransport("spark-1").run(doctor_command(gone, "spark-1")))
    assert parse_doctor_probe(r.stdout).model == "missing"
