"""`sparktui` with no subcommand: the console. Textual is imported only inside run()."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from sparktui.commands.common import load_config

if TYPE_CHECKING:
    import argparse

    from sparktui.tui.backend import Backend


def run(args: argparse.Namespace) -> int:
    """Open the console; 2 on a config error (one `FILE:LINE: message` line on stderr)."""
    if getattr(args, "demo", False):
        from sparktui.tui.demo import DemoBackend

        backend: Backend = DemoBackend(read_only=getattr(args, "read_only", False))
    else:
        cfg = load_config(args)
        if cfg is None:
            return 2
        from sparktui.tui.live import LiveBackend

        backend = LiveBackend(cfg, read_only=cfg.read_only)
    from sparktui import locations
    from sparktui.tui.app import SparkApp

    app = SparkApp(
        backend, theme=getattr(args, "theme", None), user_themes_dir=locations.user_themes_dir()
    )
    app.run()
    if app.return_code not in (None, 0):
        print(
            "sparktui: the console stopped with an error; nothing on the nodes was stopped",
            file=sys.stderr,
        )
        return app.return_code or 1
    return 0
