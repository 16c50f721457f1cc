"""Helpers shared by subcommands: loading the config with clean errors, JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any

from sparktui import config as config_mod


def load_config(args) -> config_mod.Config | None:
    """The config, or None after printing one `FILE:LINE: message` line (caller exits 2)."""
    try:
        cfg = config_mod.load(getattr(args, "config", None))
    except config_mod.ConfigError as e:
        print(str(e), file=sys.stderr)
        return None
    if getattr(args, "read_only", False):
        cfg.read_only = True
    return cfg


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
