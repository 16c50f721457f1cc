"""The post-mortem bundle: one .tar.gz with what a bug report needs (read-only).

Inside `sparktui-bundle-<cluster>-<UTC time>/`:
- `status.json`: the snapshot, as `sparktui status --json` prints it;
- `doctor.json`: the preflight's findings, as `sparktui doctor --json`;
- `findings.json`: the live findings, the doctor's, and the knowledge base's on every log
  below, each with the node it concerns;
- `logs/<node>/`: the last N lines of the head's vLLM log, `docker logs` of the node's
  container, Ray's `raylet.out` and its newest worker logs, `node.txt` (uname, docker);
- `versions.json`: sparktui, Python, the jump host's platform, vLLM (`/version`), images;
- `config.json`: the effective config, secrets masked (keys like `*TOKEN*`, `*KEY*`, ...).

Nothing in it is taken from the nodes unmasked where it looks secret: `NAME=value` and
`--api-key value` in log lines are masked too.
"""

from __future__ import annotations

import asyncio
import io
import json
import platform
import re
import tarfile
import time
from dataclasses import dataclass, field, replace
from typing import Any

from sparktui import __version__
from sparktui.config import Config
from sparktui.core.command import sh
from sparktui.core.logs import RAY_LOG_DIR
from sparktui.core.model import Finding
from sparktui.core.safe_text import clean_text
from sparktui.core.secrets import MASK, is_secret_name, mask_argv
from sparktui.core.transport import Transport, TransportError
from sparktui.remote import script

BUNDLE_LOGS = script("bundle_logs.sh")
DEFAULT_LINES = 2000
_FILE = re.compile(r"^@@sparktui:file ([\w./-]+)@@$", re.M)
_SECRET_ASSIGN = re.compile(
    r"\b([A-Za-z_]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)[A-Za-z_]*)=(\S+)", re.I
)
_SECRET_FLAG = re.compile(r"(--[\w-]*(?:token|key|secret|password)[\w-]*)([= ])(\S+)", re.I)


def mask_text(text: str) -> str:
    """Secret-looking `NAME=value` and `--api-key value` in free text -> `****`."""
    text = _SECRET_ASSIGN.sub(lambda m: f"{m[1]}={MASK}", text)
    return _SECRET_FLAG.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)


def mask_config(data: Any, key: str = "") -> Any:
    """A config dump with the values of secret-named keys masked (argv lists too)."""
    if isinstance(data, dict):
        return {
            k: (
                MASK
                if is_secret_name(str(k)) and isinstance(v, str) and v
                else {e: MASK if isinstance(x, str) and x else x for e, x in v.items()}
                if is_secret_name(str(k)) and isinstance(v, dict)
                else mask_config(v, str(k))
            )
            for k, v in data.items()
        }
    if isinstance(data, list):
        if all(isinstance(x, str) for x in data):
            return [mask_text(x) for x in mask_argv(data)]
        return [mask_config(x, key) for x in data]
    if isinstance(data, str):
        return mask_text(data)
    return data


def split_files(stdout: str) -> dict[str, str]:
    """bundle_logs.sh output -> {file name: text}."""
    out: dict[str, str] = {}
    parts = _FILE.split(stdout)
    for i in range(1, len(parts) - 1, 2):
        body = parts[i + 1]
        body = body.split("\n@@sparktui:end@@", 1)[0]
        out[parts[i]] = body.strip("\n") + "\n"
    return out


@dataclass
class Bundle:
    name: str  # the top-level directory in the archive
    files: dict[str, bytes] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # node -> why its logs are missing

    def add_json(self, path: str, data: Any) -> None:
        self.files[path] = (json.dumps(data, indent=2, default=str) + "\n").encode()

    def write(self, path: str) -> None:
        with tarfile.open(path, "w:gz") as tar:
            now = time.time()
            for rel, data in sorted(self.files.items()):
                info = tarfile.TarInfo(f"{self.name}/{rel}")
                info.size, info.mtime, info.mode = len(data), int(now), 0o644
                tar.addfile(info, io.BytesIO(data))


async def node_logs(
    cfg: Config, name: str, transport: Transport, lines: int = DEFAULT_LINES
) -> dict[str, str]:
    """The last `lines` of every log of one node (read-only), by file name."""
    ncfg = cfg.node(name)
    assert ncfg is not None
    vlog = cfg.vllm.log if ncfg.role == "head" else ""
    command = sh(
        BUNDLE_LOGS,
        ncfg.container.name or "",
        str(lines),
        vlog,
        RAY_LOG_DIR,
        timeout=60,
        description=f"logs of {name} for the bundle",
    )
    result = await transport.run(command)
    return {k: mask_text(clean_text(v)) for k, v in split_files(result.stdout).items()}


def _log_findings(cfg: Config, node: str, file: str, text: str, snapshot: Any) -> list[Finding]:
    from sparktui.core.actions import diagnose_log_text

    out = []
    for f in diagnose_log_text(text, cfg, snapshot):
        out.append(
            replace(f, node=f.node or node, captures={**f.captures, "log": f"logs/{node}/{file}"})
        )
    return out


async def build_bundle(
    cfg: Config,
    transports: dict[str, Transport] | None = None,
    *,
    lines: int = DEFAULT_LINES,
    now: float | None = None,
) -> Bundle:
    """Everything the bundle holds, read from the nodes (nothing is changed there)."""
    from sparktui.core.actions.doctor import run_doctor
    from sparktui.core.monitor import Monitor
    from sparktui.core.serialize import snapshot_to_dict

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    b = Bundle(f"sparktui-bundle-{cfg.cluster_name}-{stamp}")
    monitor = Monitor(cfg, transports, read_only=True)
    try:
        snap = await monitor.refresh(wait=None, with_ray=True)
        b.add_json("status.json", snapshot_to_dict(snap))
        report = await run_doctor(cfg, monitor.transports)
        b.add_json(
            "doctor.json",
            {"ok": not report.errors, "findings": [f.to_dict() for f in report.findings]},
        )
        findings: list[Finding] = list(snap.findings) + list(report.findings)

        async def one(name: str) -> tuple[str, dict[str, str] | str]:
            try:
                return name, await node_logs(cfg, name, monitor.transports[name], lines)
            except (TransportError, OSError) as e:
                return name, clean_text(str(e))

        images: dict[str, list[str]] = {}
        for name, got in await asyncio.gather(*(one(n.name) for n in cfg.nodes)):
            node = snap.node(name)
            images[name] = sorted({c.image for c in node.containers}) if node else []
            if isinstance(got, str):
                b.errors[name] = got
                b.files[f"logs/{name}/ERROR.txt"] = (got + "\n").encode()
                continue
            for file, text in got.items():
                b.files[f"logs/{name}/{file}"] = text.encode()
                if file != "node.txt":
                    findings.extend(_log_findings(cfg, name, file, text, snap))
        b.add_json("findings.json", {"findings": [f.to_dict() for f in findings]})
        b.add_json(
            "versions.json",
            {
                "sparktui": __version__,
                "python": platform.python_version(),
                "jump_host": platform.platform(),
                "vllm": snap.vllm.version,
                "images": images,
            },
        )
        b.add_json("config.json", mask_config(cfg.model_dump(mode="json")))
    finally:
        if transports is None:  # the caller's transports stay open (the console's own)
            await monitor.close()
    return b
