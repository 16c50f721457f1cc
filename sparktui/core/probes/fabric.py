"""Parsers for the doctor probe's fabric sections (`sparktui/remote/doctor.sh`): network
devices from /sys/class/net, RDMA ports and GIDs from /sys/class/infiniband, `ibdev2netdev`,
`docker info` runtimes, a container's HostConfig, listening sockets from /proc/net/tcp{,6},
`nvidia-smi -L`, and the JSON the two helper programs print. Pure functions: text in, data
out; unreadable input gives empty results, never an exception."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NetDev:
    name: str
    mtu: int | None
    operstate: str  # up, down, lowerlayerdown, unknown, ...
    carrier: bool | None  # None: unreadable (an interface that is administratively down)

    @property
    def link_up(self) -> bool:
        return self.operstate in ("up", "unknown") and self.carrier is not False


def parse_netdev(text: str) -> dict[str, NetDev]:
    """`<name> <mtu> <operstate> <carrier>` lines (doctor.sh's `@@netdev`)."""
    out: dict[str, NetDev] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        name, mtu, state, carrier = parts
        out[name] = NetDev(
            name,
            int(mtu) if mtu.isdigit() else None,
            state.lower(),
            {"1": True, "0": False}.get(carrier),
        )
    return out


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str  # as sysfs prints it: 8 colon-separated groups of 4 hex digits
    ndev: str  # the net device it belongs to ('' = none)
    type: str  # "RoCE v2" or "IB/RoCE v1"

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), else None."""
        try:
            addr = ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None
        mapped = addr.ipv4_mapped
        return str(mapped) if mapped else None

    @property
    def empty(self) -> bool:
        return not self.gid or set(self.gid.replace(":", "")) <= {"0"}

    @property
    def link_local(self) -> bool:
        return self.gid.lower().startswith("fe80:")


@dataclass
class IbPort:
    device: str
    port: int
    link_layer: str  # Ethernet (RoCE) | InfiniBand
    state: str  # ACTIVE, DOWN, INIT, ARMED, POLLING (the text after "4: ")
    gids: dict[int, Gid] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


def parse_ib(text: str) -> list[IbPort]:
    """doctor.sh's `@@ib` lines: `port <dev> <n> <link_layer> <state file>` (the state file
    reads like `4: ACTIVE`), then `gid <dev> <n> <index> <gid> <ndev|-> <type>`."""
    ports: dict[tuple[str, int], IbPort] = {}
    for line in text.splitlines():
        parts = line.split(None, 4)
        if len(parts) >= 4 and parts[0] == "port" and parts[2].isdigit():
            state = parts[4] if len(parts) > 4 else ""
            state = state.split(":", 1)[-1].strip().upper()
            ports[(parts[1], int(parts[2]))] = IbPort(parts[1], int(parts[2]), parts[3], state)
        elif parts and parts[0] == "gid":
            g = line.split(None, 6)
            if len(g) < 7 or not g[2].isdigit() or not g[3].isdigit():
                continue
            p = ports.get((g[1], int(g[2])))
            if p is not None:
                p.gids[int(g[3])] = Gid(int(g[3]), g[4], "" if g[5] == "-" else g[5], g[6].strip())
    return list(ports.values())


@dataclass(frozen=True)
class IbLink:
    device: str
    port: int
    netdev: str
    up: bool


def parse_ibdev2netdev(text: str) -> list[IbLink]:
    """`rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)` lines (Mellanox OFED's ibdev2netdev)."""
    out: list[IbLink] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "port" and parts[3] == "==>" and parts[2].isdigit():
            out.append(
                IbLink(parts[0], int(parts[2]), parts[4], parts[5].strip("()").lower() == "up")
            )
    return out


def parse_runtimes(text: str) -> tuple[list[str], str | None]:
    """`docker info --format '{{json .Runtimes}} {{.DefaultRuntime}}'` -> (names, default)."""
    text = text.strip()
    if not text:
        return [], None
    body, _, default = text.rpartition(" ")
    try:
        data = json.loads(body)
    except ValueError:
        return [], None
    if not isinstance(data, dict):
        return [], None
    return sorted(data), default or None


def parse_json(text: str) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object, or None."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def parse_gpu_list(text: str) -> list[str]:
    """`nvidia-smi -L` -> its `GPU <n>: <name> (UUID: ...)` lines."""
    return [s.strip() for s in text.splitlines() if s.strip().startswith("GPU ")]


@dataclass(frozen=True)
class Listener:
    address: str  # 0.0.0.0, ::, 127.0.0.1, 198.19.0.11 ...
    port: int

    @property
    def wildcard(self) -> bool:
        return self.address in ("0.0.0.0", "::")

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return False


def _hex_addr(h: str) -> str | None:
    try:
        raw = bytes.fromhex(h)
    except ValueError:
        return None
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    if len(raw) == 16:  # four 32-bit words, each in host (little-endian) order
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        addr = ipaddress.IPv6Address(words)
        mapped = addr.ipv4_mapped
        return str(mapped) if mapped else str(addr)
    return None


def parse_listeners(text: str) -> list[Listener]:
    """/proc/net/tcp and tcp6 -> the sockets in LISTEN state (st 0A), with their address."""
    out: set[Listener] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A" or ":" not in parts[1]:
            continue
        h, _, p = parts[1].rpartition(":")
        addr = _hex_addr(h)
        try:
            port = int(p, 16)
        except ValueError:
            continue
        if addr is not None:
            out.add(Listener(addr, port))
    return sorted(out, key=lambda x: (x.port, x.address))


def parse_clock(text: str) -> float | None:
    """`date +%s.%N` -> seconds (None when the node's date has no %N, or none was printed)."""
    for line in text.split():
        try:
            return float(line)
        except ValueError:
            continue
    return None


def parse_meminfo_kib(text: str) -> dict[str, int]:
    """/proc/meminfo -> {field: kB} (MemTotal, MemFree, MemAvailable, Cached, ...)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0])
    return out
