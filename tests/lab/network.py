"""Bridges, veths, namespaces and iptables rules of one lab (all named with its id).

Root namespace = the jump host: bridge `<id>ext` holds 198.18.<k>.1 (every node's default
gateway); bridge `<id>ic` is the interconnect (no host address). Inside each node the veths
are renamed like a DGX Spark's NICs, and an OUTPUT guard lets traffic reach only 127/8 and
198.18/15.
"""

from __future__ import annotations

import os
import re
import shlex

from tests.lab.proc import LabError, run
from tests.lab.state import EXT_IF, IC_IF, Lab, Node

GUARD_RULES = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A OUTPUT -o lo -j ACCEPT
-A OUTPUT -d 127.0.0.0/8 -j ACCEPT
-A OUTPUT -d 198.18.0.0/15 -j ACCEPT
-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited
COMMIT
"""


def comment(lab: Lab) -> str:
    return f"sparktui-lab:{lab.id}"


def _ip_batch(lines: list[str], netns: str | None = None) -> None:
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    run(argv, input="\n".join(lines) + "\n")


def _sysctl_off_v6(ifname: str, netns: str | None = None) -> None:
    """No IPv6 on lab links (only the v4 plan exists; nothing can leak over link-local)."""
    path = f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"
    if netns is None:
        if os.path.exists(path):
            with open(path, "w") as fh:
                fh.write("1")
        return
    run(["ip", "netns", "exec", netns, "sh", "-c", f"[ -e {path} ] && echo 1 > {path} || true"])


def in_use_k() -> set[int]:
    """Third octets already used on this machine in 198.18/198.19 (addresses or routes)."""
    used: set[int] = set()
    text = run(["ip", "-4", "-o", "addr"]).stdout + run(["ip", "-4", "route"]).stdout
    for m in re.finditer(r"198\.1[89]\.(\d+)\.", text):
        used.add(int(m.group(1)))
    links = run(["ip", "-o", "link"]).stdout
    for m in re.finditer(r"\d+: sl(\d+)", links):
        used.add(int(m.group(1)))
    return used


def create(lab: Lab) -> None:
    """Bridges + one namespace per node with both NICs, routes and the egress guard."""
    host = [
        f"link add {lab.ext_bridge} type bridge",
        f"link add {lab.ic_bridge} type bridge",
        f"addr add {lab.jump_ip}/24 dev {lab.ext_bridge}",
    ]
    for n in lab.nodes:
        run(["ip", "netns", "add", n.netns])
        host += [
            f"link add {n.host_ext_veth} type veth peer name {EXT_IF} netns {n.netns}",
            f"link add {n.host_ic_veth} type veth peer name {IC_IF} netns {n.netns}",
            f"link set {n.host_ext_veth} master {lab.ext_bridge} up",
            f"link set {n.host_ic_veth} master {lab.ic_bridge} up",
        ]
    host += [f"link set {lab.ext_bridge} up", f"link set {lab.ic_bridge} up"]
    _ip_batch(host)
    for name in [lab.ext_bridge, lab.ic_bridge] + [
        v for n in lab.nodes for v in (n.host_ext_veth, n.host_ic_veth)
    ]:
        _sysctl_off_v6(name)
    for n in lab.nodes:
        _configure_node(lab, n)
    _host_rules(lab, add=True)


def _configure_node(lab: Lab, n: Node) -> None:
    _ip_batch(
        [
            "link set lo up",
            f"addr add {n.ext_ip}/24 dev {EXT_IF}",
            f"addr add {n.ic_ip}/24 dev {IC_IF}",
            f"link set {EXT_IF} up",
            f"link set {IC_IF} up",
            f"route add default via {lab.jump_ip} dev {EXT_IF}",
        ],
        netns=n.netns,
    )
    for ifname in (EXT_IF, IC_IF):
        _sysctl_off_v6(ifname, n.netns)
    run(["ip", "netns", "exec", n.netns, "iptables-restore"], input=GUARD_RULES)


def _host_rules(lab: Lab, add: bool) -> None:
    """FORWARD (and DOCKER-USER if a host dockerd made one): bridge-local traffic only."""
    c = ["-m", "comment", "--comment", comment(lab)]
    chains = ["FORWARD"]
    if run(["iptables", "-w", "-n", "-L", "DOCKER-USER"], check=False).returncode == 0:
        chains.append("DOCKER-USER")
    if not add:
        remove_host_rules(lab)
        return
    for chain in chains:
        for br in (lab.ext_bridge, lab.ic_bridge):
            run(["iptables", "-w", "-I", chain, "1", "-i", br, "-j", "DROP", *c])
            run(["iptables", "-w", "-I", chain, "1", "-i", br, "-o", br, "-j", "ACCEPT", *c])


def host_rules(lab: Lab) -> list[str]:
    """This lab's rules in the host's filter table, as `iptables -S` lines."""
    out = run(["iptables", "-w", "-S"]).stdout.splitlines()
    tag = comment(lab)
    return [
        line
        for line in out
        if f'--comment "{tag}"' in line
        or f"--comment {tag} " in line
        or line.endswith(f"--comment {tag}")
    ]


def remove_host_rules(lab: Lab) -> None:
    for line in host_rules(lab):
        args = shlex.split(line)
        if args[0] == "-A":
            args[0] = "-D"
            run(["iptables", "-w", *args], check=False)


def destroy(lab: Lab) -> None:
    """Remove namespaces, veths, bridges and host rules of this lab (missing ones are fine)."""
    for n in lab.nodes:
        if os.path.exists(f"/run/netns/{n.netns}"):
            run(["ip", "netns", "del", n.netns], check=False)
        for veth in (n.host_ext_veth, n.host_ic_veth):
            if os.path.exists(f"/sys/class/net/{veth}"):
                run(["ip", "link", "del", veth], check=False)
    for br in (lab.ext_bridge, lab.ic_bridge):
        if os.path.exists(f"/sys/class/net/{br}"):
            run(["ip", "link", "del", br], check=False)
    remove_host_rules(lab)
    left = leftovers(lab)
    if left:
        raise LabError(f"lab {lab.id}: could not remove {', '.join(left)}")


def leftovers(lab: Lab) -> list[str]:
    """Kernel objects of this lab that still exist (empty after a clean `down`)."""
    left = [f"netns {n.netns}" for n in lab.nodes if os.path.exists(f"/run/netns/{n.netns}")]
    links = [lab.ext_bridge, lab.ic_bridge] + [
        v for n in lab.nodes for v in (n.host_ext_veth, n.host_ic_veth)
    ]
    left += [f"link {x}" for x in links if os.path.exists(f"/sys/class/net/{x}")]
    left += [f"rule {r}" for r in host_rules(lab)]
    return left


def set_link(lab: Lab, node: Node, which: str, up: bool) -> None:
    """Pull or replug a node's cable: the host end of its veth goes down/up (carrier)."""
    veths = {
        "ic": [node.host_ic_veth],
        "ext": [node.host_ext_veth],
        "both": [node.host_ext_veth, node.host_ic_veth],
    }
    if which not in veths:
        raise ValueError(f"link must be 'ic', 'ext' or 'both', not {which!r}")
    for veth in veths[which]:
        run(["ip", "link", "set", veth, "up" if up else "down"])
