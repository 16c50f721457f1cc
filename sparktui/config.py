"""The cluster config (YAML): discovery, one pydantic declaration per key, line-numbered errors.

Each key is declared once, as a field below (type, default, range, docstring). Errors are a
ConfigError whose str() is one line: `FILE:LINE: what is wrong`. Rules across fields (one
head, unique names and IPs, per-node overrides) are in `_resolve`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
)
from pydantic_core import ErrorDetails

from sparktui import locations
from sparktui.yamlmodel import Lines, YamlError, compose, rule, validate
from sparktui.yamlmodel import Path as KeyPath

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONTAINER_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
CIPHERS_RE = re.compile(r"[+^-]?[A-Za-z0-9@._*?-]+(,[A-Za-z0-9@._*?-]+)*")
LOCAL_HOSTS = ("local", "localhost")
DEFAULT_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"


class ConfigError(YamlError):
    """A config problem; `str()` is `FILE:LINE: what is wrong`."""


# --------------------------------------------------------------------------- value types


def _expand(value: str) -> str:
    return os.path.expandvars(os.path.expanduser(value))


def _text(expand: bool, optional: bool = False) -> Callable[[Any], str | None]:
    def convert(value: Any) -> str | None:
        if value is None and optional:
            return None
        if value is None or isinstance(value, (bool, list, dict)) or value == "":
            raise rule("text", "must be a non-empty string")
        return _expand(str(value)) if expand else str(value)

    return convert


def _matching(regex: re.Pattern[str], what: str) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        if value is not None and not regex.fullmatch(value):
            raise rule("format", "'{value}' " + what, value=value)
        return value

    return check


def _between(lo: float, hi: float) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not lo <= value <= hi:
            raise rule(
                "range",
                "must be between {lo} and {hi}, not {value}",
                lo=f"{lo:g}",
                hi=f"{hi:g}",
                value=value,
            )
        return value

    return check


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise rule("list", 'must be a list of strings, e.g. ["--flag", "value"]')
    if any(v is None or isinstance(v, (bool, list, dict)) for v in value):
        raise rule("list_item", "every item must be a string or number")
    return [str(v) for v in value]


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise rule("mapping", "must be a mapping (key: value)")
    out = {}
    for key, v in value.items():
        if not ENV_NAME_RE.match(str(key)):
            raise rule("env_name", "'{key}' is not a valid environment variable name", key=key)
        if v is None or isinstance(v, (list, dict)):
            raise rule("env_value", "{key} must be a string", key=key)
        out[str(key)] = "1" if v is True else "0" if v is False else _expand(str(v))
    return out


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise rule("ip", "'{value}' is not an IP address", value=value) from None


def _host(value: str) -> str:
    if value.startswith("-") or any(ch.isspace() for ch in value):
        raise rule("host", "'{value}' is not a host name or address", value=value)
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise rule("path", "must be an absolute path on the head node")
    return value


Text = Annotated[str, BeforeValidator(_text(expand=True))]
OptText = Annotated[str | None, BeforeValidator(_text(expand=True, optional=True))]
RawText = Annotated[str, BeforeValidator(_text(expand=False))]
Port = Annotated[int, AfterValidator(_between(1, 65535))]
StrList = Annotated[list[str], BeforeValidator(_str_list)]
Env = Annotated[dict[str, str], BeforeValidator(_env)]


SshSeconds = Annotated[float, AfterValidator(_between(0.1, 3600))]
LongSeconds = Annotated[float, AfterValidator(_between(1, 86400))]
Interval = Annotated[float, AfterValidator(_between(0.2, 3600))]


class Model(BaseModel):
    """Every config section: unknown keys and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=False)


# --------------------------------------------------------------------------- the model


Backend = Literal["ray", "native"]


class ClusterSettings(Model):
    name: Text = "cluster"
    """Shown in the header."""
    backend: Backend = "ray"
    """How the nodes form one vLLM: `ray` (a Ray cluster; vLLM's Ray executor) or `native`
    (vLLM's own multi-node mode: `vllm serve --nnodes N --node-rank R --master-addr <head
    ip>` on every node, the workers `--headless`, no Ray). Left out: `ray` for the actions,
    and the console and `status` say which one they see on the nodes."""


