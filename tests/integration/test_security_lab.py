"""Security on the lab: host keys checked strictly, and no config value can inject a command
into a node's shell (real sshd, real remote /bin/sh)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktui import config
from sparktui.core.actions import build_plan
from sparktui.core.command import Command
from sparktui.core.probes.script import build_probe
from sparktui.core.ssh import SshTransport
from sparktui.core.transport import LocalTransport
from tests.lab import node as nodemod

pytestmark = pytest.mark.lab

CANARY = f"/tmp/sparktui-canary-{uuid.uuid4().hex[:8]}"
PAYLOADS = [
    f"; touch {CANARY}",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"| touch {CANARY}",
    f"&& touch {CANARY}",
    f"\ntouch {CANARY}\n",
    f"' ; touch {CANARY} ; '",
    f'" ; touch {CANARY} ; "',
    f"$'\\x3b' touch {CANARY}",
    f"${{IFS}}touch${{IFS}}{CANARY}",
    f"> {CANARY}",
    f"\\'; touch {CANARY} #",
]
hostile = st.one_of(
    st.sampled_from(PAYLOADS),
    st.builds(
        lambda a, p, b: a + p + b,
        st.text(alphabet=";&|`$(){}<>'\"\\ \n\t*?[]!#~=%^", max_size=8),
        st.sampled_from(PAYLOADS),
        st.text(alphabet=";&|`$(){}<>'\"\\ *?!#", max_size=8),
    ),
)


def _canary_anywhere(lab) -> list[str]:
    found = [f"jump host: {CANARY}"] if Path(CANARY).exists() else []
    for n in lab.nodes:
        if nodemod.exec_(n, ["test", "-e", CANARY], check=False).returncode == 0:
            found.append(f"{n.name}: {CANARY}")
    return found


def _hostile_config(base: dict, value: str) -> config.Config | None:
    data = json.loads(json.dumps(base))
    data["container"]["env"] = {"VLLM_EXTRA": value, "NCCL_SOCKET_IFNAME": value}
    data["container"]["run_args"] = ["--gpus", "all", "--label", value]
    data["ray"]["extra_args"] = ["--num-cpus", "1", "--labels", value]
    data["vllm"] = {
        "model": value,
        "args": ["--served-model-name", value],
        "log": "/tmp/" + value.replace("\x00", ""),
    }
    data["actions"] = {"teardown": {"run": ["/opt/teardown.sh", value], "nodes": "all"}}
    try:
        return config.parse(yaml.safe_dump(data), "hostile.yaml")
    except config.ConfigError:
        return None


def _echo(c: Command) -> Command:
    """The same argv (and env) through the same quoting, but printed instead of run."""
    return Command(("printf", "%s\\0", *c.argv), env=c.env, timeout=10)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=hostile)
def test_config_values_reach_nodes_as_literal_argv(lab, value):
    base = yaml.safe_load(Path(lab.config_path).read_text())
    cfg = _hostile_config(base, value)
    if cfg is None:
        return
    commands = [
        (s.node, c)
        for name in ("teardown", "restart", "serve")
        for _i, _st, s in build_plan(name, cfg).steps
        for c in s.commands
    ]
    assert commands

    async def go():
        for node_cfg in cfg.nodes:
            t = SshTransport(node_cfg)
            try:
                for node, c in commands:
                    if node != node_cfg.name:
                        continue
                    r = await t.run(_echo(c))  # env values ride as argv of `env`
                    assert r.ok, r.stderr
                    assert r.stdout.split("\0")[:-1] == list(c.argv)
                # The probe itself, with a container name that config validation would refuse.
                r = await t.run(build_probe(node_cfg.name, value, True, 8000, query_ray=False))
                assert "@@sparktui:end@@" in r.stdout
            finally:
                await t.close()
        # and on the jump host, through the local transport
        local = LocalTransport("jump")
        for _node, c in commands[:5]:
            r = await local.run(_echo(c))
            assert r.ok and r.stdout.split("\0")[:-1] == list(c.argv)

    asyncio.run(go())
    assert _canary_anywhere(lab) == []


def _status(cfg_path: Path) -> tuple[int, dict]:
    p = subprocess.run(
        [sys.executable, "-m", "sparktui", "status", "--json", "-c", str(cfg_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, json.loads(p.stdout)


def _with_ssh(lab, tmp_path: Path, **ssh) -> Path:
    data = yaml.safe_load(Path(lab.config_path).read_text())
    data["ssh"].update(ssh)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_unknown_host_key_is_refused_naming_node_and_file(healthy_lab, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    rc, data = _status(_with_ssh(healthy_lab, tmp_path, known_hosts=str(kh)))
    assert rc == 1
    for node in data["nodes"]:
        assert node["reachable"] is False
        assert node["name"] in node["error"] and str(kh) in node["error"]
        assert "host key not trusted" in node["error"]


def test_changed_host_key_is_refused(healthy_lab, tmp_path):
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True
    )
    other = (tmp_path / "k.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(f"{n.ext_ip} {other[0]} {other[1]}\n" for n in healthy_lab.nodes))
    rc, data = _status(_with_ssh(healthy_lab, tmp_path, known_hosts=str(kh)))
    assert rc == 1
    assert all(not n["reachable"] and "host key not trusted" in n["error"] for n in data["nodes"])


def test_skipping_the_check_only_when_the_config_says_so(healthy_lab, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    rc, data = _status(
        _with_ssh(healthy_lab, tmp_path, known_hosts=str(kh), strict_host_key_checking=False)
    )
    assert all(n["reachable"] for n in data["nodes"]), data


def test_payloads_are_valid_config_values():
    """Every payload passes config validation, so the test above really sends it."""
    base = {
        "cluster": {"name": "lab"},
        "ssh": {"user": "root"},
        "container": {"name": "c"},
        "ray": {"port": 6379},
        "nodes": [{"name": "a", "host": "198.18.1.2", "ip": "198.19.1.2", "role": "head"}],
    }
    assert all(_hostile_config(base, p) is not None for p in PAYLOADS)


def test_the_canary_check_can_fail(healthy_lab):
    """Positive control: naive string-built shell does create the canary on a node."""
    n = healthy_lab.nodes[1]
    nodemod.exec_(n, ["sh", "-c", "echo " + PAYLOADS[0]], check=False)
    try:
        assert _canary_anywhere(healthy_lab) == [f"{n.name}: {CANARY}"]
    finally:
        nodemod.exec_(n, ["rm", "-f", CANARY], check=False)
    assert _canary_anywhere(healthy_lab) == []


@pytest.mark.parametrize(
    "ciphers, expected",
    [
        ("default", "aes128-gcm@openssh.com"),  # sparktui's default: AES-GCM first
        ("chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com"),
        (None, "chacha20-poly1305@openssh.com"),  # no preference: the library's own first choice
    ],
)
def test_the_configured_cipher_is_the_one_negotiated(healthy_lab, tmp_path, ciphers, expected):
    path = (
        Path(healthy_lab.config_path)
        if ciphers == "default"
        else _with_ssh(healthy_lab, tmp_path, ciphers=ciphers)
    )
    cfg = config.load(str(path))

    async def go() -> tuple[str, str]:
        t = SshTransport(cfg.head)
        try:
            r = await t.run(Command(("true",)))
            assert r.ok
            assert t._conn is not None
            return t._conn.get_extra_info("recv_cipher"), t._conn.get_extra_info("send_cipher")
        finally:
            await t.close()

    assert asyncio.run(go()) == (expected, expected)
