"""`sparktui` argument parsing: the action subcommands and their help come from the core's
one registry; the rest are modules of their own."""

from __future__ import annotations

import pytest

from sparktui import cli
from sparktui.core.actions import ACTIONS


def _subparsers() -> dict:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


def test_every_registry_action_is_a_subcommand_described_by_the_registry():
    subs = _subparsers()
    for spec in ACTIONS.values():
        assert spec.id in subs
        assert subs[spec.id].description == spec.description
    assert set(subs) == {*cli.COMMANDS, *ACTIONS}


@pytest.mark.parametrize("name", ["teardown", "restart", "serve"])
def test_generated_action_subcommands_take_the_action_options(name):
    args = cli.build_parser().parse_args([name, "--yes", "--dry-run", "--json"])
    assert args.command == name and args.yes and args.dry_run and args.json
    assert args.run.keywords == {"action": name}
    assert hasattr(args, "force") == (name == "serve")


def test_demo_help_says_what_it_shows(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "two DGX Sparks" in out and "management IP" in out and "placement group" in out