class SshSettings(Model):
    user: OptText = None
    """Login name (default: ~/.ssh/config or the local user)."""
    identity_file: OptText = None
    known_hosts: OptText = None
    """None: asyncssh/OpenSSH default (~/.ssh/known_hosts), checked strictly."""
    port: Port | None = None
    config_file: OptText = None
    strict_host_key_checking: bool = True
    connect_timeout: SshSeconds = 5.0
    keepalive_interval: SshSeconds = 10.0
    ciphers: Annotated[
        OptText,
        AfterValidator(
            _matching(
                CIPHERS_RE,
                "is not an OpenSSH cipher list "
                "(e.g. aes256-gcm@openssh.com,chacha20-poly1305@openssh.com)",
            )
        ),
    ] = DEFAULT_CIPHERS
    """OpenSSH `Ciphers` syntax. AES-GCM first: asyncssh's ChaCha20-Poly1305 costs ~0.15 ms
    more per packet (measured), which every followed log line pays. None: ~/.ssh/config."""

    @field_validator("ciphers", mode="after")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class ContainerConfig(Model):
    name: Annotated[
        RawText, AfterValidator(_matching(CONTAINER_RE, "is not a valid docker container name"))
    ] = "vllm_node"
    image: OptText = None
    run_args: StrList = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    """Set in the container; restart also sets VLLM_HOST_IP=<node ip>."""


class NodeConfig(Model):
    name: Annotated[
        RawText,
        AfterValidator(
            _matching(NAME_RE, "is not a node name: use letters, digits, '.', '_', '-'")
        ),
    ]
    host: Annotated[Text, AfterValidator(_host)]
    """SSH address, ~/.ssh/config alias, or `local`."""
    ip: Annotated[Text, AfterValidator(_ip)] | None = None
    """The IP Ray and vLLM must use for this node (its interconnect address)."""
    role: Literal["head", "worker"] = "worker"
    ssh: SshSettings = Field(default_factory=SshSettings)
    """Overrides of the top-level `ssh` for this node (merged by `_resolve`)."""
    container: ContainerConfig = Field(default_factory=ContainerConfig)
    """Overrides of the top-level `container` (its `env` adds to the shared one)."""
    user: OptText = None
    """Shortcut for `ssh.user`."""
    port: Port | None = None
    """Shortcut for `ssh.port`."""
    identity_file: OptText = None
    """Shortcut for `ssh.identity_file`."""
    _line: int | None = PrivateAttr(default=None)

    @property
    def line(self) -> int | None:
        return self._line

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


class RayConfig(Model):
    port: Port = 6379
    """GCS port on the head."""
    dashboard_port: Port = 8265
    extra_args: StrList = Field(default_factory=list)
    """Appended to every `ray start`."""


class VllmConfig(Model):
    model: OptText = None
    args: StrList = Field(default_factory=list)
    port: Port = 8000
    log: Annotated[Text, AfterValidator(_absolute)] = "/tmp/sparktui/vllm.log"
    """Where serve writes vLLM's output on the head node."""
    health_timeout: LongSeconds = 900.0
    stall_seconds: LongSeconds = 60.0
    """Seconds without progress before a stall is called: `vllm-stalled` (requests running,
    the generated-token counter unchanged) and `vllm-load-stalled` (a loading bar that has
    not moved, or 3x one item's time at its last rate when that is longer)."""
    master_port: Port | None = None
    """Native backend: `--master-port` of every rank (the torch.distributed rendezvous on
    the head); None leaves vLLM's default, 29501."""

    def parallel_size(self) -> int:
        """TP x PP as given in `args` (1 when absent)."""

        def value(*flags: str) -> int:
            for i, a in enumerate(self.args):
                for f in flags:
                    text = (
                        self.args[i + 1]
                        if a == f and i + 1 < len(self.args)
                        else a.split("=", 1)[1]
                        if a.startswith(f + "=")
                        else None
                    )
                    if text is not None:
                        try:
                            return int(text)
                        except ValueError:
                            return 1
            return 1

        return value("--tensor-parallel-size", "-tp") * value("--pipeline-parallel-size", "-pp")


def _run_list(value: Any) -> Any:
    return (
        [value] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else value
    )


def _nodes_list(value: Any) -> Any:
    return value if value == "all" else _str_list(value)


