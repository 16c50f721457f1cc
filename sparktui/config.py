"""The cluster config (YAML): discovery, validation with line numbers, defaults.

Every problem is a ConfigError whose str() is one line: `FILE:LINE: what is wrong`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparktui import locations

ROLES = ("head", "worker")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOCAL_HOSTS = ("local", "localhost")
ACTION_NAMES = ("teardown", "restart", "serve")


class ConfigError(Exception):
    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file, self.line, self.message = file, line, message
        super().__init__(f"{file}:{line if line else 1}: {message}")


DEFAULT_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
CIPHERS_RE = re.compile(r"[+^-]?[A-Za-z0-9@._*?-]+(,[A-Za-z0-9@._*?-]+)*")


@dataclass
class SshSettings:
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None  # None: asyncssh/OpenSSH default (~/.ssh/known_hosts)
    port: int | None = None
    config_file: str | None = None
    strict_host_key_checking: bool = True
    connect_timeout: float = 5.0
    keepalive_interval: float = 10.0
    # OpenSSH `Ciphers` syntax. AES-GCM first by default: asyncssh's ChaCha20-Poly1305 costs
    # ~0.15 ms more per packet (measured), which every followed log line pays. None: leave the
    # choice to ~/.ssh/config (Ciphers) and asyncssh's defaults.
    ciphers: str | None = DEFAULT_CIPHERS


@dataclass
class ContainerConfig:
    name: str = "vllm_node"
    image: str | None = None
    run_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeConfig:
    name: str
    host: str
    ip: str | None
    role: str
    ssh: SshSettings
    container: ContainerConfig
    line: int | None = None

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


@dataclass
class RayConfig:
    port: int = 6379
    dashboard_port: int = 8265
    extra_args: list[str] = field(default_factory=list)


@dataclass
class VllmConfig:
    model: str | None = None
    args: list[str] = field(default_factory=list)
    port: int = 8000
    log: str = "/tmp/sparktui/vllm.log"
    health_timeout: float = 900.0

    def parallel_size(self) -> int:
        """TP x PP as given in `args` (1 when absent)."""
        def value(*flags: str) -> int:
            for i, a in enumerate(self.args):
                for f in flags:
                    if a == f and i + 1 < len(self.args):
                        try:
                            return int(self.args[i + 1])
                        except ValueError:
                            return 1
                    if a.startswith(f + "="):
                        try:
                            return int(a.split("=", 1)[1])
                        except ValueError:
                            return 1
            return 1
        return value("--tensor-parallel-size", "-tp") * value("--pipeline-parallel-size", "-pp")


@dataclass
class ScriptAction:
    """A user's own launch script, run instead of the built-in plan."""

    name: str
    run: list[str]  # argv
    nodes: list[str]  # node names it runs on, in order
    timeout: float = 600.0


@dataclass
class Config:
    path: str | None
    cluster_name: str
    ssh: SshSettings
    nodes: list[NodeConfig]
    container: ContainerConfig
    ray: RayConfig
    vllm: VllmConfig
    theme: str | None = None
    read_only: bool = False
    keymap: dict[str, str] = field(default_factory=dict)
    refresh_interval: float = 2.0
    actions: dict[str, ScriptAction] = field(default_factory=dict)
    patterns: list[dict[str, Any]] = field(default_factory=list)
    patterns_line: int | None = None

    @property
    def head(self) -> NodeConfig:
        return next(n for n in self.nodes if n.role == "head")

    @property
    def workers(self) -> list[NodeConfig]:
        return [n for n in self.nodes if n.role != "head"]

    def node(self, name: str) -> NodeConfig | None:
        return next((n for n in self.nodes if n.name == name), None)


# --------------------------------------------------------------------------- discovery


def discover(explicit: str | None = None) -> Path | None:
    """`--config`, then $SPARKTUI_CONFIG, ./sparktui.yaml, the XDG config dir; else None."""
    if explicit:
        return Path(os.path.expanduser(explicit))
    env = os.environ.get("SPARKTUI_CONFIG")
    if env:
        return Path(os.path.expanduser(env))
    for candidate in (Path("sparktui.yaml"), locations.config_dir() / "config.yaml",
                      locations.config_dir() / "sparktui.yaml"):
        if candidate.is_file():
            return candidate
    return None


def load(explicit: str | None = None) -> Config:
    path = discover(explicit)
    if path is None:
        return local_default()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), None, "config file not found") from None
    except IsADirectoryError:
        raise ConfigError(str(path), None, "is a directory, not a config file") from None
    except PermissionError:
        raise ConfigError(str(path), None, "permission denied reading the config") from None
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), None, f"not UTF-8 text ({e.reason})") from None
    return parse(text, str(path))


