"""A node's "OS": tini as PID 1 in new PID/mount/UTS namespaces inside the node's netns,
its own /proc, /sys, /run, /tmp, /var/log and home, a real sshd and a real dockerd.

Killing the node's tini (by host PID) tears the whole node down.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.lab import proc
from tests.lab.proc import LabError, clean_env, run
from tests.lab.state import NODE_PATH, Lab, Node

GPU_DIR = Path(__file__).with_name("gpu")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"

BASHRC = """# sparktui lab node: nothing for non-interactive shells (keeps ssh commands fast)
case $- in *i*) ;; *) return ;; esac
PS1='\\u@\\h:\\w\\$ '
"""

BOOT = """#!/bin/sh
# PID 2 of node {name} (tini is PID 1). Builds the node's filesystem view, starts its daemons.
set -e
D={dir}
hostname {name}
mount --make-rprivate /
mount -t proc proc /proc
mkdir -p $D/.cg
mount --rbind /sys/fs/cgroup $D/.cg
mount -t sysfs sysfs /sys
mount --move $D/.cg /sys/fs/cgroup
mount -t tmpfs -o mode=755,size=64m tmpfs /run
mkdir -p /run/sshd /run/lock /run/user
mount -t tmpfs -o mode=1777,size=256m tmpfs /dev/shm
mount --bind $D/home /root
mount --bind $D/tmp /tmp
mount --bind $D/log /var/log
mount --bind $D/sbin /usr/local/sbin
mount --bind $D/etc/hosts /etc/hosts
mount --bind $D/etc/hostname /etc/hostname
mount --bind $D/etc/resolv.conf /etc/resolv.conf
{docker_mount}
sh $D/bin/start-sshd
sh $D/bin/start-dockerd
echo booted > /run/lab-booted
exec sleep infinity
"""

START_SSHD = """#!/bin/sh
exec /usr/sbin/sshd -f {dir}/ssh/sshd_config -E {dir}/log/sshd.log
"""

START_DOCKERD = """#!/bin/sh
# dockerd of node {name}: no bridge, no iptables, its own containerd, data under the lab.
export PATH={path}
rm -f /run/docker.pid /run/docker.sock
setsid dockerd --data-root {dir}/docker --exec-root /run/docker \\
  --host unix:///run/docker.sock --pidfile /run/docker.pid \\
  --bridge=none --iptables=false --ip-masq=false --ip-forward=false \\
  --userland-proxy=false --storage-driver=overlay2 --log-level=warn \\
  </dev/null >>{dir}/log/dockerd.log 2>&1 &
"""

SSHD_CONFIG = """# sshd of lab node {name}: key-only root login
Port {port}
ListenAddress 0.0.0.0
HostKey {dir}/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
AuthorizedKeysFile {dir}/ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 64:30:128
SetEnv PATH={path}
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
"""


def prepare(lab: Lab, n: Node, authorized_key: str) -> None:
    """Write the node's files (home, /etc overrides, scripts, sshd config and host key)."""
    d = n.path
    for sub in ("home/.ssh", "tmp", "log", "sbin", "etc", "bin", "ssh", "docker"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(d / "tmp", 0o1777)
    fmt = {
        "name": n.name,
        "dir": str(d),
        "path": NODE_PATH,
        "port": n.ssh_port,
        # on tmpfs the node's images and containers vanish with it (down in ~1 s, not the
        # many seconds rm -rf of overlay2 takes)
        "docker_mount": f"mount -t tmpfs -o mode=711 tmpfs {d}/docker"
        if lab.docker_tmpfs
        else "# docker data on disk",
    }
    (d / "home/.bashrc").write_text(BASHRC)
    (d / "home/.profile").write_text('[ -n "$BASH_VERSION" ] && [ -f ~/.bashrc ] && . ~/.bashrc\n')
    (d / "home/.ssh/authorized_keys").write_text(authorized_key)
    (d / "ssh/authorized_keys").write_text(authorized_key)
    hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    hosts += [f"{m.ext_ip}\t{m.name}" for m in lab.nodes]
    hosts += [f"{m.ic_ip}\t{m.name}-ic" for m in lab.nodes]
    (d / "etc/hosts").write_text("\n".join(hosts) + "\n")
    (d / "etc/hostname").write_text(n.name + "\n")
    (d / "etc/resolv.conf").write_text(f"# sparktui lab: no DNS\nnameserver {lab.jump_ip}\n")
    (d / "boot.sh").write_text(BOOT.format(**fmt))
    (d / "bin/start-sshd").write_text(START_SSHD.format(**fmt))
    (d / "bin/start-dockerd").write_text(START_DOCKERD.format(**fmt))
    (d / "ssh/sshd_config").write_text(SSHD_CONFIG.format(**fmt))
    key = d / "ssh/ssh_host_ed25519_key"
    if not key.exists():
        run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"{n.name}@{lab.id}",
                "-f",
                str(key),
            ]
        )
    install_gpu(lab, n)


def install_gpu(lab: Lab, n: Node) -> None:
    """Stand-in nvidia-smi and nvidia-container-runtime-hook on the node's /usr/local/sbin."""
    sbin = n.path / "sbin"
    for name in ("nvidia-smi", "nvidia-container-runtime-hook"):
        shutil.copyfile(GPU_DIR / name, sbin / name)
        os.chmod(sbin / name, 0o755)
    shutil.copyfile(FIXTURES / "h200_busy_q.xml", sbin / "nvidia-smi-h200.xml")
    from tests.lab.gpu_state import write_state  # local import: avoids a cycle at import time

    state_file = sbin / "nvidia-smi.json"
    if not state_file.exists():
        write_state(state_file, lab.gpu_mode, index=n.index)


