"""What a node's probe may skip this tick, and what the monitor keeps from earlier ones.

Two parts of the probe cost far more on the node than the rest: `docker exec` for the
environment the container's processes see (dockerd, containerd and runc, every tick), and
nvidia-smi's compute-apps query (a second nvidia-smi start). The environment depends only
on the container and its vLLM processes, so the probe names them (`env_key`) and skips the
`docker exec` while the key is the one the monitor read it for, and the monitor reads it
again at least every `env_max_age` seconds (ENV_MAX_AGE; ENV_MAX_AGE_RESIDENT for the
resident probe); the GPU processes are asked every `apps_every`
probes of a node (APPS_EVERY; the resident probe, whose GPU figures cost nothing, asks them
every APPS_EVERY_RESIDENT), and at once when the vLLM processes or a GPU's used memory
changed since they were read (a discrete GPU's; a unified pool's is the host's). A node that failed starts again from nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparktui.core.model import GpuProcess
from sparktui.core.probes.script import GpuQueries, ProbeResult

ENV_MAX_AGE = 60.0  # seconds: the environment is read again at least this often
# ... by the resident probe, which lists the vLLM processes again on every docker event and
# at least every 20 s: the age is only the net under the key
ENV_MAX_AGE_RESIDENT = 300.0
APPS_EVERY = 5  # nvidia-smi --query-compute-apps on every Nth probe of a node
APPS_EVERY_RESIDENT = 30  # about a minute at the default 2 s refresh


@dataclass
class _Kept:
    """One node's last environment read (and the key it was read for) and GPU processes."""

    probes: int = 0
    env_key: str | None = None
    env_at: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    env_pid: int | None = None
    env_source: str | None = None
    vllm_argv: list[str] | None = None
    apps: list[GpuProcess] | None = None
    apps_for: tuple | None = None  # (env key, GPUs' used memory) when apps was read
    now_for: tuple | None = None  # the same, from the last probe


class ProbeReuse:
    """Per node: the probe arguments that skip what is still known, and the merge of a
    probe's answer with what it skipped."""

    def __init__(self, apps_every: int = APPS_EVERY, env_max_age: float = ENV_MAX_AGE) -> None:
        self._kept: dict[str, _Kept] = {}
        self.apps_every = apps_every
        self.env_max_age = env_max_age

    def args(self, name: str, now: float) -> tuple[GpuQueries, str | None]:
        """(gpu_queries, env_key) for this node's next probe."""
        k = self._kept.setdefault(name, _Kept())
        apps = k.apps is None or k.probes % self.apps_every == 0 or k.now_for != k.apps_for
        key = k.env_key if k.env_key and now - k.env_at < self.env_max_age else None
        return ("gpus,apps" if apps else "gpus"), key

    def merge(self, name: str, res: ProbeResult, now: float) -> None:
        """Fill what `res` skipped from the kept copy; keep what it read."""
        k = self._kept.setdefault(name, _Kept())
        k.probes += 1
        # a unified pool's "used" is the host's memory: it moves all the time
        k.now_for = (res.env_key, tuple(g.memory_used_mib for g in res.gpus if not g.unified))
        if res.env_unchanged and res.env_key is not None and res.env_key == k.env_key:
            res.env, res.env_pid, res.env_source = dict(k.env), k.env_pid, k.env_source
            res.vllm_argv = list(k.vllm_argv) if k.vllm_argv is not None else None
        elif (sec := res.sections.get("env")) is not None and sec.ok:
            k.env_key, k.env_at = res.env_key, now
            k.env, k.env_pid, k.env_source = dict(res.env), res.env_pid, res.env_source
            k.vllm_argv = list(res.vllm_argv) if res.vllm_argv is not None else None
        else:
            k.env_key = None
        if res.apps_skipped and k.apps is not None:
            res.gpu_processes = list(k.apps)
        elif (sec := res.sections.get("gpu_apps")) is not None and sec.ok:
            k.apps, k.apps_for = list(res.gpu_processes), k.now_for
        else:
            k.apps = None

    def forget(self, name: str) -> None:
        """The node did not answer: its next probe asks for everything."""
        self._kept.pop(name, None)
