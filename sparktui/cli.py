"""Command line: `sparktui` (the console) and its headless subcommands.

A subcommand is either a module `sparktui.commands.<name>` with `add_arguments(parser)`
and `run(args) -> int` (status, diagnose, doctor), or an action of the core's registry
(`sparktui.core.actions.ACTIONS`) without a module of its own: its subcommand and help
come from the registry and `sparktui.commands.actions_cli` runs it. Nothing is imported
for `sparktui --version`.
Exit codes: 0 fine, 1 an error finding (or a failed action), 2 usage or config error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import NoReturn

from sparktui import __version__

#: Subcommands that are not actions; the actions' own come from the registry.
COMMANDS: dict[str, str] = {
    "status": "Show every node's state and what is wrong",
    "diagnose": "Find known crash signatures in a vLLM log (file or stdin)",
    "bundle": "Write one archive for a bug report: status, doctor, findings, every node's "
    "logs, versions, the config (secrets masked)",
}

DEMO_HELP = (
    "show the console on a built-in story, with no cluster: two DGX Sparks, Ray "
    "registered the head under its management IP instead of the configured "
    "interconnect IP, vLLM's placement group fails, and the console diagnoses why "
    "(nothing is run anywhere)"
)


def subcommands() -> dict[str, str]:
    """Every subcommand and its one-line help, actions as the registry describes them."""
    from sparktui.core.actions import ACTIONS

    return {**COMMANDS, **{a.id: a.description for a in ACTIONS.values()}}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2, one line, no traceback
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _global_options(p: argparse.ArgumentParser, *, sub: bool) -> None:
    default = argparse.SUPPRESS if sub else None
    p.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        default=default,
        help="cluster config (default: $SPARKTUI_CONFIG, ./sparktui.yaml, "
        "~/.config/sparktui/config.yaml; none: this machine alone)",
    )
    p.add_argument(
        "--read-only",
        action="store_true",
        default=argparse.SUPPRESS if sub else False,
        help="watch only: refuse every command that changes a node",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if sub else False,
        help="log in detail to ~/.local/state/sparktui/sparktui.log "
        "($XDG_STATE_HOME) and, except in the console, to stderr",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparktui",
        description="A console for vLLM across GPU nodes in a Ray cluster. "
        "Without a subcommand, opens the console.",
    )
    parser.add_argument("--version", action="version", version=f"sparktui {__version__}")
    _global_options(parser, sub=False)
    parser.add_argument("--theme", metavar="NAME", help="console theme (shipped or user theme)")
    parser.add_argument("--demo", action="store_true", help=DEMO_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in subcommands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _global_options(p, sub=True)
        run = _wire(name, p)
        if run is not None:
            p.set_defaults(run=run)
    return parser


def _wire(name: str, p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int] | None:
    """Add the subcommand's own options; its run function (None: not in this build)."""
    module = _module(name)
    if module is not None:
        module.add_arguments(p)
        run: Callable[[argparse.Namespace], int] = module.run
        return run
    from sparktui.core.actions import ACTIONS

    if name not in ACTIONS:
        return None
    from sparktui.commands import actions_cli

    actions_cli.add_arguments(p, name)
    return partial(actions_cli.run, action=name)


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"sparktui.commands.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"sparktui.commands.{name}":
            return None
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--version"], ["-V"]):
        print(f"sparktui {__version__}")
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    from sparktui import logfile

    debug = bool(getattr(args, "debug", False))
    path = logfile.setup(debug=debug, stderr=debug and args.command is not None)
    try:
        if args.command is None:
            from sparktui.commands import console

            return console.run(args)
        run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
        if run is None:
            print(f"sparktui: '{args.command}' is not available in this build", file=sys.stderr)
            return 2
        return run(args)
    except KeyboardInterrupt:
        print("sparktui: interrupted; nothing on the nodes was stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line for the user, the traceback in the log
        logging.getLogger("sparktui.cli").exception("sparktui %s failed", args.command)
        where = f" (details in {path})" if path else ""
        print(f"sparktui: internal error: {type(e).__name__}: {e}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
