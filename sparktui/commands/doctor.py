"""`sparktui doctor`: preflight checks (read-only), as findings; exit 1 on any error."""

from __future__ import annotations

import sys

from sparktui.commands import actions_cli


def add_arguments(p) -> None:
    actions_cli.add_arguments(p, "doctor")


def run(args) -> int:
    import asyncio

    from sparktui.commands.common import load_config, print_json
    from sparktui.core.actions import build_plan
    from sparktui.core.actions.doctor import run_doctor

    cfg = load_config(args)
    if cfg is None:
        return 2
    if args.dry_run:
        from sparktui.commands.actions_cli import print_dry_run

        return print_dry_run(build_plan("doctor", cfg), args.json)
    report = asyncio.run(run_doctor(cfg))
    errors = report.errors
    if args.json:
        print_json(
            {
                "ok": not errors,
                "findings": [f.to_dict() for f in report.findings],
                "matrix": report.matrix,
            }
        )
        return 1 if errors else 0
    if report.matrix:
        from sparktui.core.actions.fabric import render_matrix

        ascii_only = (sys.stdout.encoding or "").lower().replace("-", "") != "utf8"
        print(render_matrix(report.matrix, ascii_only=ascii_only))
        print()
    if report.findings:
        actions_cli._print_findings(report.findings)
        print(
            f"doctor: {len(errors)} error(s), {len(report.findings) - len(errors)} other",
            file=sys.stderr if errors else sys.stdout,
        )
    else:
        print("doctor: no problems found; ready to serve")
    return 1 if errors else 0
