"""Bring a lab up, tear it down, report its status."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tests.lab import image as imagemod
from tests.lab import labconfig, network, proc
from tests.lab import node as nodemod
from tests.lab import ray as raymod
from tests.lab.proc import LabError, run
from tests.lab.state import (
    CACHE_DIR,
    PIN_MODES,
    STATE_ROOT,
    Lab,
    lab_ids,
    machine_lock,
    new_lab,
)

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


def preflight() -> str | None:
    """Why a lab cannot run on this machine (None when it can)."""
    if sys.platform != "linux":
        return "the lab needs Linux"
    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, sshd, dockerd)"
    missing = [
        p
        for p in (
            "ip",
            "iptables",
            "iptables-restore",
            "nsenter",
            "unshare",
            "dockerd",
            "docker",
            "/usr/sbin/sshd",
            "ssh-keygen",
            "ssh",
            "/usr/bin/docker-init",
            "busybox",
        )
        if not shutil.which(p)
    ]
    if missing:
        return f"missing programs: {', '.join(missing)} (run scripts/setup.sh)"
    if run(["ip", "netns", "list"], check=False).returncode != 0:
        return "no network namespace support (`ip netns list` fails)"
    return None


def _allocate(n_nodes: int) -> Lab:
    used = network.in_use_k() | {int(i[2:]) for i in lab_ids()}
    used |= {int(p.name[2:]) for p in STATE_ROOT.glob("sl*") if p.name[2:].isdigit()}
    for k in list(range(10, 200)) + list(range(201, 255)):
        if k not in used:
            return new_lab(k, n_nodes)
    raise LabError("no free lab id (198.18.<k>.0/24 all in use)")


def up(
    nodes: int = 2,
    pin: str = "all",
    ray: bool = True,
    gpu_mode: str = "gb10",
    spec: imagemod.ImageSpec = imagemod.RAY_IMAGE,
    owner_pid: int | None = None,
    docker_tmpfs: bool = True,
    vllm: bool = False,
    log: Log = _stderr,
    nice: int = 0,
) -> Lab:
    """Bring up a lab of `nodes` nodes; on any failure (or Ctrl-C) it is torn down again.

    vllm=True: the vLLM image (tests/lab/vllm.py) in every node and a config with vllm keys;
    no Ray is started (`sparktui restart` starts it, as on real nodes). nice: the niceness
    of every node process (0-19)."""
    if pin not in PIN_MODES:
        raise ValueError(f"pin must be one of {PIN_MODES}, not {pin!r}")
    if nodes < 1 or nodes > 40:
        raise ValueError("nodes must be between 1 and 40")
    why = preflight()
    if why:
        raise LabError(why)
    t0 = time.monotonic()
    with machine_lock():
        lab = _allocate(nodes)
        lab.pin, lab.ray, lab.gpu_mode, lab.owner_pid = pin, ray and not vllm, gpu_mode, owner_pid
        lab.docker_tmpfs = docker_tmpfs
        lab.nice = max(0, min(19, int(nice)))
        lab.container = f"ray-{lab.id}"
        lab.created = time.time()
        lab.save()
        try:
            network.create(lab)
        except BaseException:
            down(lab, log=log)
            raise
    try:
        _bring_up(lab, spec, log, t0)
        if vllm:
            from tests.lab import vllm as vllmmod

            vllmmod.install(lab, log)
    except BaseException:
        log(f"{lab.id}: bring-up failed, tearing down")
        down(lab, log=log)
        raise
    return lab


def _bring_up(lab: Lab, spec: imagemod.ImageSpec, log: Log, t0: float) -> None:
    log(
        f"{lab.id}: network up ({len(lab.nodes)} nodes, ext 198.18.{lab.k}.0/24, "
        f"ic 198.19.{lab.k}.0/24) {time.monotonic() - t0:.1f}s"
    )
    run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"sparktui-lab-{lab.id}",
            "-f",
            str(lab.key_path),
        ]
    )
    pub = lab.key_path.with_suffix(".pub").read_text()
    group = nodemod.cpu_group(lab.id, lab.nice)
    for n in lab.nodes:
        nodemod.prepare(lab, n, pub)
        nodemod.boot(n, lab.nice, group)
    lab.save()
    for n in lab.nodes:
        nodemod.wait_booted(n)
    lines = []
    for n in lab.nodes:
        key = " ".join(nodemod.host_key(n).split()[:2])
        lines += [f"{n.ext_ip} {key}", f"{n.ic_ip} {key}"]
    lab.known_hosts.write_text("\n".join(lines) + "\n")
    log(f"{lab.id}: nodes up (sshd, dockerd) {time.monotonic() - t0:.1f}s")
    if lab.ray:
        tar = imagemod.tarball(spec, log=log)
        lab.image = spec.tag
        lab.save()
        import_image(lab, tar, spec)
        log(f"{lab.id}: image {spec.tag} in every node {time.monotonic() - t0:.1f}s")
        raymod.start(lab)
        table = raymod.wait_alive(lab)
        log(f"{lab.id}: Ray alive on {raymod.alive_addresses(table)} {time.monotonic() - t0:.1f}s")
    labconfig.write(lab)
    lab.save()


def import_image(lab: Lab, tar, spec: imagemod.ImageSpec) -> None:
    """`docker import` the cached tarball into every node, in parallel."""

    def one(n) -> None:
        with open(tar, "rb") as fh:
            run(
                nodemod.nsenter_argv(
                    n, ["docker", "import", *imagemod.import_args(spec), "-", spec.tag]
                ),
                stdin=fh,
                timeout=600,
                env=proc.clean_env(),
            )

    with ThreadPoolExecutor(len(lab.nodes)) as pool:
        list(pool.map(one, lab.nodes))


def down(lab: Lab | str, log: Log = _stderr) -> float:
    """Remove everything the lab made; returns seconds taken. Missing pieces are fine."""
    t0 = time.monotonic()
    if isinstance(lab, str):
        lab = Lab.load(lab)
    with ThreadPoolExecutor(max(1, len(lab.nodes))) as pool:
        list(pool.map(nodemod.kill, lab.nodes))
    network.destroy(lab)
    nodemod.drop_cpu_group(lab.id)
    if lab.path.is_dir() and lab.path.parent == STATE_ROOT:
        shutil.rmtree(lab.path, ignore_errors=True)
        if lab.path.exists():
            run(["rm", "-rf", "--one-file-system", str(lab.path)], check=False)
    dt = time.monotonic() - t0
    log(f"{lab.id}: down in {dt:.1f}s")
    return dt


def gc(log: Log = _stderr) -> list[str]:
    """Tear down labs whose owning process (a test session) is gone; returns their ids."""
    removed = []
    for lab_id in lab_ids():
        try:
            lab = Lab.load(lab_id)
        except (OSError, ValueError):
            continue
        if lab.owner_pid and not proc.alive(lab.owner_pid):
            down(lab, log=log)
            removed.append(lab_id)
    return removed


def status(lab: Lab) -> dict:
    """Per node: init running, sshd/dockerd PIDs, container state; Ray table if any."""
    out: dict = {
        "id": lab.id,
        "pin": lab.pin,
        "config": str(lab.config_path),
        "image": lab.image,
        "nodes": [],
    }
    for n in lab.nodes:
        running = nodemod.is_ours(n, n.init_pid)
        info = {
            "name": n.name,
            "role": n.role,
            "netns": n.netns,
            "ext_ip": n.ext_ip,
            "ic_ip": n.ic_ip,
            "init_pid": n.init_pid,
            "running": running,
        }
        if running:
            info["sshd"] = nodemod.daemon_pids(n, "sshd")
            info["dockerd"] = nodemod.daemon_pids(n, "dockerd")
            if lab.ray:
                cp = nodemod.exec_(
                    n,
                    ["docker", "inspect", "-f", "{{.State.Status}}", lab.container],
                    check=False,
                    timeout=20,
                )
                info["container"] = cp.stdout.strip() or "absent"
        out["nodes"].append(info)
    if lab.ray and nodemod.is_ours(lab.head, lab.head.init_pid):
        try:
            out["ray"] = [
                {
                    "address": r["NodeManagerAddress"],
                    "alive": r["Alive"],
                    "head": "node:__internal_head__" in r.get("Resources", {}),
                }
                for r in raymod.node_table(lab, timeout=30)
            ]
        except LabError as e:
            out["ray_error"] = str(e).splitlines()[0]
    out["leftovers"] = network.leftovers(lab) if not any(i["running"] for i in out["nodes"]) else []
    return out


def cache_dir() -> str:
    return str(CACHE_DIR)