def local_default() -> Config:
    """No config anywhere: the machine sparktui runs on, as a single head node."""
    ssh = SshSettings()
    container = ContainerConfig()
    node = NodeConfig(name=socket.gethostname() or "local", host="local", ip=None,
                      role="head", ssh=ssh, container=container)
    return Config(path=None, cluster_name="local", ssh=ssh, nodes=[node], container=container,
                  ray=RayConfig(), vllm=VllmConfig())


# --------------------------------------------------------------------------- parsing


def _expand(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


class _Reader:
    """Validates a composed YAML tree, reporting errors at the offending node's line."""

    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader

    def fail(self, node: yaml.Node | None, message: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(self.file, line, message)

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...] | None = None
                ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping (key: value)")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.fail(k, f"{what}: keys must be plain names")
            key = k.value
            if key in out:
                raise self.fail(k, f"{what}: duplicate key '{key}'")
            if allowed is not None and key not in allowed:
                raise self.fail(k, f"{what}: unknown key '{key}' (known: {', '.join(allowed)})")
            out[key] = (k, v)
        return out

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return None
        return self.loader.construct_object(node, deep=True)

    def str_(self, node: yaml.Node, what: str, expand: bool = True) -> str:
        value = self.scalar(node) if isinstance(node, yaml.ScalarNode) else None
        if value is None or isinstance(value, (bool, list, dict)) or value == "":
            raise self.fail(node, f"{what} must be a non-empty string")
        text = str(value)
        return _expand(text) if expand else text

    def opt_str(self, node: yaml.Node, what: str, expand: bool = True) -> str | None:
        if isinstance(node, yaml.ScalarNode) and self.scalar(node) is None:
            return None
        return self.str_(node, what, expand)

    def int_(self, node: yaml.Node, what: str, lo: int, hi: int) -> int:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(node, f"{what} must be an integer")
        if not lo <= value <= hi:
            raise self.fail(node, f"{what} must be between {lo} and {hi}, not {value}")
        return value

    def float_(self, node: yaml.Node, what: str, lo: float, hi: float) -> float:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(node, f"{what} must be a number")
        if not lo <= value <= hi:
            raise self.fail(node, f"{what} must be between {lo:g} and {hi:g}, not {value}")
        return float(value)

    def bool_(self, node: yaml.Node, what: str) -> bool:
        value = self.scalar(node)
        if not isinstance(value, bool):
            raise self.fail(node, f"{what} must be true or false")
        return value

    def str_list(self, node: yaml.Node, what: str) -> list[str]:
        if isinstance(node, yaml.ScalarNode) and self.scalar(node) is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, f"{what} must be a list of strings, e.g. [\"--flag\", \"value\"]")
        out = []
        for item in node.value:
            value = self.scalar(item)
            if value is None or isinstance(value, (bool, list, dict)):
                raise self.fail(item, f"{what}: every item must be a string or number")
            out.append(str(value))
        return out

    def env(self, node: yaml.Node, what: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, (k, v) in self.mapping(node, what).items():
            if not ENV_NAME_RE.match(key):
                raise self.fail(k, f"{what}: '{key}' is not a valid environment variable name")
            value = self.scalar(v)
            if value is None or isinstance(value, (list, dict)):
                raise self.fail(v, f"{what}.{key} must be a string")
            if isinstance(value, bool):
                value = "1" if value else "0"
            out[key] = _expand(str(value))
        return out

    def ip(self, node: yaml.Node, what: str) -> str:
        text = self.str_(node, what)
        try:
            return str(ipaddress.ip_address(text))
        except ValueError:
            raise self.fail(node, f"{what}: '{text}' is not an IP address") from None


SSH_KEYS = ("user", "identity_file", "known_hosts", "port", "config_file",
            "strict_host_key_checking", "connect_timeout", "keepalive_interval", "ciphers")


def _ssh(r: _Reader, node: yaml.Node, base: SshSettings, what: str) -> SshSettings:
    s = SshSettings(**vars(base))
    for key, (_k, v) in r.mapping(node, what, SSH_KEYS).items():
        w = f"{what}.{key}"
        if key == "port":
            s.port = r.int_(v, w, 1, 65535)
        elif key == "strict_host_key_checking":
            s.strict_host_key_checking = r.bool_(v, w)
        elif key in ("connect_timeout", "keepalive_interval"):
            setattr(s, key, r.float_(v, w, 0.1, 3600))
        elif key == "ciphers":
            s.ciphers = r.opt_str(v, w) or None
            if s.ciphers is not None and not CIPHERS_RE.fullmatch(s.ciphers):
                raise r.fail(v, f"{w}: '{s.ciphers}' is not an OpenSSH cipher list "
                                "(e.g. aes256-gcm@openssh.com,chacha20-poly1305@openssh.com)")
        else:
            setattr(s, key, r.opt_str(v, w))
    return s


def _container(r: _Reader, node: yaml.Node, base: ContainerConfig, what: str) -> ContainerConfig:
    c = ContainerConfig(name=base.name, image=base.image, run_args=list(base.run_args),
                        env=dict(base.env))
    for key, (_k, v) in r.mapping(node, what, ("name", "image", "run_args", "env")).items():
        w = f"{what}.{key}"
        if key == "name":
            c.name = r.str_(v, w, expand=False)
            if not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$", c.name):
                raise r.fail(v, f"{w}: '{c.name}' is not a valid docker container name")
        elif key == "image":
            c.image = r.opt_str(v, w)
        elif key == "run_args":
            c.run_args = r.str_list(v, w)
        else:
            c.env.update(r.env(v, w))
    return c


TOP_KEYS = ("cluster", "ssh", "nodes", "container", "ray", "vllm", "theme", "read_only",
            "keymap", "refresh_interval", "actions", "patterns")
NODE_KEYS = ("name", "host", "ip", "role", "ssh", "container", "user", "port", "identity_file")


def parse(text: str, file: str = "<config>") -> Config:
    loader = yaml.SafeLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark else None
            problem = e.problem or "invalid YAML"
            lines = text.splitlines()
            if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line]:
                problem += " (tabs are not allowed for indentation in YAML; use spaces)"
            raise ConfigError(file, line, f"YAML syntax error: {problem}") from None
        except yaml.YAMLError as e:
            raise ConfigError(file, None, f"YAML error: {e}") from None
        if root is None:
            raise ConfigError(file, 1, "the config is empty: it needs at least 'nodes:'")
        r = _Reader(file, loader)
        top = r.mapping(root, "config", TOP_KEYS)
        return _build(r, root, top, file)
    finally:
        loader.dispose()


