"""The programs sparktui runs on the nodes, one file each, shipped as package data.

`script(name)` returns the text of `sparktui/remote/<name>` (an `.sh` or `.py` file), read
once with `importlib.resources` and cached. Two rules apply while loading:

- A line `#@include <file>` is replaced by the text of that file (the same rules apply to
  it), so a shared fragment such as `_container_running.sh` is written once.
- Comment lines (first non-blank character `#`) become empty lines: comments stay in the
  files, not on the wire or in the node's process list, and line numbers in a remote error
  still match the file. So the remote files use no here-documents and no multi-line string
  literals (tests/unit/test_remote_scripts.py checks this).

The text is a constant of this package, so it is what `core.command.sh()` calls a literal:
config values never go into it, they travel only as positional parameters. The `.py` files
run on the node's own python3 (`python3 -c "$text"`): standard library only, Python 3.7
syntax (`ruff.toml` here sets that target), and nothing runs on import but under
`if __name__ == "__main__":`. The `.sh` files are POSIX sh, checked with `shellcheck -s sh`
by `scripts/test.sh`; a `.bash` file needs bash on the node (and has an `.sh` fallback).
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_INCLUDE = re.compile(r"^#@include ([\w.-]+)[ \t]*$", re.M)
_COMMENT = re.compile(r"^[ \t]*#.*$", re.M)
_NAME = re.compile(r"[A-Za-z0-9][\w-]*\.(sh|bash|py)")


@cache
def script(name: str) -> str:
    """The text of the remote program `name` (e.g. `"probe.sh"`), includes expanded and
    comment lines emptied. Raises ValueError for a name that is not a `.sh`/`.py` file of
    this package, FileNotFoundError when there is no such file."""
    if not _NAME.fullmatch(name.lstrip("_")):
        raise ValueError(f"not a remote script name: {name!r}")
    text = files(__name__).joinpath(name).read_text(encoding="utf-8")
    text = _INCLUDE.sub(lambda m: script(m[1]).rstrip("\n"), text)
    return _COMMENT.sub("", text)
