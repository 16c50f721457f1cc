"""Where a lab lives: its id, address plan, node records and on-disk state (JSON)."""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_ROOT = Path(os.environ.get("SPARKLAB_STATE", "/var/lib/sparktui-lab"))
CACHE_DIR = Path(os.environ.get("SPARKLAB_CACHE", "~/.cache/sparktui-lab")).expanduser()
PREFIX = "sl"  # every kernel object of lab k is named sl<k>...
EXT_IF = "enP7s7"  # a DGX Spark's 10 GbE management NIC
IC_IF = "enp1s0f0np0"  # a DGX Spark's ConnectX-7 (QSFP) NIC
PIN_MODES = ("none", "all", "worker-only")
ID_RE = re.compile(r"^sl(\d{1,3})$")
NODE_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/bin"


@dataclass
class Node:
    """One simulated GPU node (a network namespace with its own PID/mount/UTS namespaces)."""

    name: str
    index: int
    role: str
    netns: str
    ext_ip: str
    ic_ip: str
    host_ext_veth: str
    host_ic_veth: str
    dir: str
    ssh_port: int = 22
    init_pid: int | None = None  # host PID of the node's PID 1 (tini)

    @property
    def path(self) -> Path:
        return Path(self.dir)


@dataclass
class Lab:
    """A handle on one lab; `Lab.load(id)` finds a running one again from its state dir."""

    id: str
    k: int
    dir: str
    nodes: list[Node] = field(default_factory=list)
    pin: str = "all"
    ray: bool = True
    image: str | None = None
    container: str = ""
    gpu_mode: str = "gb10"
    owner_pid: int | None = None
    created: float = 0.0
    ray_port: int = 6379
    docker_tmpfs: bool = True  # node's /var/lib/docker equivalent in RAM (fast down)
    # CPU niceness of every node process (sshd, dockerd, what they start): 19 lets a bench's
    # console on the same machine run as if the nodes were other machines
    nice: int = 0

    # ------------------------------------------------------------------ paths
    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def config_path(self) -> Path:
        return self.path / "sparktui.yaml"

    @property
    def key_path(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.path / "known_hosts"

    @property
    def ext_bridge(self) -> str:
        return f"{self.id}ext"

    @property
    def ic_bridge(self) -> str:
        return f"{self.id}ic"

    @property
    def jump_ip(self) -> str:
        return f"198.18.{self.k}.1"

    @property
    def head(self) -> Node:
        return next(n for n in self.nodes if n.role == "head")

    @property
    def workers(self) -> list[Node]:
        return [n for n in self.nodes if n.role != "head"]

    def node(self, name: str | Node) -> Node:
        """The node called `name` (`spark-1`...), or the Node itself."""
        if isinstance(name, Node):
            return name
        for n in self.nodes:
            if n.name == name or n.netns == name:
                return n
        raise KeyError(f"lab {self.id} has no node {name!r}")

    # ------------------------------------------------------------------ acting on nodes
    def exec(self, node: str | Node, argv: list[str], **kw):
        """Run argv as root inside the node (nsenter; no ssh). kw: check, input, timeout."""
        from tests.lab.node import exec_

        return exec_(self.node(node), argv, **kw)

    def sh(self, node: str | Node, script: str, **kw):
        """Run a bash script inside the node."""
        return self.exec(node, ["bash", "-c", script], **kw)

    def ssh_argv(self, node: str | Node, *command: str) -> list[str]:
        """A real `ssh` command line to the node's external IP with the lab's key/known_hosts."""
        n = self.node(node)
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(self.key_path),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-p",
            str(n.ssh_port),
            f"root@{n.ext_ip}",
            *command,
        ]

    def ssh(self, node: str | Node, command: str, check: bool = True, timeout: float = 60):
        """Run a shell command on the node over real ssh."""
        from tests.lab.proc import run

        return run(self.ssh_argv(node, command), check=check, timeout=timeout)

    def docker(self, node: str | Node, *args: str, check: bool = True, timeout: float = 120):
        """`docker <args>` against the node's own dockerd."""
        return self.exec(node, ["docker", *args], check=check, timeout=timeout)

    def containers(self) -> dict[str, list[tuple[str, str]]]:
        """Every container of every node: sorted (full id, state) pairs per node name."""
        out = {}
        for n in self.nodes:
            text = self.docker(n, "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.State}}").stdout
            out[n.name] = sorted(tuple(line.split()) for line in text.splitlines())
        return out

    def host_path(self, node: str | Node, path: str) -> Path:
        """A path on the node, as the host can open it (through the node's mount namespace)."""
        n = self.node(node)
        if not n.init_pid:
            raise RuntimeError(f"node {n.name} is not running")
        return Path(f"/proc/{n.init_pid}/root") / path.lstrip("/")

    def read_file(self, node: str | Node, path: str) -> str:
        return self.host_path(node, path).read_text()

    def write_file(self, node: str | Node, path: str, text: str) -> None:
        p = self.host_path(node, path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def append_line(
        self, node: str | Node, path: str, line: str, container: str | None = None
    ) -> None:
        """Append `line` (+ newline) to a file on the node, or inside one of its containers."""
        if container is None:
            p = self.host_path(node, path)
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a") as fh:
                fh.write(line + "\n")
                fh.flush()
            return
        self.exec(
            node,
            [
                "docker",
                "exec",
                "-i",
                container,
                "sh",
                "-c",
                'mkdir -p "$(dirname "$1")" && cat >> "$1"',
                "sh",
                path,
            ],
            input=line + "\n",
        )

    def ray_nodes(self) -> list[dict]:
        """The real Ray node table, read in the head's container."""
        from tests.lab.ray import node_table

        return node_table(self)

    def set_gpu_mode(
        self,
        node: str | Node,
        mode: str,
        apps: list[tuple[int, str, int]] | tuple = (),
        utilization: int = 0,
    ) -> None:
        """What the node's nvidia-smi reports: "gb10" or "h200", and its compute apps.

        Containers started later get the new state (the hook copies it in at start).
        """
        from tests.lab.gpu_state import write_state

        n = self.node(node)
        write_state(
            n.path / "sbin" / "nvidia-smi.json",
            mode,
            index=n.index,
            apps=apps,
            utilization=utilization,
        )

    # ------------------------------------------------------------------ persistence
    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / "lab.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path / "lab.json")

    @classmethod
    def load(cls, lab_id: str) -> Lab:
        data = json.loads((STATE_ROOT / lab_id / "lab.json").read_text())
        nodes = [Node(**n) for n in data.pop("nodes")]
        return cls(nodes=nodes, **data)


def new_lab(k: int, n_nodes: int) -> Lab:
    """The address plan of lab `sl<k>`: ext 198.18.<k>.0/24 (jump host .1), ic 198.19.<k>.0/24."""
    lab_id = f"{PREFIX}{k}"
    lab = Lab(id=lab_id, k=k, dir=str(STATE_ROOT / lab_id))
    for i in range(1, n_nodes + 1):
        lab.nodes.append(
            Node(
                name=f"spark-{i}",
                index=i,
                role="head" if i == 1 else "worker",
                netns=f"{lab_id}n{i}",
                ext_ip=f"198.18.{k}.{10 + i}",
                ic_ip=f"198.19.{k}.{10 + i}",
                host_ext_veth=f"{lab_id}n{i}e",
                host_ic_veth=f"{lab_id}n{i}i",
                dir=str(STATE_ROOT / lab_id / "nodes" / f"spark-{i}"),
            )
        )
    return lab


def lab_ids() -> list[str]:
    """Ids of every lab with a state dir on this machine (any owner)."""
    if not STATE_ROOT.is_dir():
        return []
    return sorted(
        (p.name for p in STATE_ROOT.iterdir() if ID_RE.match(p.name) and (p / "lab.json").exists()),
        key=lambda s: int(s[len(PREFIX) :]),
    )


@contextmanager
def machine_lock() -> Iterator[None]:
    """Serialise id allocation (and other machine-wide steps) between labs."""
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