def _build(r: _Reader, root: yaml.Node, top: dict, file: str) -> Config:
    cluster_name = "cluster"
    if "cluster" in top:
        _k, v = top["cluster"]
        if isinstance(v, yaml.ScalarNode):
            cluster_name = r.str_(v, "cluster")
        else:
            cl = r.mapping(v, "cluster", ("name",))
            if "name" in cl:
                cluster_name = r.str_(cl["name"][1], "cluster.name")

    ssh = SshSettings()
    if "ssh" in top:
        ssh = _ssh(r, top["ssh"][1], ssh, "ssh")

    container = ContainerConfig()
    if "container" in top:
        container = _container(r, top["container"][1], container, "container")

    ray = RayConfig()
    if "ray" in top:
        for key, (_k, v) in r.mapping(top["ray"][1], "ray",
                                      ("port", "dashboard_port", "extra_args")).items():
            if key == "extra_args":
                ray.extra_args = r.str_list(v, "ray.extra_args")
            else:
                setattr(ray, key, r.int_(v, f"ray.{key}", 1, 65535))

    vllm = VllmConfig()
    if "vllm" in top:
        for key, (_k, v) in r.mapping(top["vllm"][1], "vllm",
                                      ("model", "args", "port", "log", "health_timeout")).items():
            w = f"vllm.{key}"
            if key == "model":
                vllm.model = r.opt_str(v, w)
            elif key == "args":
                vllm.args = r.str_list(v, w)
            elif key == "port":
                vllm.port = r.int_(v, w, 1, 65535)
            elif key == "health_timeout":
                vllm.health_timeout = r.float_(v, w, 1, 86400)
            else:
                vllm.log = r.str_(v, w)
                if not vllm.log.startswith("/"):
                    raise r.fail(v, f"{w} must be an absolute path on the head node")

    if "nodes" not in top:
        raise ConfigError(file, root.start_mark.line + 1,
                          "missing 'nodes:' (a list of {name, host, ip, role})")
    nodes_node = top["nodes"][1]
    if not isinstance(nodes_node, yaml.SequenceNode) or not nodes_node.value:
        raise r.fail(nodes_node, "'nodes' must be a non-empty list of {name, host, ip, role}")
    nodes: list[NodeConfig] = []
    seen_names: dict[str, int] = {}
    seen_ips: dict[str, str] = {}
    for i, item in enumerate(nodes_node.value):
        what = f"nodes[{i}]"
        m = r.mapping(item, what, NODE_KEYS)
        if "name" not in m:
            raise r.fail(item, f"{what}: missing 'name'")
        name = r.str_(m["name"][1], f"{what}.name", expand=False)
        if not NAME_RE.match(name):
            raise r.fail(m["name"][1], f"{what}.name '{name}': use letters, digits, '.', '_', '-'")
        what = f"node '{name}'"
        if name in seen_names:
            raise r.fail(m["name"][1], f"duplicate node name '{name}' (first on line {seen_names[name]})")
        seen_names[name] = m["name"][1].start_mark.line + 1
        if "host" not in m:
            raise r.fail(item, f"{what}: missing 'host' (SSH address, ~/.ssh/config alias, or 'local')")
        host = r.str_(m["host"][1], f"{what}.host")
        if host.startswith("-") or any(ch.isspace() for ch in host):
            raise r.fail(m["host"][1], f"{what}.host '{host}' is not a host name or address")
        ip = None
        if "ip" in m:
            ip = r.ip(m["ip"][1], f"{what}.ip")
            if ip in seen_ips:
                raise r.fail(m["ip"][1], f"{what}.ip {ip} is already the ip of node '{seen_ips[ip]}'")
            seen_ips[ip] = name
        role = "worker"
        if "role" in m:
            role = r.str_(m["role"][1], f"{what}.role")
            if role not in ROLES:
                raise r.fail(m["role"][1], f"{what}.role must be 'head' or 'worker', not '{role}'")
        node_ssh = ssh
        if "ssh" in m:
            node_ssh = _ssh(r, m["ssh"][1], ssh, f"{what}.ssh")
        for short in ("user", "port", "identity_file"):
            if short in m:
                node_ssh = SshSettings(**vars(node_ssh))
                v = m[short][1]
                if short == "port":
                    node_ssh.port = r.int_(v, f"{what}.port", 1, 65535)
                else:
                    setattr(node_ssh, short, r.str_(v, f"{what}.{short}"))
        node_container = container
        if "container" in m:
            node_container = _container(r, m["container"][1], container, f"{what}.container")
        nodes.append(NodeConfig(name=name, host=host, ip=ip, role=role, ssh=node_ssh,
                                container=node_container, line=item.start_mark.line + 1))
    heads = [n for n in nodes if n.role == "head"]
    if len(heads) != 1:
        line = nodes_node.start_mark.line + 1
        if len(heads) > 1:
            raise ConfigError(file, heads[1].line, f"two head nodes ('{heads[0].name}' and "
                              f"'{heads[1].name}'): exactly one node has role: head")
        if len(nodes) > 1:
            raise ConfigError(file, line, "no node has role: head (exactly one must)")
        nodes[0].role = "head"

    cfg = Config(path=file, cluster_name=cluster_name, ssh=ssh, nodes=nodes,
                 container=container, ray=ray, vllm=vllm)

    if "theme" in top:
        cfg.theme = r.opt_str(top["theme"][1], "theme")
    if "read_only" in top:
        cfg.read_only = r.bool_(top["read_only"][1], "read_only")
    if "refresh_interval" in top:
        cfg.refresh_interval = r.float_(top["refresh_interval"][1], "refresh_interval", 0.2, 3600)
    if "keymap" in top:
        for key, (_k, v) in r.mapping(top["keymap"][1], "keymap").items():
            cfg.keymap[key] = r.str_(v, f"keymap.{key}", expand=False)
    if "actions" in top:
        for key, (_k, v) in r.mapping(top["actions"][1], "actions", ACTION_NAMES).items():
            cfg.actions[key] = _script_action(r, key, v, cfg)
    if "patterns" in top:
        pnode = top["patterns"][1]
        if not isinstance(pnode, yaml.SequenceNode):
            raise r.fail(pnode, "'patterns' must be a list of crash patterns")
        cfg.patterns = r.loader.construct_object(pnode, deep=True)
        cfg.patterns_line = pnode.start_mark.line + 1
    return cfg


