"""`sparktui teardown`: stop and remove the configured container on every node."""

from __future__ import annotations

from sparktui.commands import actions_cli


def add_arguments(p) -> None:
    actions_cli.add_arguments(p, "teardown")


def run(args) -> int:
    return actions_cli.run(args, "teardown")
