"""Config loading: valid configs, discovery, and a corpus of malformed ones (exit 2, one line)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparktui import config

BAD = Path(__file__).parent.parent / "fixtures" / "configs" / "bad"
ROOT = Path(__file__).resolve().parents[2]

# file -> (line, a fragment of the message)
EXPECTED = {
    "syntax_unclosed": (3, "YAML syntax error"),
    "tabs": (2, "tabs are not allowed"),
    "empty": (1, "empty"),
    "not_mapping": (1, "must be a mapping"),
    "no_nodes": (1, "missing 'nodes:'"),
    "nodes_not_list": (1, "non-empty list"),
    "nodes_empty": (1, "non-empty list"),
    "node_no_name": (2, "missing 'name'"),
    "node_no_host": (2, "missing 'host'"),
    "bad_ip": (2, "not an IP address"),
    "bad_role": (2, "'head' or 'worker'"),
    "two_heads": (3, "two head nodes"),
    "no_head": (2, "no node has role: head"),
    "dup_name": (3, "duplicate node name 'a'"),
    "dup_key": (2, "duplicate key 'cluster'"),
    "dup_ip": (3, "already the ip of node 'a'"),
    "unknown_key": (3, "unknown key 'frobnicate'"),
    "unknown_node_key": (2, "unknown key 'addr'"),
    "port_string": (1, "ssh.port must be an integer"),
    "port_range": (1, "between 1 and 65535"),
    "read_only_str": (1, "true or false"),
    "run_args_str": (1, "list of strings"),
    "bad_env_name": (1, "not a valid environment variable name"),
    "bad_container_name": (1, "not a valid docker container name"),
    "relative_log": (1, "absolute path"),
    "host_option": (2, "not a host name"),
    "bad_action_node": (4, "no node named 'b'"),
    "bad_action_name": (4, "unknown key 'explode'"),
    "bad_node_name": (2, "use letters, digits"),
    "refresh_zero": (1, "between 0.2 and 3600"),
    "ssh_not_map": (1, "ssh must be a mapping"),
    "bad_ciphers": (1, "not an OpenSSH cipher list"),
    "not_utf8": (1, "not UTF-8"),
}


def test_corpus_is_complete():
    assert {p.stem for p in BAD.glob("*.yaml")} == set(EXPECTED)
    assert len(EXPECTED) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_config_is_one_line_with_file_and_line(name):
    path = BAD / f"{name}.yaml"
    line, fragment = EXPECTED[name]
    with pytest.raises(config.ConfigError) as info:
        config.load(str(path))
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert fragment in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name", ["tabs", "dup_name", "bad_ip", "not_utf8", "empty"])
def test_cli_exits_2_with_one_line_and_no_traceback(name):
    path = BAD / f"{name}.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "sparktui", "status", "-c", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.match(rf"^{re.escape(str(path))}:\d+: ", lines[0])
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_missing_config_file_is_reported():
    proc = subprocess.run(
        [sys.executable, "-m", "sparktui", "status", "-c", "/nonexistent/x.yaml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "/nonexistent/x.yaml:1: config file not found"


def model_keys(model=config.Config, prefix=""):
    """Every key the config model declares, as dotted paths (nodes[] items as `nodes.`)."""
    from sparktui.yamlmodel import _inner_model

    for name, info in model.model_fields.items():
        yield prefix + name
        inner = _inner_model(info.annotation)
        if inner is not None and inner is not model:
            yield from model_keys(inner, f"{prefix}{name}.")


def test_example_config_documents_every_key_and_loads():
    cfg = config.load(str(ROOT / "config.example.yaml"))
    assert [n.name for n in cfg.nodes] == ["spark-1", "spark-2"]
    assert cfg.head.name == "spark-1" and cfg.head.ip == "192.168.200.12"
    assert cfg.vllm.parallel_size() == 2
    text = (ROOT / "config.example.yaml").read_text()
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| key | what |") :]
    table = table[: table.index("\n\n")]
    keys = list(model_keys())
    assert len(keys) > 40 and "nodes.ssh.ciphers" in keys
    for key in keys:
        leaf = key.rsplit(".", 1)[-1]
        assert re.search(rf"^\s*#?\s*(- )?{leaf}:|[{{,]\s*{leaf}:", text, re.M), (
            f"{key} undocumented in config.example.yaml"
        )
        assert f"`{leaf}`" in table or f"`{key}`" in table, f"{key} missing from the README table"


def test_expansion_overrides_and_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_KEY", "/keys/lab")
    (tmp_path / "c.yaml").write_text(
        "cluster: {name: pair}\n"
        "ssh: {user: root, identity_file: $LAB_KEY, known_hosts: ~/kh}\n"
        "container: {name: ray, env: {NCCL_SOCKET_IFNAME: enp1s0f0np0}}\n"
        "nodes:\n"
        "  - {name: a, host: 198.18.1.2, ip: 198.19.200.2, role: head}\n"
        "  - {name: b, host: 198.18.1.3, ip: 198.19.200.3, port: 2222,\n"
        "     container: {env: {GLOO_SOCKET_IFNAME: eth9}}}\n"
    )
    cfg = config.load(str(tmp_path / "c.yaml"))
    a, b = cfg.nodes
    assert a.ssh.identity_file == "/keys/lab"
    assert a.ssh.known_hosts == os.path.expanduser("~/kh")
    assert b.ssh.port == 2222 and a.ssh.port is None
    assert b.ssh.user == "root"
    assert b.container.env == {"NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "eth9"}
    assert a.container.env == {"NCCL_SOCKET_IFNAME": "enp1s0f0np0"}
    assert b.container.name == "ray" and cfg.vllm.port == 8000 and cfg.ray.port == 6379


def test_ssh_ciphers_default_override_and_null(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("nodes:\n  - {name: a, host: h}\n")
    assert config.load(str(p)).nodes[0].ssh.ciphers == config.DEFAULT_CIPHERS
    p.write_text(
        "ssh: {ciphers: chacha20-poly1305@openssh.com}\n"
        "nodes:\n  - {name: a, host: h, role: head}\n"
        "  - {name: b, host: i, role: worker, ssh: {ciphers: null}}\n"
    )
    a, b = config.load(str(p)).nodes
    assert a.ssh.ciphers == "chacha20-poly1305@openssh.com"
    assert b.ssh.ciphers is None  # ~/.ssh/config and asyncssh choose


def test_single_node_becomes_head(tmp_path):
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: solo, host: local}\n")
    cfg = config.load(str(tmp_path / "c.yaml"))
    assert cfg.head.name == "solo" and cfg.head.local


def test_discovery_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPARKTUI_CONFIG", raising=False)
    assert config.discover() is None
    assert config.load().path is None  # local default
    xdg = tmp_path / "xdg" / "sparktui"
    xdg.mkdir(parents=True)
    (xdg / "config.yaml").write_text("nodes: [{name: x, host: local}]\n")
    assert config.discover() == xdg / "config.yaml"
    (tmp_path / "sparktui.yaml").write_text("nodes: [{name: y, host: local}]\n")
    assert config.discover() == Path("sparktui.yaml")
    monkeypatch.setenv("SPARKTUI_CONFIG", str(tmp_path / "env.yaml"))
    assert config.discover() == tmp_path / "env.yaml"
    assert config.discover("~/explicit.yaml") == Path(os.path.expanduser("~/explicit.yaml"))


def test_local_default_is_one_head_node(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("SPARKTUI_CONFIG", raising=False)
    cfg = config.load()
    assert len(cfg.nodes) == 1 and cfg.head.local and cfg.path is None


def test_parallel_size_forms():
    v = config.VllmConfig(args=["--tensor-parallel-size=4", "-pp", "2"])
    assert v.parallel_size() == 8
    assert config.VllmConfig(args=[]).parallel_size() == 1
