"""`sparktui bundle`: one archive with what a bug report needs (read-only)."""

from __future__ import annotations

import argparse
import os
import sys


def _lines(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of lines: {text!r}") from None
    if not 1 <= n <= 1_000_000:
        raise argparse.ArgumentTypeError(f"--lines must be 1..1000000, not {n}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the .tar.gz (default: ./sparktui-bundle-<cluster>-<UTC time>.tar.gz)",
    )
    p.add_argument(
        "--lines",
        type=_lines,
        default=2000,
        metavar="N",
        help="last N lines of every log of every node (default 2000)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from sparktui.commands.common import load_config

    cfg = load_config(args)
    if cfg is None:
        return 2
    out = args.output
    if out is not None:
        parent = os.path.dirname(os.path.abspath(out))
        if os.path.isdir(out) or not os.path.isdir(parent):
            print(
                f"sparktui bundle: cannot write {out}: "
                f"{'it is a directory' if os.path.isdir(out) else 'no such directory'}",
                file=sys.stderr,
            )
            return 2
    from sparktui.core.bundle import build_bundle

    bundle = asyncio.run(build_bundle(cfg, lines=args.lines))
    path = out or f"{bundle.name}.tar.gz"
    try:
        bundle.write(path)
    except OSError as e:
        print(f"sparktui bundle: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    for node, why in bundle.errors.items():
        print(f"sparktui bundle: no logs from {node}: {why}", file=sys.stderr)
    print(
        f"wrote {path} ({len(bundle.files)} files; status, doctor, findings, logs of "
        f"{len(cfg.nodes) - len(bundle.errors)}/{len(cfg.nodes)} node(s), versions, "
        f"config with secrets masked)"
    )
    return 0
