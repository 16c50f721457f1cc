"""`sparktui restart`: tear down, then start Ray (head, then workers) pinned to the configured IPs."""

from __future__ import annotations

from sparktui.commands import actions_cli


def add_arguments(p) -> None:
    actions_cli.add_arguments(p, "restart")


def run(args) -> int:
    return actions_cli.run(args, "restart")
