"""Console themes: the shipped `sparktui/themes/*.yaml` plus the user's own files.

A theme file is YAML: Textual's base colours at the top level (`primary`, `background`,
...) and sparktui's semantic slots under `variables` (see SLOTS). Slots a theme leaves out
fall back to values derived from its base colours (`slot_defaults`). A file that fails to
parse or validate is reported once and skipped; Textual's built-in theme table is never
touched (themes are registered with `App.register_theme`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from textual.color import Color, ColorParseError
from textual.theme import Theme

DEFAULT_THEME = "sparktui-dark"

#: Semantic slots the stylesheet uses, with what each colours.
SLOTS: dict[str, str] = {
    "node-ok": "a reachable, healthy node; alive in Ray",
    "node-down": "an unreachable node or a dead Ray node",
    "node-stale": "state not known yet, or a node that stopped answering",
    "ip-mismatch": "the IP Ray registered differs from the configured one",
    "crash": "crash / error log lines and error findings",
    "log-warning": "warning log lines and warning findings",
    "finding-info": "informational findings",
    "mem-bar": "the used part of a memory bar",
    "mem-free": "the free part of a memory bar",
    "badge-readonly": "the READ-ONLY badge",
    "badge-demo": "the DEMO badge",
    "muted": "labels and secondary text",
}

COLOURS = ("primary", "secondary", "accent", "warning", "error", "success", "foreground",
           "background", "surface", "panel", "boost")
KEYS = (*COLOURS, "name", "dark", "ansi", "luminosity_spread", "text_alpha", "variables")


class ThemeError(ValueError):
    """A theme file that cannot be used; str() is `FILE: what is wrong`."""


@dataclass
class ThemeSet:
    themes: dict[str, Theme]
    sources: dict[str, str]  # theme name -> file it came from
    errors: list[str]  # one line per bad file


def _colour(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ThemeError(f"{where} must be a colour string such as \"#1e88e5\"")
    text = value.strip()
    try:
        Color.parse(text)
    except ColorParseError as e:
        raise ThemeError(f"{where}: {e}") from None
    return text


def parse_theme(text: str, source: str) -> Theme:
    """A Theme from YAML text; raises ThemeError naming `source` on any problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ThemeError(f"{source}{line}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ThemeError(f"{source}: a theme must be a mapping (name: ..., primary: ...)")
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise ThemeError(f"{source}: unknown key '{unknown[0]}' (known: {', '.join(KEYS)})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ThemeError(f"{source}: missing 'name'")
    if "primary" not in data:
        raise ThemeError(f"{source}: missing 'primary' colour")
    kwargs: dict[str, object] = {}
    for key in COLOURS:
        if data.get(key) is not None:
            kwargs[key] = _colour(data[key], f"{source}: {key}")
    for key in ("dark", "ansi"):
        if key in data:
            if not isinstance(data[key], bool):
                raise ThemeError(f"{source}: {key} must be true or false")
            kwargs[key] = data[key]
    for key in ("luminosity_spread", "text_alpha"):
        if key in data:
            if isinstance(data[key], bool) or not isinstance(data[key], (int, float)):
                raise ThemeError(f"{source}: {key} must be a number")
            kwargs[key] = float(data[key])
    variables = data.get("variables") or {}
    if not isinstance(variables, dict):
        raise ThemeError(f"{source}: variables must be a mapping of slot: colour")
    clean: dict[str, str] = {}
    for key, value in variables.items():
        clean[str(key)] = _colour(value, f"{source}: variables.{key}")
    return Theme(name=name.strip(), variables=clean, **kwargs)  # type: ignore[arg-type]


def _files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def shipped_theme_texts() -> list[tuple[str, str]]:
    """(file name, text) of every theme shipped in the package."""
    out = []
    root = resources.files("sparktui") / "themes"
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            out.append((f"sparktui/themes/{entry.name}", entry.read_text(encoding="utf-8")))
    return out


def load_themes(user_dir: Path | None) -> ThemeSet:
    """Shipped themes, then user themes (a user theme may override a shipped name)."""
    out = ThemeSet({}, {}, [])
    sources: list[tuple[str, str]] = list(shipped_theme_texts())
    if user_dir is not None:
        for path in _files(user_dir):
            try:
                sources.append((str(path), path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as e:
                out.errors.append(f"{path}: cannot read ({e})")
    for source, text in sources:
        try:
            theme = parse_theme(text, source)
        except ThemeError as e:
            out.errors.append(str(e))
            continue
        out.themes[theme.name] = theme
        out.sources[theme.name] = source
    return out


def slot_defaults(theme: Theme | None) -> dict[str, str]:
    """Values for slots a theme leaves out, derived from its base colours."""
    t = theme
    error = (t.error if t else None) or "red"
    warning = (t.warning if t else None) or "yellow"
    success = (t.success if t else None) or "green"
    primary = (t.primary if t else None) or "blue"
    accent = (t.accent if t else None) or primary
    ansi = {"ansi-background": "ansi_black", "ansi-foreground": "ansi_white"} if (
        t and t.ansi) else {}
    return {
        **ansi,
        "node-ok": success,
        "node-down": error,
        "node-stale": "ansi_bright_black" if (t and t.ansi) else "#808080",
        "ip-mismatch": accent,
        "crash": error,
        "log-warning": warning,
        "finding-info": primary,
        "mem-bar": primary,
        "mem-free": "ansi_bright_black" if (t and t.ansi) else "#404040",
        "badge-readonly": warning,
        "badge-demo": accent,
        "muted": "ansi_bright_black" if (t and t.ansi) else "#808080",
    }
