"""Fault switches for tests: each acts on one node of one lab only (host PIDs of that node's
processes, or commands inside the node's namespaces) and has an inverse.

    stop_sshd / start_sshd        the node's sshd listener (open sessions survive, as with
                                  `systemctl stop ssh`)
    cut_link / restore_link       pull / replug the node's cable: link="ic" (default), "ext"
                                  or "both"
    set_mtu                       the MTU of the node's interconnect NIC (ends="node"), or of
                                  both ends of its cable (ends="both": the bridge follows)
    kill_raylet                   SIGKILL the raylet in the node's Ray container (the
                                  container's `ray start --block` then exits) -> start_container
    restart_dockerd               stop dockerd (its containers stop with it) and start it again
                                  -> start_container
    stop_container / start_container   `docker stop` / `docker start` on the node
    heal                          undo all of the above on every node, wait for Ray
"""

from __future__ import annotations

import signal

from tests.lab import network, proc
from tests.lab import node as nodemod
from tests.lab import ray as raymod
from tests.lab.proc import LabError
from tests.lab.state import IC_IF, Lab, Node


def _n(lab: Lab, node: str | Node) -> Node:
    n = lab.node(node)
    if not nodemod.is_ours(n, n.init_pid):
        raise LabError(f"node {n.name} of lab {lab.id} is not running")
    return n


def stop_sshd(lab: Lab, node: str | Node) -> list[int]:
    """Stop the node's sshd listener (SIGTERM by host PID); returns the PIDs stopped."""
    n = _n(lab, node)
    pids = nodemod.daemon_pids(n, "sshd")
    for pid in pids:
        proc.kill(pid, signal.SIGTERM)
    if not proc.wait_gone(pids, 10):
        raise LabError(f"{n.name}: sshd {pids} did not stop")
    return pids


def start_sshd(lab: Lab, node: str | Node) -> None:
    """Start the node's sshd again (no-op while it runs)."""
    n = _n(lab, node)
    if not nodemod.daemon_pids(n, "sshd"):
        nodemod.start_daemon(n, "sshd")
        proc.wait_for(lambda: nodemod.daemon_pids(n, "sshd"), 10, 0.05, f"{n.name} sshd")


def cut_link(lab: Lab, node: str | Node, link: str = "ic") -> None:
    """Pull the node's interconnect ("ic"), external ("ext") or both cables."""
    network.set_link(lab, _n(lab, node), link, up=False)


def restore_link(lab: Lab, node: str | Node, link: str = "ic") -> None:
    network.set_link(lab, _n(lab, node), link, up=True)


def set_mtu(lab: Lab, node: str | Node, mtu: int, ends: str = "node") -> None:
    """`ip link set dev enp1s0f0np0 mtu <mtu>` inside the node (a firmware reset on one end);
    ends="both" also sets the host end of its veth (to raise the whole path to jumbo)."""
    n = _n(lab, node)
    if ends not in ("node", "both"):
        raise ValueError(f"ends must be 'node' or 'both', not {ends!r}")
    if ends == "both":
        proc.run(["ip", "link", "set", "dev", n.host_ic_veth, "mtu", str(mtu)])
    proc.run(["ip", "-n", n.netns, "link", "set", "dev", IC_IF, "mtu", str(mtu)])


def raylet_pids(lab: Lab, node: str | Node) -> list[int]:
    n = _n(lab, node)
    return proc.find(n.init_pid, "raylet")


def kill_raylet(lab: Lab, node: str | Node) -> list[int]:
    """SIGKILL the raylet of the node's Ray container; returns the host PIDs killed."""
    n = _n(lab, node)
    pids = raylet_pids(lab, n)
    if not pids:
        raise LabError(f"{n.name}: no raylet running")
    for pid in pids:
        proc.kill(pid, signal.SIGKILL)
    proc.wait_gone(pids, 10)
    return pids


def restart_dockerd(lab: Lab, node: str | Node, timeout: float = 60) -> None:
    """Stop the node's dockerd (SIGTERM, like `systemctl restart docker`), start it again."""
    n = _n(lab, node)
    pids = nodemod.daemon_pids(n, "dockerd")
    for pid in pids:
        proc.kill(pid, signal.SIGTERM)
    if not proc.wait_gone(pids, timeout):
        raise LabError(f"{n.name}: dockerd {pids} did not stop in {timeout}s")
    nodemod.start_daemon(n, "dockerd")
    proc.wait_for(
        lambda: nodemod.exec_(n, ["docker", "version"], check=False).returncode == 0,
        30,
        0.1,
        f"{n.name} dockerd",
    )


def stop_container(lab: Lab, node: str | Node, name: str | None = None, timeout: int = 10) -> None:
    """`docker stop` the node's Ray container (or `name`)."""
    n = _n(lab, node)
    nodemod.exec_(
        n, ["docker", "stop", "-t", str(timeout), name or lab.container], timeout=timeout + 60
    )


def start_container(lab: Lab, node: str | Node, name: str | None = None) -> None:
    """`docker start` the node's Ray container (or `name`)."""
    n = _n(lab, node)
    nodemod.exec_(n, ["docker", "start", name or lab.container])


def heal(lab: Lab, timeout: float = 300) -> None:
    """Undo every fault on every node; if Ray is not whole, recreate its containers."""
    for n in lab.nodes:
        start_sshd(lab, n)
        restore_link(lab, n, "both")
        if set_mtu_needed(n):
            set_mtu(lab, n, 1500, ends="both")
        if not nodemod.daemon_pids(n, "dockerd"):
            nodemod.start_daemon(n, "dockerd")
        proc.wait_for(
            lambda n=n: nodemod.exec_(n, ["docker", "version"], check=False).returncode == 0,
            30,
            0.1,
            f"{n.name} dockerd",
        )
    if not lab.ray:
        return
    if _ray_whole(lab):
        return
    running = all(
        nodemod.exec_(
            n, ["docker", "inspect", "-f", "{{.State.Running}}", lab.container], check=False
        ).stdout.strip()
        == "true"
        for n in lab.nodes
    )
    if running:  # e.g. a container just (re)started: give its raylet time to register
        try:
            raymod.wait_alive(lab, 60)
            if _ray_whole(lab):
                return
        except LabError:
            pass
    raymod.stop(lab)
    raymod.start(lab)
    raymod.wait_alive(lab, timeout)


def set_mtu_needed(n: Node) -> bool:
    """Is either end of the node's interconnect cable not at the lab's 1500?"""
    ends = [
        ["cat", f"/sys/class/net/{n.host_ic_veth}/mtu"],
        ["ip", "netns", "exec", n.netns, "cat", f"/sys/class/net/{IC_IF}/mtu"],
    ]
    return any(proc.run(argv, check=False).stdout.strip() != "1500" for argv in ends)


def _ray_whole(lab: Lab) -> bool:
    """Every node alive in Ray under one address each, every raylet running."""
    try:
        table = raymod.node_table(lab, timeout=60)
    except LabError:
        return False
    addresses = {r["NodeManagerAddress"] for r in table if r.get("Alive")}
    return len(addresses) == len(lab.nodes) and all(raylet_pids(lab, n) for n in lab.nodes)
