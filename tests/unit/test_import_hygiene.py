"""The headless layers run without Textual: a runtime check behind the import contracts."""

from __future__ import annotations

import subprocess
import sys

HEADLESS = [
    "sparktui.cli",
    "sparktui.config",
    "sparktui.core.monitor",
    "sparktui.core.actions",
    "sparktui.core.bundle",
    "sparktui.knowledge",
    "sparktui.commands.status",
    "sparktui.commands.diagnose",
    "sparktui.commands.actions_cli",
]


def test_headless_imports_do_not_load_the_tui():
    code = (
        "import importlib, sys\n"
        f"for m in {HEADLESS!r}: importlib.import_module(m)\n"
        "print(sorted(k for k in sys.modules if k == 'textual' or k.startswith('textual.')"
        " or k.startswith('sparktui.tui')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert out == "[]"