def _script_action(r: _Reader, key: str, v: yaml.Node, cfg: Config) -> ScriptAction:
    what = f"actions.{key}"
    m = r.mapping(v, what, ("run", "nodes", "timeout"))
    if "run" not in m:
        raise r.fail(v, f"{what}: missing 'run' (the script and its arguments, as a list)")
    run_node = m["run"][1]
    if isinstance(run_node, yaml.ScalarNode):
        run = [r.str_(run_node, f"{what}.run")]
    else:
        run = r.str_list(run_node, f"{what}.run")
        if not run:
            raise r.fail(run_node, f"{what}.run must not be empty")
    names = [n.name for n in cfg.nodes]
    nodes = [cfg.head.name]
    if "nodes" in m:
        nodes_node = m["nodes"][1]
        if isinstance(nodes_node, yaml.ScalarNode) and r.scalar(nodes_node) == "all":
            nodes = names
        else:
            nodes = r.str_list(nodes_node, f"{what}.nodes")
            for n in nodes:
                if n not in names:
                    raise r.fail(nodes_node, f"{what}.nodes: no node named '{n}'")
    timeout = 600.0
    if "timeout" in m:
        timeout = r.float_(m["timeout"][1], f"{what}.timeout", 1, 86400)
    return ScriptAction(name=key, run=run, nodes=nodes, timeout=timeout)
