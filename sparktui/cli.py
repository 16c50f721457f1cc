"""Command line: `sparktui` (the console) and its headless subcommands.

Subcommands live in `sparktui.commands.<name>` with `add_arguments(parser)` and
`run(args) -> int`, imported only when used so `sparktui --version` stays fast.
Exit codes: 0 fine, 1 an error finding (or a failed action), 2 usage or config error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sparktui import __version__

SUBCOMMANDS: dict[str, str] = {
    "status": "show every node's state and what is wrong",
    "diagnose": "find known crash signatures in a vLLM log (file or stdin)",
    "doctor": "preflight: check the cluster is ready to serve",
    "teardown": "stop and remove the configured container on every node",
    "restart": "tear down, then start Ray (head, then workers) pinned to the configured IPs",
    "serve": "preflight, then start vLLM on the head and wait until /health answers",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 2, one line, no traceback
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _global_options(p: argparse.ArgumentParser, *, sub: bool) -> None:
    default = argparse.SUPPRESS if sub else None
    p.add_argument("-c", "--config", metavar="FILE", default=default,
                   help="cluster config (default: $SPARKTUI_CONFIG, ./sparktui.yaml, "
                        "~/.config/sparktui/config.yaml; none: this machine alone)")
    p.add_argument("--read-only", action="store_true",
                   default=argparse.SUPPRESS if sub else False,
                   help="watch only: refuse every command that changes a node")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sparktui",
        description="A console for vLLM across GPU nodes in a Ray cluster. "
                    "Without a subcommand, opens the console.",
    )
    parser.add_argument("--version", action="version", version=f"sparktui {__version__}")
    _global_options(parser, sub=False)
    parser.add_argument("--theme", metavar="NAME", help="console theme (shipped or user theme)")
    parser.add_argument("--demo", action="store_true",
                        help="play the seed story (two Sparks, IP mismatch) with no cluster")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _global_options(p, sub=True)
        module = _module(name)
        if module is not None:
            module.add_arguments(p)
    return parser


def _module(name: str):
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
    try:
        if args.command is None:
            from sparktui.commands import console
            return console.run(args)
        module = _module(args.command)
        if module is None:
            print(f"sparktui: '{args.command}' is not available in this build", file=sys.stderr)
            return 2
        return module.run(args)
    except KeyboardInterrupt:
        print("sparktui: interrupted; nothing on the nodes was stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
