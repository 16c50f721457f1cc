"""Console themes: the shipped `themes/*.yaml` (top level of the repository; in the wheel
as `sparktui/themes`, through the `sparktui/themes` link) plus the user's own files.

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
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from textual.color import Color, ColorParseError
from textual.theme import Theme

from sparktui.yamlmodel import YamlError, compose, dotted, rule, validate

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


def _colour(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise rule("colour", 'must be a colour string such as "#1e88e5"')
    text = value.strip()
    try:
        Color.parse(text)
    except ColorParseError as e:
        raise rule("colour", "{e}", e=str(e)) from None
    return text


Colour = Annotated[str, BeforeValidator(_colour)]


class ThemeFile(BaseModel):
    """What a theme file may say: Textual's base colours, sparktui's slots under variables."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    primary: Colour
    secondary: Colour | None = None
    accent: Colour | None = None
    warning: Colour | None = None
    error: Colour | None = None
    success: Colour | None = None
    foreground: Colour | None = None
    background: Colour | None = None
    surface: Colour | None = None
    panel: Colour | None = None
    boost: Colour | None = None
    dark: bool = True
    ansi: bool = False
    luminosity_spread: float = 0.15
    text_alpha: float = 0.95
    variables: dict[str, Colour] = Field(default_factory=dict)
    """Semantic slots (SLOTS) -> colour."""

    def to_theme(self) -> Theme:
        return Theme(**self.model_dump(exclude_none=True))


class ThemeError(ValueError):
    """A theme file that cannot be used; str() is `FILE:LINE: what is wrong`."""


@dataclass
class ThemeSet:
    themes: dict[str, Theme]
    sources: dict[str, str]  # theme name -> file it came from
    errors: list[str]  # one line per bad file


def parse_theme(text: str, source: str) -> Theme:
    """A Theme from YAML text; raises ThemeError naming `source` and the line on any problem."""
    try:
        data, lines = compose(text, source)
        if not isinstance(data, dict):
            raise YamlError(source, 1, "a theme must be a mapping (name: ..., primary: ...)")
        model = validate(ThemeFile, data, lines, source, dotted, root="theme")
    except YamlError as e:
        raise ThemeError(str(e)) from None
    return model.to_theme()


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
    ansi = (
        {"ansi-background": "ansi_black", "ansi-foreground": "ansi_white"} if (t and t.ansi) else {}
    )
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
