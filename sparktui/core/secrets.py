"""Masking of secret-looking values (panes, JSON, audit log)."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MASK = "****"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask_secrets(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def mask_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """Mask `NAME=value` and `--name value` / `--name=value` where NAME looks secret."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if a.startswith("--") and is_secret_name(a):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(a)
                hide_next = True
            continue
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", a, re.S)
        if m and is_secret_name(m.group(1)) and m.group(2):
            out.append(f"{m.group(1)}={MASK}")
        else:
            out.append(a)
    return out