def host_key(n: Node) -> str:
    """The node's public host key line (`ssh-ed25519 AAAA... comment`)."""
    return (n.path / "ssh/ssh_host_ed25519_key.pub").read_text().strip()


_POPENS: dict[int, subprocess.Popen] = {}


CPU_CGROUPS = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller, where it is mounted


def cpu_group(lab_id: str, nice: int) -> str | None:
    """A cpu cgroup for a lab's nodes weighted like niceness `nice` (CFS: 1024 / 1.25^nice):
    every node process is in it, whatever sessions sshd and dockerd start (with autogroup
    scheduling a process's own nice weighs only inside its session). None without cgroup
    v1's cpu controller (then only the processes' nice applies)."""
    if not nice or not os.path.isdir(CPU_CGROUPS):
        return None
    path = os.path.join(CPU_CGROUPS, f"sparktui-lab-{lab_id}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cpu.shares"), "w") as f:
            f.write(str(max(2, round(1024 / 1.25**nice))))
    except OSError:
        return None
    return path


def drop_cpu_group(lab_id: str) -> None:
    try:
        os.rmdir(os.path.join(CPU_CGROUPS, f"sparktui-lab-{lab_id}"))
    except OSError:
        pass  # none made, or not empty yet (then the next gc's rmdir takes it)


def boot(n: Node, nice: int = 0, group: str | None = None) -> None:
    """Start the node: nsenter its netns, new PID/mount/UTS namespaces, tini as PID 1 (every
    process of the node at niceness `nice`, and in cpu cgroup `group` when given)."""
    log = open(n.path / "log/node.log", "ab")
    join = ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh", group]
    p = subprocess.Popen(
        [
            *(join if group else []),
            *(["nice", "-n", str(nice)] if nice else []),
            "nsenter",
            f"--net=/run/netns/{n.netns}",
            "unshare",
            "--pid",
            "--fork",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--",
            "/usr/bin/docker-init",
            "--",
            "/bin/sh",
            str(n.path / "boot.sh"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=clean_env(),
        start_new_session=True,
        cwd="/",
    )
    log.close()
    _POPENS[p.pid] = p

    def tini() -> int | None:
        if p.poll() is not None:
            raise LabError(f"node {n.name} died while booting: see {n.path}/log/node.log")
        kids = proc.children(p.pid)
        return kids[0] if kids else None

    n.init_pid = proc.wait_for(tini, 10, 0.01, f"node {n.name} init")


def is_ours(n: Node, pid: int | None) -> bool:
    """Is `pid` still this node's tini (guards against PID reuse before any kill)?"""
    if not pid:
        return False
    args = proc.cmdline(pid)
    return bool(args) and "docker-init" in args[0] and str(n.path / "boot.sh") in args


def wait_booted(n: Node, timeout: float = 90) -> None:
    """Until the boot script ran, sshd listens and dockerd answers."""
    root = f"/proc/{n.init_pid}/root"

    def ready() -> bool:
        if not is_ours(n, n.init_pid):
            raise LabError(
                f"node {n.name} died while booting: see {n.path}/log/node.log "
                f"and {n.path}/log/dockerd.log"
            )
        return (
            os.path.exists(f"{root}/run/lab-booted")
            and os.path.exists(f"{root}/run/sshd.pid")
            and os.path.exists(f"{root}/run/docker.sock")
            and exec_(n, ["docker", "version", "-f", "{{.Server.Version}}"], check=False).returncode
            == 0
        )

    proc.wait_for(ready, timeout, 0.1, f"node {n.name} (sshd, dockerd)")


def nsenter_argv(n: Node, argv: Sequence[str], wd: str = "/root") -> list[str]:
    """argv that runs `argv` inside the node (its net, mount, UTS and PID namespaces)."""
    if not is_ours(n, n.init_pid):
        raise LabError(f"node {n.name} is not running")
    return [
        "nsenter",
        "-t",
        str(n.init_pid),
        "--net",
        "--mount",
        "--uts",
        "--pid",
        f"--wd={wd}",
        "--",
        *argv,
    ]


def exec_(
    n: Node,
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | bytes | None = None,
    timeout: float | None = 120,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """Run argv inside the node as root (like a root shell on the node), capture output."""
    return run(
        nsenter_argv(n, argv), check=check, input=input, timeout=timeout, env=clean_env(), text=text
    )


def kill(n: Node, timeout: float = 15) -> None:
    """SIGKILL the node's PID 1: the kernel kills every process of the node with it."""
    pid = n.init_pid
    if is_ours(n, pid):
        parent = next((pp for pp in list(_POPENS) if pid in proc.children(pp)), None)
        proc.kill(pid, signal.SIGKILL)
        if not proc.wait_gone([pid], timeout):
            raise LabError(f"node {n.name}: init {pid} survived SIGKILL")
        if parent is not None:
            _POPENS.pop(parent).wait(timeout)
    n.init_pid = None


def daemon_pids(n: Node, name: str) -> list[int]:
    """Host PIDs of the node's `sshd` listener or `dockerd` (children of its PID 1)."""
    if not is_ours(n, n.init_pid):
        return []
    marker = {"sshd": str(n.path / "ssh/sshd_config"), "dockerd": str(n.path / "docker")}[name]
    return [
        p
        for p in proc.children(n.init_pid)
        if proc.comm(p) == name and any(marker in a for a in proc.cmdline(p))
    ]


def start_daemon(n: Node, name: str) -> None:
    """(Re)start the node's sshd or dockerd with the same script the boot used."""
    script = {"sshd": "start-sshd", "dockerd": "start-dockerd"}[name]
    exec_(n, ["sh", str(n.path / "bin" / script)])
