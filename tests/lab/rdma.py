"""RDMA stand-ins on a lab node: there is no ConnectX-7 here, so `/sys/class/infiniband` and
`ibdev2netdev` are made to print what a DGX Spark's do.

Formats, from the sources (not invented):
- /sys/class/infiniband/<dev>/ports/<n>/state reads `4: ACTIVE` / `1: DOWN`, link_layer
  `Ethernet` for RoCE, gids/<i> eight colon-separated groups of four hex digits,
  gid_attrs/types/<i> `IB/RoCE v1` or `RoCE v2` (an unpopulated index fails to read with
  EINVAL: the stand-in simply has no file), gid_attrs/ndevs/<i> the net device: Linux
  Documentation/ABI/stable/sysfs-class-infiniband and drivers/infiniband/core/sysfs.c.
- The GID table of a RoCE port with one IPv4 address: index 0 fe80::… IB/RoCE v1, 1 the
  same RoCE v2, 2 ::ffff:<ipv4> IB/RoCE v1, 3 ::ffff:<ipv4> RoCE v2 (NVIDIA's "RoCE v2 GID
  index" notes; show_gids output in the DGX Spark NCCL playbook).
- A Spark's CX-7 shows four devices, two per QSFP port (the two PCIe halves):
  rocep1s0f0/roceP2p1s0f0 on enp1s0f0np0/enP2p1s0f0np0, rocep1s0f1/roceP2p1s0f1 on the
  second port (build.nvidia.com/spark/nccl; NVIDIA/dgx-spark-playbooks #102).
- `ibdev2netdev` (MLNX_OFED) prints `rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)`.

`install()` mounts a tmpfs holding the stand-in over the node's /sys/class (the real
/sys/class/net bound back inside it) in the node's own mount namespace, and puts
`ibdev2netdev` on its PATH; `remove()` undoes both. Containers never see it (they mount
their own sysfs).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.lab import node as nodemod
from tests.lab.state import IC_IF, Lab, Node


@dataclass(frozen=True)
class Port:
    device: str
    netdev: str
    up: bool


def spark_ports() -> list[Port]:
    """A DGX Spark with one QSFP cable in port 0: both halves of it up, port 1 down."""
    return [
        Port("rocep1s0f0", IC_IF, True),
        Port("roceP2p1s0f0", "enP2p1s0f0np0", True),
        Port("rocep1s0f1", "enp1s0f1np1", False),
        Port("roceP2p1s0f1", "enP2p1s0f1np1", False),
    ]


def _gid_hex(ipv4: str | None, link_local: bool, suffix: int) -> str:
    if link_local:
        groups = ["fe80", "0000", "0000", "0000", "4a8a", "d2ff", "fe00", f"{suffix:04x}"]
    else:
        assert ipv4 is not None
        a, b, c, d = (int(x) for x in ipv4.split("."))
        groups = ["0000"] * 5 + ["ffff", f"{a:02x}{b:02x}", f"{c:02x}{d:02x}"]
    return ":".join(groups)


def install(lab: Lab, node: str | Node, ports: list[Port] | None = None) -> None:
    n = lab.node(node)
    ports = ports if ports is not None else spark_ports()
    root = "/run/lab-sysclass"
    lines = [
        "set -e",
        f"mkdir -p {root} /run/lab-realclass",
        f"mountpoint -q {root} || mount -t tmpfs -o size=4m tmpfs {root}",
        "mountpoint -q /run/lab-realclass || mount --bind /sys/class /run/lab-realclass",
        f"mkdir -p {root}/net",
        f"mountpoint -q {root}/net || mount --bind /run/lab-realclass/net {root}/net",
    ]
    for i, p in enumerate(ports):
        d = f"{root}/infiniband/{p.device}/ports/1"
        lines += [
            f"mkdir -p {d}/gids {d}/gid_attrs/types {d}/gid_attrs/ndevs",
            f"echo Ethernet > {d}/link_layer",
            f"echo '{'4: ACTIVE' if p.up else '1: DOWN'}' > {d}/state",
        ]
        table = [(True, "IB/RoCE v1"), (True, "RoCE v2")]
        if p.up:  # the second half has its own netdev and address on a real Spark
            table += [(False, "IB/RoCE v1"), (False, "RoCE v2")]
        base, _, last = n.ic_ip.rpartition(".")
        ipv4 = n.ic_ip if p.netdev == IC_IF else f"{base}.{(int(last) + 100 + i) % 250}"
        for idx, (ll, typ) in enumerate(table):
            lines += [
                f"echo {_gid_hex(ipv4, ll, i + 1)} > {d}/gids/{idx}",
                f"echo '{typ}' > {d}/gid_attrs/types/{idx}",
                f"echo {p.netdev} > {d}/gid_attrs/ndevs/{idx}",
            ]
        # Unpopulated entries exist as files that cannot be read (EINVAL) on a real port;
        # a directory in their place fails the same way for `read`.
        for idx in range(len(table), 8):
            lines += [
                f"echo {'0000:' * 7}0000 > {d}/gids/{idx}",
                f"mkdir -p {d}/gid_attrs/types/{idx}",
            ]
    lines.append(f"[ -d /sys/class/infiniband ] || mount --rbind {root} /sys/class")
    nodemod.exec_(n, ["sh", "-c", "\n".join(lines)])
    text = "".join(
        f"{p.device} port 1 ==> {p.netdev} ({'Up' if p.up else 'Down'})\\n" for p in ports
    )
    (n.path / "sbin" / "ibdev2netdev").write_text(f"#!/bin/sh\nprintf '{text}'\n")
    (n.path / "sbin" / "ibdev2netdev").chmod(0o755)


def remove(lab: Lab, node: str | Node) -> None:
    n = lab.node(node)
    nodemod.exec_(
        n,
        [
            "sh",
            "-c",
            "if mountpoint -q /sys/class/infiniband 2>/dev/null || "
            "[ -d /sys/class/infiniband ]; then umount -l /sys/class || true; fi; "
            "umount -l /run/lab-sysclass/net 2>/dev/null || true; "
            "umount -l /run/lab-sysclass 2>/dev/null || true; "
            "umount -l /run/lab-realclass 2>/dev/null || true",
        ],
        check=False,
    )
    (n.path / "sbin" / "ibdev2netdev").unlink(missing_ok=True)


def uverbs_device_args(lab: Lab, node: str | Node) -> list[str]:
    """`--device` args giving a container /dev/infiniband/uverbs0 and rdma_cm: character
    devices with the real numbers (231:192 and 10:58), made in the node's /run (opening them
    fails without the driver; the doctor only lists /dev/infiniband)."""
    n = lab.node(node)
    nodemod.exec_(
        n,
        [
            "sh",
            "-c",
            "mkdir -p /run/lab-ib && cd /run/lab-ib && "
            "{ [ -c uverbs0 ] || mknod uverbs0 c 231 192; } && "
            "{ [ -c rdma_cm ] || mknod rdma_cm c 10 58; }",
        ],
    )
    return [
        "--device",
        "/run/lab-ib/uverbs0:/dev/infiniband/uverbs0",
        "--device",
        "/run/lab-ib/rdma_cm:/dev/infiniband/rdma_cm",
    ]
