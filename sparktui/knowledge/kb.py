"""The crash knowledge base: load `patterns.yaml`, merge the user's patterns, validate.

Everything a pattern says (category, role, regexes, fix, links) is data; this module only
checks it and turns it into frozen dataclasses. A bad pattern is one `KnowledgeBaseError`
whose message names where it came from, the pattern id and the field.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

CATEGORIES: tuple[str, ...] = (
    "placement_group_ip_mismatch",
    "ray_worker_died_segfault",
    "nccl_error",
    "gloo_error",
    "not_enough_gpus",
    "cuda_oom_kv_cache",
    "ray_gcs_version",
    "cuda_arch_driver_mismatch",
    "shm_docker",
    "model_loading",
    "engine_startup",
    "port_in_use",
    "docker_container_conflict",
    "dgx_spark_gb10",
)
ROLES: tuple[str, ...] = ("primary", "predictive", "secondary", "context", "benign")
SEVERITIES: tuple[str, ...] = ("error", "warning", "info")
DEFAULT_SEVERITY = {"primary": "error", "secondary": "error", "predictive": "warning",
                    "context": "info", "benign": "info"}
MAX_SPAN = 10
DEFAULT_SPAN = 2
# Captures every hit gets from the line's Ray/vLLM prefix: "(Name pid=N, ip=X)".
PREFIX_CAPTURES = ("node_ip", "process")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$")
_PATTERN_KEYS = ("id", "category", "role", "severity", "title", "message", "regex", "regexes",
                 "anchor", "span", "explanation", "fix", "links", "silent", "enabled")
_CATEGORY_KEYS = ("title", "explanation", "fix", "links", "defer")
_RULE_KEYS = ("id", "when", "demote", "reroute")


class KnowledgeBaseError(ValueError):
    """A pattern (or rule) is invalid. The message names source, pattern id and field."""


@dataclass(frozen=True)
class Category:
    name: str
    title: str
    explanation: str
    fix: tuple[str, ...]
    links: tuple[str, ...]
    defer: bool = False


@dataclass(frozen=True)
class Pattern:
    id: str
    category: str
    role: str
    severity: str
    title: str
    regexes: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...] = field(repr=False, compare=False)
    anchor: str | None
    span: int
    message: str | None
    explanation: str
    fix: tuple[str, ...]
    links: tuple[str, ...]
    silent: bool = False
    origin: str = "builtin"

    @property
    def prefilter(self) -> tuple[str, ...]:
        """Single-line expressions the fast scanner looks for (any hit means 'check fully')."""
        return (self.anchor,) if self.anchor else self.regexes

    def search(self, text: str) -> re.Match[str] | None:
        for rx in self.compiled:
            m = rx.search(text)
            if m:
                return m
        return None

    def render_message(self, captures: Mapping[str, str]) -> str:
        return render_template(self.message, captures) if self.message else self.title


@dataclass(frozen=True)
class Rule:
    """Cross-pattern triage: when any of `when` was seen, demote or reroute categories."""

    id: str
    when: tuple[str, ...]
    demote: tuple[str, ...] = ()
    reroute: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class KnowledgeBase:
    categories: Mapping[str, Category]
    patterns: tuple[Pattern, ...]
    rules: tuple[Rule, ...] = ()

    @functools.cached_property
    def by_id(self) -> dict[str, Pattern]:
        return {p.id: p for p in self.patterns}

    def pattern(self, pattern_id: str) -> Pattern:
        return self.by_id[pattern_id]


# --- message templates ---------------------------------------------------------------------
# "{name}" is replaced by a capture; "[[ ... ]]" is kept only when every capture it names is
# known (so "Address in use[[ (port {port})]]" reads well with and without a port).

_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.S)


def _fields(template: str) -> list[str]:
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(str(e)) from None


def render_template(template: str, captures: Mapping[str, str]) -> str:
    def fill(text: str) -> str | None:
        out = []
        for literal, name, _spec, _conv in string.Formatter().parse(text):
            out.append(literal)
            if name is None:
                continue
            value = captures.get(name)
            if value in (None, ""):
                return None
            out.append(str(value))
        return "".join(out)

    def optional(m: re.Match[str]) -> str:
        return fill(m.group(1)) or ""

    text = _OPTIONAL.sub(optional, template)
    filled = fill(text)
    if filled is None:  # a mandatory capture is missing: fall back to "?"
        filled = fill_missing(text, captures)
    return filled


def fill_missing(text: str, captures: Mapping[str, str]) -> str:
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(text):
        out.append(literal)
        if name is not None:
            out.append(str(captures.get(name) or "?"))
    return "".join(out)


# --- loading -------------------------------------------------------------------------------

def _read_builtin() -> dict[str, Any]:
    text = resources.files("sparktui.knowledge").joinpath("patterns.yaml").read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise KnowledgeBaseError("patterns.yaml: not a mapping")
    return data


@functools.lru_cache(maxsize=1)
def load_builtin() -> KnowledgeBase:
    """The shipped knowledge base (validated; cached)."""
    return load()


def load(user_patterns: Iterable[Mapping[str, Any]] | None = None, *,
         source: str = "config", line: int | None = None,
         base: Mapping[str, Any] | None = None) -> KnowledgeBase:
    """The shipped knowledge base plus `user_patterns` (the config's `patterns:` list).

    A user pattern whose id exists overrides the shipped one field by field (`enabled: false`
    removes it); a new id adds a pattern. `source`/`line` say where user patterns came from,
    for error messages. `base` replaces the shipped YAML (tests).
    """
    data = dict(base) if base is not None else _read_builtin()
    where_builtin = "patterns.yaml"
    categories = _categories(data.get("categories"), where_builtin)
    raw = data.get("patterns")
    if not isinstance(raw, list):
        raise KnowledgeBaseError(f"{where_builtin}: 'patterns' must be a list")

    merged: dict[str, tuple[dict[str, Any], str]] = {}
    for i, item in enumerate(raw):
        pid = _raw_id(item, where_builtin, i)
        if pid in merged:
            raise KnowledgeBaseError(f"{where_builtin}: pattern '{pid}': duplicate id")
        merged[pid] = (dict(item), "builtin")

    where_user = f"{source}:{line}" if line else source
    seen_user: set[str] = set()
    for i, item in enumerate(user_patterns or ()):
        pid = _raw_id(item, where_user, i)
        if pid in seen_user:
            raise KnowledgeBaseError(f"{where_user}: pattern '{pid}': duplicate id")
        seen_user.add(pid)
        if pid in merged:
            old, _ = merged[pid]
            new = {**old, **dict(item)}
            if "regex" in item or "regexes" in item:  # the user's regexes replace ours
                new.pop("regex" if "regexes" in item else "regexes", None)
            merged[pid] = (new, where_user)
        else:
            merged[pid] = (dict(item), where_user)

    patterns = []
    for pid, (item, origin) in merged.items():
        enabled = item.get("enabled", True)
        if not isinstance(enabled, bool):
            raise KnowledgeBaseError(f"{origin}: pattern '{pid}': field 'enabled': must be "
                                     "true or false")
        if not enabled:
            continue
        patterns.append(_pattern(item, categories, origin))
    ids = {p.id for p in patterns}
    rules = tuple(_rule(r, ids, where_builtin, i) for i, r in enumerate(data.get("rules") or ()))
    return KnowledgeBase(categories=categories, patterns=tuple(patterns), rules=rules)


def load_for_config(cfg: Any) -> KnowledgeBase:
    """The knowledge base with the user's patterns from a `Config` (or the shipped one)."""
    user = getattr(cfg, "patterns", None) or []
    if not user:
        return load_builtin()
    return load(user, source=getattr(cfg, "path", None) or "config",
                line=getattr(cfg, "patterns_line", None))


# --- validation helpers --------------------------------------------------------------------

def _raw_id(item: Any, where: str, index: int) -> str:
    if not isinstance(item, Mapping):
        raise KnowledgeBaseError(f"{where}: pattern #{index + 1}: must be a mapping")
    pid = item.get("id")
    if not isinstance(pid, str) or not _ID_RE.match(pid):
        raise KnowledgeBaseError(
            f"{where}: pattern #{index + 1}: field 'id': must be a string of letters, digits "
            f"and _.:- (got {pid!r})")
    return pid


def _str_list(value: Any, fail) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise fail("must be a string or a non-empty list of non-empty strings")
    return tuple(v.strip() for v in value)


def _categories(raw: Any, where: str) -> dict[str, Category]:
    if not isinstance(raw, Mapping):
        raise KnowledgeBaseError(f"{where}: 'categories' must be a mapping")
    out = {}
    for name in CATEGORIES:
        c = raw.get(name)
        if not isinstance(c, Mapping):
            raise KnowledgeBaseError(f"{where}: category '{name}' is missing")
        unknown = set(c) - set(_CATEGORY_KEYS)
        if unknown:
            raise KnowledgeBaseError(f"{where}: category '{name}': unknown field "
                                     f"'{sorted(unknown)[0]}'")

        def fail(msg: str, f: str, name: str = name) -> KnowledgeBaseError:
            return KnowledgeBaseError(f"{where}: category '{name}': field '{f}': {msg}")
        out[name] = Category(
            name=name,
            title=_text(c.get("title"), lambda m: fail(m, "title")),
            explanation=_text(c.get("explanation"), lambda m: fail(m, "explanation")),
            fix=_str_list(c.get("fix"), lambda m: fail(m, "fix")),
            links=_str_list(c.get("links", []) or [], lambda m: fail(m, "links"))
            if c.get("links") else (),
            defer=bool(c.get("defer", False)),
        )
    extra = set(raw) - set(CATEGORIES)
    if extra:
        raise KnowledgeBaseError(f"{where}: unknown category '{sorted(extra)[0]}'")
    return out


def _text(value: Any, fail) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail("must be a non-empty string")
    return " ".join(value.split())


def _compile(rx: Any, fail) -> re.Pattern[str]:
    if not isinstance(rx, str) or not rx:
        raise fail("must be a non-empty string")
    try:
        return re.compile(rx)
    except re.error as e:
        raise fail(f"invalid regex {rx!r}: {e}") from None
    except (OverflowError, RecursionError) as e:
        raise fail(f"regex too complex: {e}") from None


def _pattern(item: Mapping[str, Any], categories: Mapping[str, Category],
             origin: str) -> Pattern:
    pid = item["id"]

    def fail_for(f: str):
        def fail(msg: str) -> KnowledgeBaseError:
            return KnowledgeBaseError(f"{origin}: pattern '{pid}': field '{f}': {msg}")
        return fail

    unknown = [k for k in item if k not in _PATTERN_KEYS]
    if unknown:
        raise fail_for(str(unknown[0]))(f"unknown field (known: {', '.join(_PATTERN_KEYS)})")

    category = item.get("category")
    if category not in categories:
        raise fail_for("category")(f"must be one of {', '.join(CATEGORIES)} (got {category!r})")
    cat = categories[category]

    role = item.get("role", "primary")
    if role not in ROLES:
        raise fail_for("role")(f"must be one of {', '.join(ROLES)} (got {role!r})")
    severity = item.get("severity", DEFAULT_SEVERITY[role])
    if severity not in SEVERITIES:
        raise fail_for("severity")(f"must be one of {', '.join(SEVERITIES)} (got {severity!r})")
    if role == "benign" and severity != "info":
        raise fail_for("severity")("a benign pattern must have severity info (it never alarms)")

    if "regex" in item and "regexes" in item:
        raise fail_for("regexes")("give 'regex' or 'regexes', not both")
    rkey = "regexes" if "regexes" in item else "regex"
    raw_rx = item.get(rkey)
    if raw_rx is None:
        raise fail_for("regex")("missing")
    if isinstance(raw_rx, str):
        raw_rx = [raw_rx]
    if not isinstance(raw_rx, list) or not raw_rx:
        raise fail_for(rkey)("must be a regex or a non-empty list of regexes")
    compiled = tuple(_compile(rx, fail_for(rkey)) for rx in raw_rx)
    anchor = item.get("anchor")
    if anchor is not None:
        _compile(anchor, fail_for("anchor"))

    span = item.get("span", DEFAULT_SPAN)
    if not isinstance(span, int) or isinstance(span, bool) or not 0 <= span <= MAX_SPAN:
        raise fail_for("span")(f"must be an integer from 0 to {MAX_SPAN}")

    title = item.get("title", cat.title)
    title = _text(title, fail_for("title"))

    groups: set[str] = set(PREFIX_CAPTURES)
    for rx in compiled:
        groups.update(rx.groupindex)
    message = item.get("message")
    if message is not None:
        if not isinstance(message, str) or not message.strip():
            raise fail_for("message")("must be a non-empty string")
        try:
            names = _fields(message.replace("[[", "").replace("]]", ""))
        except ValueError as e:
            raise fail_for("message")(f"bad template: {e}") from None
        for n in names:
            if not n.isidentifier():
                raise fail_for("message")(f"bad placeholder {{{n}}}")
            if n not in groups:
                raise fail_for("message")(f"{{{n}}} is not a named capture of the regexes")

    explanation = _text(item.get("explanation", cat.explanation), fail_for("explanation"))
    fix = _str_list(item.get("fix", list(cat.fix)), fail_for("fix"))
    links = _str_list(item["links"], fail_for("links")) if item.get("links") else ()
    for link in links:
        if not re.match(r"^https?://\S+$", link):
            raise fail_for("links")(f"not an http(s) URL: {link!r}")
    links = tuple(dict.fromkeys((*links, *cat.links)))

    silent = item.get("silent", False)
    if not isinstance(silent, bool):
        raise fail_for("silent")("must be true or false")
    if silent and role != "benign":
        raise fail_for("silent")("only a benign pattern can be silent")

    return Pattern(id=pid, category=category, role=role, severity=severity, title=title,
                   regexes=tuple(raw_rx), compiled=compiled, anchor=anchor, span=span,
                   message=" ".join(message.split()) if message else None,
                   explanation=explanation, fix=fix, links=links, silent=silent, origin=origin)


def _rule(raw: Any, ids: set[str], where: str, index: int) -> Rule:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
        raise KnowledgeBaseError(f"{where}: rule #{index + 1}: must be a mapping with an id")
    rid = raw["id"]

    def fail(f: str, msg: str) -> KnowledgeBaseError:
        return KnowledgeBaseError(f"{where}: rule '{rid}': field '{f}': {msg}")

    unknown = set(raw) - set(_RULE_KEYS)
    if unknown:
        raise fail(sorted(unknown)[0], "unknown field")
    when = _str_list(raw.get("when"), lambda m: fail("when", m))
    for pid in when:
        if pid not in ids:
            raise fail("when", f"unknown pattern '{pid}'")
    demote = _str_list(raw["demote"], lambda m: fail("demote", m)) if raw.get("demote") else ()
    for c in demote:
        if c not in CATEGORIES:
            raise fail("demote", f"unknown category '{c}'")
    reroute_raw = raw.get("reroute") or {}
    if not isinstance(reroute_raw, Mapping):
        raise fail("reroute", "must map pattern ids to categories")
    reroute = []
    for pid, cat in reroute_raw.items():
        if pid not in ids:
            raise fail("reroute", f"unknown pattern '{pid}'")
        if cat not in CATEGORIES:
            raise fail("reroute", f"unknown category '{cat}'")
        reroute.append((pid, cat))
    return Rule(id=rid, when=when, demote=demote, reroute=tuple(reroute))
