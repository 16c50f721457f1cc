"""`sparktui diagnose [--json] [FILE|-]`: known crash signatures in a vLLM log.

Reads the file (or stdin) in chunks, so multi-gigabyte logs and multi-megabyte lines are
fine. Prints findings root cause first. Exit 0 with no error finding, 1 with one, 2 on a
usage error (missing file, bad config or bad user pattern).
Log text is printed as plain text: control characters are escaped, nothing is markup.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from sparktui.commands.common import print_json
from sparktui.core.model import Finding
from sparktui.core.safe_text import escape
from sparktui.knowledge.kb import KnowledgeBaseError, load_builtin, load_for_config
from sparktui.knowledge.matcher import Matcher
from sparktui.knowledge.triage import diagnose_stream

JSON_KEYS = ("id", "category", "severity", "title", "line", "text", "fix", "captures")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file",
        nargs="?",
        default="-",
        metavar="FILE",
        help="vLLM log to read ('-' or nothing: standard input)",
    )
    p.add_argument(
        "--json", action="store_true", help='print {"findings": [...]} as JSON, root cause first'
    )


def _knowledge(args) -> Matcher | None:
    """The matcher with the user's patterns when a config is given or found."""
    try:
        if getattr(args, "config", None) is not None or _config_present():
            from sparktui.commands.common import load_config

            cfg = load_config(args)
            if cfg is None:
                return None
            kb = load_for_config(cfg)
        else:
            kb = load_builtin()
    except KnowledgeBaseError as e:
        print(f"sparktui diagnose: {e}", file=sys.stderr)
        return None
    return Matcher(kb)


def _config_present() -> bool:
    from sparktui import config as config_mod

    try:
        return config_mod.discover(None) is not None
    except OSError:  # an unreadable home or working directory: no config there
        return False


def run(args) -> int:
    matcher = _knowledge(args)
    if matcher is None:
        return 2
    path = args.file
    try:
        if path == "-":
            findings = diagnose_stream(sys.stdin.buffer, matcher)
        else:
            with open(path, "rb") as f:
                findings = diagnose_stream(f, matcher)
    except FileNotFoundError:
        print(f"sparktui diagnose: {path}: no such file", file=sys.stderr)
        return 2
    except IsADirectoryError:
        print(f"sparktui diagnose: {path}: is a directory", file=sys.stderr)
        return 2
    except PermissionError:
        print(f"sparktui diagnose: {path}: permission denied", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sparktui diagnose: {path}: {e.strerror or e}", file=sys.stderr)
        return 2

    if args.json:
        print_json({"findings": [finding_json(f) for f in findings]})
    else:
        print_human(findings, sys.stdout, source="stdin" if path == "-" else path)
    return 1 if any(f.severity == "error" for f in findings) else 0


def finding_json(f: Finding) -> dict:
    d = {k: getattr(f, k) for k in JSON_KEYS}
    d["message"] = f.message
    d["node"] = f.node
    d["links"] = list(f.links)
    return d


plain = escape  # log text in a report: control characters escaped, never interpreted


def print_human(findings: list[Finding], out: TextIO, source: str) -> None:
    if not findings:
        out.write(f"{plain(source)}: no known crash signature found\n")
        return
    errors = sum(f.severity == "error" for f in findings)
    out.write(f"{plain(source)}: {len(findings)} finding(s), {errors} error(s); root cause first\n")
    for i, f in enumerate(findings, 1):
        out.write("\n")
        out.write(f"{i}. [{f.severity.upper()}] {plain(f.title)}\n")
        out.write(f"   category: {f.category}   pattern: {f.id}   line: {f.line}\n")
        out.write(f"   {plain(f.message)}\n")
        if f.text:
            text = plain(f.text)
            if len(text) > 300:
                text = text[:300] + "…"
            out.write(f"   > {text}\n")
        if f.fix:
            out.write("   fix:\n")
            for step in f.fix.splitlines():
                out.write(f"     {plain(step)}\n")
        if f.links:
            out.write(f"   see: {plain(f.links[0])}\n")
