"""`sparktui serve`: preflight, then start vLLM on the head and wait until /health answers."""

from __future__ import annotations

from sparktui.commands import actions_cli


def add_arguments(p) -> None:
    actions_cli.add_arguments(p, "serve")


def run(args) -> int:
    return actions_cli.run(args, "serve")