class ScriptAction(Model):
    """A user's own launch script, run instead of the built-in plan."""

    run: Annotated[StrList, BeforeValidator(_run_list), Field(min_length=1)]
    """argv on the node."""
    nodes: Annotated[list[str] | Literal["all"], BeforeValidator(_nodes_list)] = Field(
        default_factory=list
    )
    """Node names it runs on, in order (default: the head; `all`: every node)."""
    timeout: LongSeconds = 600.0
    _name: str = PrivateAttr(default="")

    @property
    def name(self) -> str:
        return self._name


class ActionScripts(Model):
    teardown: ScriptAction | None = None
    restart: ScriptAction | None = None
    serve: ScriptAction | None = None

    def __contains__(self, name: object) -> bool:
        return name in type(self).model_fields and getattr(self, str(name)) is not None

    def __getitem__(self, name: str) -> ScriptAction:
        action = getattr(self, name, None) if name in type(self).model_fields else None
        if action is None:
            raise KeyError(name)
        return action


def _cluster(value: Any) -> Any:
    return (
        {"name": value}
        if isinstance(value, (str, int, float)) and not isinstance(value, bool)
        else value
    )


class Config(Model):
    """Everything a config file may say: the only declaration of its keys."""

    cluster: Annotated[ClusterSettings, BeforeValidator(_cluster)] = Field(
        default_factory=ClusterSettings
    )
    """`{name: ...}` or just the name."""
    ssh: SshSettings = Field(default_factory=SshSettings)
    """Defaults for every node."""
    nodes: Annotated[list[NodeConfig], Field(min_length=1)]
    container: ContainerConfig = Field(default_factory=ContainerConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    refresh_interval: Interval = 2.0
    probe_concurrency: Annotated[int, AfterValidator(_between(1, 1024))] = 32
    """At most this many node probes (SSH commands) in flight at once; the others wait
    their turn within the tick."""
    theme: OptText = None
    read_only: bool = False
    keymap: dict[str, RawText] = Field(default_factory=dict)
    """Action id -> key."""
    actions: ActionScripts = Field(default_factory=ActionScripts)
    """Script mode: teardown/restart/serve -> {run, nodes, timeout}."""
    patterns: list[Any] = Field(default_factory=list)
    """Extra or overriding crash patterns (validated by the knowledge base)."""
    _path: str | None = PrivateAttr(default=None)
    _patterns_line: int | None = PrivateAttr(default=None)

    @property
    def path(self) -> str | None:
        return self._path

    @property
    def patterns_line(self) -> int | None:
        return self._patterns_line

    @property
    def cluster_name(self) -> str:
        return self.cluster.name

    @property
    def backend(self) -> Backend:
        """`cluster.backend` (`ray` when the config does not say)."""
        return self.cluster.backend

    @property
    def backend_configured(self) -> bool:
        """Whether the config says `cluster.backend` (else the nodes decide what is shown)."""
        return "backend" in self.cluster.model_fields_set

    @property
    def scripts(self) -> dict[str, ScriptAction]:
        """The script-mode actions by name."""
        return {
            name: a
            for name in ActionScripts.model_fields
            if (a := getattr(self.actions, name)) is not None
        }

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
    for candidate in (
        Path("sparktui.yaml"),
        locations.config_dir() / "config.yaml",
        locations.config_dir() / "sparktui.yaml",
    ):
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
    node = NodeConfig(name=socket.gethostname() or "local", host="local", role="head")
    return Config(cluster=ClusterSettings(name="local"), nodes=[node])


# --------------------------------------------------------------------------- parsing

_HINTS: dict[KeyPath, str] = {
    ("nodes",): "missing 'nodes:' (a list of {name, host, ip, role})",
    ("host",): "missing 'host' (SSH address, ~/.ssh/config alias, or 'local')",
    ("run",): "missing 'run' (the script and its arguments, as a list)",
}


def _describe_for(data: Any) -> Callable[[KeyPath], str]:
    """Names a path the way the user wrote it: `node 'spark-2'.ssh.port`, `nodes[0]`."""

    def describe(path: KeyPath) -> str:
        out = ""
        for i, part in enumerate(path):
            if isinstance(part, int):
                name = None
                if path[:i] == ("nodes",) and isinstance(data, dict):
                    items = data.get("nodes")
                    item = items[part] if isinstance(items, list) and part < len(items) else None
                    name = item.get("name") if isinstance(item, dict) else None
                out = f"node '{name}'" if isinstance(name, str) and name else f"{out}[{part}]"
            else:
                out = f"{out}.{part}" if out else str(part)
        return out

    return describe


def _explain(describe: Callable[[KeyPath], str]) -> Callable[[KeyPath, ErrorDetails], str]:
    def explain(path: KeyPath, err: ErrorDetails) -> str:
        kind = err["type"]
        if kind == "missing":
            hint = (
                _HINTS.get(path) or _HINTS.get(path[-1:])
                if path[:1] != ("nodes",) or len(path) > 1
                else None
            )
            if path == ("nodes",):
                return _HINTS[("nodes",)]
            if hint:
                return f"{describe(path[:-1])}: {hint}"
        if path == ("nodes",) and kind in ("list_type", "too_short"):
            return "'nodes' must be a non-empty list of {name, host, ip, role}"
        if len(path) == 3 and path[0] == "actions" and path[2] == "run" and kind == "too_short":
            return f"{describe(path)} must not be empty"
        return ""

    return explain


def parse(text: str, file: str = "<config>") -> Config:
    """Validate a config file's text; ConfigError at the first problem's line."""
    try:
        data, lines = compose(text, file)
        if data is None:
            raise ConfigError(file, 1, "the config is empty: it needs at least 'nodes:'")
        describe = _describe_for(data)
        cfg = validate(Config, data, lines, file, describe, _explain(describe))
    except ConfigError:
        raise
    except YamlError as e:
        raise ConfigError(e.file, e.line, e.message) from None
    return _resolve(cfg, lines, file)


def _resolve(cfg: Config, lines: Lines, file: str) -> Config:
    """Rules across fields, and per-node settings merged over the shared ones."""
    seen_names: dict[str, int] = {}
    seen_ips: dict[str, str] = {}
    for i, node in enumerate(cfg.nodes):
        node._line = lines.of(("nodes", i))
        name_line = lines.of(("nodes", i, "name")) or 1
        if node.name in seen_names:
            raise ConfigError(
                file,
                name_line,
                f"duplicate node name '{node.name}' (first on line {seen_names[node.name]})",
            )
        seen_names[node.name] = name_line
        if node.ip is not None:
            if node.ip in seen_ips:
                raise ConfigError(
                    file,
                    lines.of(("nodes", i, "ip")),
                    f"node '{node.name}'.ip {node.ip} is already the ip of node "
                    f"'{seen_ips[node.ip]}'",
                )
            seen_ips[node.ip] = node.name
        short: dict[str, Any] = {
            k: getattr(node, k)
            for k in ("user", "port", "identity_file")
            if k in node.model_fields_set
        }
        node.ssh = cfg.ssh.model_copy(
            update={**{k: getattr(node.ssh, k) for k in node.ssh.model_fields_set}, **short}
        )
        own = node.container
        node.container = cfg.container.model_copy(
            update={
                **{k: getattr(own, k) for k in own.model_fields_set if k != "env"},
                "env": {**cfg.container.env, **own.env},
            }
        )
    heads = [n for n in cfg.nodes if n.role == "head"]
    if len(heads) > 1:
        raise ConfigError(
            file,
            heads[1].line,
            f"two head nodes ('{heads[0].name}' and "
            f"'{heads[1].name}'): exactly one node has role: head",
        )
    if not heads:
        if len(cfg.nodes) > 1:
            raise ConfigError(
                file, lines.of(("nodes",)), "no node has role: head (exactly one must)"
            )
        cfg.nodes[0].role = "head"
    names = [n.name for n in cfg.nodes]
    for name, action in cfg.scripts.items():
        action._name = name
        if action.nodes == "all":
            action.nodes = names
        elif not action.nodes:
            action.nodes = [cfg.head.name]
        for n in action.nodes:
            if n not in names:
                raise ConfigError(
                    file,
                    lines.of(("actions", name, "nodes")),
                    f"actions.{name}.nodes: no node named '{n}'",
                )
    cfg._path = file
    cfg._patterns_line = lines.of(("patterns",)) if "patterns" in cfg.model_fields_set else None
    return cfg
