"""The crash knowledge base: load `patterns.yaml`, merge the user's patterns, validate.

Everything a pattern says (category, role, regexes, fix, links) is data; this module only
checks it (pydantic models, the same means as the config) and hands out frozen models. A bad pattern is one `KnowledgeBaseError`
whose message names where it came from, the pattern id and the field.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sparktui.yamlmodel import rule, words

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
#: Where an error no pattern explains goes (the `unrecognised-error` finding).
UNKNOWN = "unknown"
ALL_CATEGORIES: tuple[str, ...] = (*CATEGORIES, UNKNOWN)
DEFAULT_SEVERITY = {
    "primary": "error",
    "generic": "error",
    "secondary": "error",
    "predictive": "warning",
    "context": "info",
    "benign": "info",
    "fallback": "error",
    "hint": "warning",
    "signal": "info",
    "healthy": "info",
}
MAX_SPAN = 10
DEFAULT_SPAN = 2
# Captures every hit gets from the line's Ray/vLLM prefix: "(Name pid=N, ip=X)".
PREFIX_CAPTURES = ("node_ip", "process")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$")
Role = Literal[
    "primary",
    "generic",
    "predictive",
    "secondary",
    "context",
    "benign",
    "fallback",
    "hint",
    "signal",
    "healthy",
]
Severity = Literal["error", "warning", "info"]
ROLES: tuple[str, ...] = get_args(Role)
SEVERITIES: tuple[str, ...] = get_args(Severity)


class KnowledgeBaseError(ValueError):
    """A pattern (or rule) is invalid. The message names source, pattern id and field."""


def _strs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        raise rule("strs", "must be a string or a non-empty list of non-empty strings")
    return tuple(v.strip() for v in value)


def _prose(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise rule("prose", "must be a non-empty string")
    return " ".join(value.split())


def _links(value: Any) -> tuple[str, ...]:
    links = _strs(value) if value else ()
    for link in links:
        if not re.match(r"^https?://\S+$", link):
            raise rule("link", "not an http(s) URL: {link!r}", link=link)
    return links


# Compiled regexes by source: validation compiles each regex more than once, and the shipped
# base is loaded again for every config with its own patterns.
_COMPILED: dict[str, re.Pattern[str]] = {}


def _cached(rx: str) -> re.Pattern[str]:
    got = _COMPILED.get(rx)
    if got is None:
        got = _COMPILED[rx] = re.compile(rx)
    return got


def _compile(rx: Any) -> re.Pattern[str]:
    if not isinstance(rx, str) or not rx:
        raise rule("regex", "must be a non-empty string")
    try:
        return _cached(rx)
    except re.error as e:
        raise rule("regex", "invalid regex {rx}: {e}", rx=repr(rx), e=str(e)) from None
    except (OverflowError, RecursionError) as e:
        raise rule("regex", "regex too complex: {e}", e=str(e)) from None


def _regexes(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise rule("regexes", "must be a regex or a non-empty list of regexes")
    for rx in value:
        _compile(rx)
    return tuple(value)


def _anchor(value: str | None) -> str | None:
    if value is not None:
        _compile(value)
    return value


def _span(value: int) -> int:
    if not 0 <= value <= MAX_SPAN:
        raise rule("span", "must be an integer from 0 to {max}", max=MAX_SPAN)
    return value


def _pattern_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise rule(
            "id", "must be a string of letters, digits and _.:- (got {value!r})", value=value
        )
    return value


Strs = Annotated[tuple[str, ...], BeforeValidator(_strs)]
Prose = Annotated[str, BeforeValidator(_prose)]
Links = Annotated[tuple[str, ...], BeforeValidator(_links)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Category(_Frozen):
    """A taxonomy category: the defaults its patterns inherit."""

    name: str
    title: Prose
    explanation: Prose
    fix: Strs
    links: Links = ()
    defer: bool = False
    """Rank after other root causes of the same role (NCCL errors are often aftermath)."""


class Pattern(_Frozen):
    """A crash signature: the fields of patterns.yaml (see its header), validated."""

    id: Annotated[str, BeforeValidator(_pattern_id)]
    category: Literal[ALL_CATEGORIES]  # type: ignore[valid-type]
    role: Role = "primary"
    severity: Severity
    title: Prose
    regexes: Annotated[tuple[str, ...], BeforeValidator(_regexes)]
    anchor: Annotated[str | None, AfterValidator(_anchor)] = None
    span: Annotated[int, AfterValidator(_span)] = DEFAULT_SPAN
    message: Prose | None = None
    explanation: Prose
    fix: Strs
    links: Links = ()
    silent: bool = False
    catch_all: bool = False
    """On a line where another pattern of its category also matched, that one is the finding."""
    enabled: bool = True
    unless_later: Annotated[tuple[str, ...], BeforeValidator(lambda v: _strs(v) if v else ())] = ()
    """Absence: the hit counts only if none of these pattern ids matches later in the log."""
    same: str | None = None
    """With `unless_later`: only a later hit with the same value of this capture ends it."""
    origin: str = "builtin"
    _compiled: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _inherit(cls, item: Any, info: ValidationInfo) -> Any:
        """Category defaults, default severity, and `regex` as the one-regex spelling."""
        if not isinstance(item, Mapping):
            return item
        item = dict(item)
        if "regex" in item and "regexes" in item:
            raise rule("both", "give 'regex' or 'regexes', not both", field="regexes")
        if "regex" in item:
            item["regexes"] = item.pop("regex")
        elif "regexes" not in item:
            raise rule("missing", "missing", field="regex")
        cat = (info.context or {}).get("categories", {}).get(item.get("category"))
        if cat is not None:
            item.setdefault("title", cat.title)
            item.setdefault("explanation", cat.explanation)
            item.setdefault("fix", list(cat.fix))
        role = item.get("role", "primary")
        item.setdefault(
            "severity", DEFAULT_SEVERITY.get(role, "error") if isinstance(role, str) else "error"
        )
        return item

    @model_validator(mode="after")
    def _consistent(self) -> Pattern:
        if self.role == "benign" and self.severity != "info":
            raise rule(
                "benign",
                "a benign pattern must have severity info (it never alarms)",
                field="severity",
            )
        if self.silent and self.role != "benign":
            raise rule("silent", "only a benign pattern can be silent", field="silent")
        compiled = tuple(_cached(rx) for rx in self.regexes)
        if self.same is not None and not any(self.same in rx.groupindex for rx in compiled):
            raise rule(
                "same", "{same} is not a named capture of the regexes", same=self.same, field="same"
            )
        if self.message is not None:
            groups = set(PREFIX_CAPTURES).union(*(rx.groupindex for rx in compiled))
            try:
                names = _fields(self.message.replace("[[", "").replace("]]", ""))
            except ValueError as e:
                raise rule("template", "bad template: {e}", e=str(e), field="message") from None
            for n in names:
                if not n.isidentifier():
                    raise rule("template", "bad placeholder {{{n}}}", n=n, field="message")
                if n not in groups:
                    raise rule(
                        "template",
                        "{{{n}}} is not a named capture of the regexes",
                        n=n,
                        field="message",
                    )
        self._compiled = compiled
        return self

    @property
    def compiled(self) -> tuple[re.Pattern[str], ...]:
        return self._compiled

    @property
    def prefilter(self) -> tuple[str, ...]:
        """Single-line expressions the fast scanner looks for (any hit means 'check fully')."""
        return (self.anchor,) if self.anchor else self.regexes

    def search(self, text: str) -> re.Match[str] | None:
        for rx in self._compiled:
            m = rx.search(text)
            if m:
                return m
        return None

    def render_message(self, captures: Mapping[str, str]) -> str:
        return render_template(self.message, captures) if self.message else self.title


def _pairs(value: Any) -> Any:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise rule("reroute", "must map pattern ids to categories")
    return tuple((str(k), v) for k, v in value.items())


class Rule(_Frozen):
    """Cross-pattern triage: when any of `when` was seen (and, with `differ`, those captured
    IP addresses are not all the same), demote, reroute or keep categories."""

    id: str
    when: Strs
    differ: Strs = ()  # "pattern_id:capture" each: IP addresses (a ":port" is dropped)
    keep: Annotated[  # categories no other rule may demote
        tuple[Literal[CATEGORIES], ...],  # type: ignore[valid-type]
        BeforeValidator(lambda v: _strs(v) if v else ()),
    ] = ()
    demote: Annotated[
        tuple[Literal[CATEGORIES], ...],  # type: ignore[valid-type]
        BeforeValidator(lambda v: _strs(v) if v else ()),
    ] = ()
    reroute: Annotated[
        tuple[tuple[str, Literal[CATEGORIES]], ...],  # type: ignore[valid-type]
        BeforeValidator(_pairs),
    ] = ()


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
    """The template with captures filled in once (a captured `{}` stays literal)."""

    def fill(text: str, missing: str | None) -> str | None:
        out = []
        for literal, name, _spec, _conv in string.Formatter().parse(text):
            out.append(literal)
            if name is None:
                continue
            value = captures.get(name)
            if value in (None, ""):
                if missing is None:
                    return None
                value = missing
            out.append(str(value))
        return "".join(out)

    parts: list[str] = []
    mandatory: list[str] = []  # template pieces outside [[...]], filled at the end
    pos = 0
    for m in _OPTIONAL.finditer(template):
        mandatory.append(template[pos : m.start()])
        parts.append(fill(m.group(1), None) or "")
        pos = m.end()
    mandatory.append(template[pos:])
    filled = [fill(t, None) for t in mandatory]
    if any(f is None for f in filled):  # a mandatory capture is missing: "?" in its place
        filled = [fill(t, "?") for t in mandatory]
    out = [filled[0] or ""]
    for opt, rest in zip(parts, filled[1:], strict=True):
        out += [opt, rest or ""]
    return "".join(out)


def fill_missing(text: str, captures: Mapping[str, str]) -> str:
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(text):
        out.append(literal)
        if name is not None:
            out.append(str(captures.get(name) or "?"))
    return "".join(out)


# --- loading -------------------------------------------------------------------------------


# libyaml's safe loader where PyYAML was built with it (about 5x faster), else the pure one
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_builtin() -> dict[str, Any]:
    """patterns.yaml (categories, rules) plus patterns/<category>.yaml, in category order."""
    root = resources.files("sparktui.knowledge")
    data = yaml.load(root.joinpath("patterns.yaml").read_text("utf-8"), Loader=_Loader)
    if not isinstance(data, dict):
        raise KnowledgeBaseError("patterns.yaml: not a mapping")
    patterns = list(data.get("patterns") or [])
    rules = list(data.get("rules") or [])
    folder = root.joinpath("patterns")
    names = sorted(e.name for e in folder.iterdir() if e.name.endswith(".yaml"))
    order = {c: i for i, c in enumerate(ALL_CATEGORIES)}
    for name in sorted(names, key=lambda n: (order.get(n[:-5], len(order)), n)):
        part = yaml.load(folder.joinpath(name).read_text("utf-8"), Loader=_Loader) or {}
        where = f"patterns/{name}"
        if not isinstance(part, dict) or set(part) - {"patterns", "rules"}:
            raise KnowledgeBaseError(f"{where}: a mapping with 'patterns:' (and 'rules:')")
        if not isinstance(part.get("patterns") or [], list):
            raise KnowledgeBaseError(f"{where}: 'patterns' must be a list")
        patterns += part.get("patterns") or []
        rules += part.get("rules") or []
    data["patterns"] = patterns
    data["rules"] = rules
    return data


@functools.lru_cache(maxsize=1)
def load_builtin() -> KnowledgeBase:
    """The shipped knowledge base (validated; cached)."""
    return load()


def load(
    user_patterns: Iterable[Mapping[str, Any]] | None = None,
    *,
    source: str = "config",
    line: int | None = None,
    base: Mapping[str, Any] | None = None,
) -> KnowledgeBase:
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
            raise KnowledgeBaseError(
                f"{origin}: pattern '{pid}': field 'enabled': must be true or false"
            )
        if not enabled:
            continue
        patterns.append(_pattern(item, categories, origin))
    ids = {p.id for p in patterns}
    for p in patterns:
        for pid in p.unless_later:
            if pid not in ids:
                raise KnowledgeBaseError(
                    f"{p.origin}: pattern '{p.id}': field 'unless_later': unknown pattern '{pid}'"
                )
    rules = tuple(_rule(r, ids, where_builtin, i) for i, r in enumerate(data.get("rules") or ()))
    return KnowledgeBase(categories=categories, patterns=tuple(patterns), rules=rules)


def load_for_config(cfg: Any) -> KnowledgeBase:
    """The knowledge base with the user's patterns from a `Config` (or the shipped one)."""
    user = getattr(cfg, "patterns", None) or []
    if not user:
        return load_builtin()
    return load(
        user,
        source=getattr(cfg, "path", None) or "config",
        line=getattr(cfg, "patterns_line", None),
    )


# --- validation ----------------------------------------------------------------------------


def _check(
    model: type[BaseModel],
    data: Any,
    prefix: str,
    *,
    alias: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> Any:
    """`model` from `data`, or KnowledgeBaseError `PREFIX: field 'F': what is wrong`."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [p for p in err["loc"] if isinstance(p, str) and "[" not in p]
        name = (err.get("ctx") or {}).get("field") or (loc[0] if loc else "?")
        name = (alias or {}).get(name, name)
        if err["type"] == "extra_forbidden":
            known = ", ".join(f for f in model.model_fields if f not in ("name", "origin"))
            text = f"unknown field (known: {known})"
        elif err["type"] == "missing":
            text = "missing"
        else:
            text = words(err)
        raise KnowledgeBaseError(f"{prefix}: field '{name}': {text}") from None


def _raw_id(item: Any, where: str, index: int) -> str:
    if not isinstance(item, Mapping):
        raise KnowledgeBaseError(f"{where}: pattern #{index + 1}: must be a mapping")
    try:
        return _pattern_id(item.get("id"))
    except PydanticCustomError as e:
        raise KnowledgeBaseError(f"{where}: pattern #{index + 1}: field 'id': {e}") from None


def _categories(raw: Any, where: str) -> dict[str, Category]:
    if not isinstance(raw, Mapping):
        raise KnowledgeBaseError(f"{where}: 'categories' must be a mapping")
    extra = set(raw) - set(ALL_CATEGORIES)
    if extra:
        raise KnowledgeBaseError(f"{where}: unknown category '{sorted(extra)[0]}'")
    out = {}
    for name in ALL_CATEGORIES:
        c = raw.get(name)
        if not isinstance(c, Mapping):
            raise KnowledgeBaseError(f"{where}: category '{name}' is missing")
        out[name] = _check(Category, {**c, "name": name}, f"{where}: category '{name}'")
    return out


def _pattern(item: Mapping[str, Any], categories: Mapping[str, Category], origin: str) -> Pattern:
    rkey = "regexes" if "regexes" in item else "regex"
    pattern = _check(
        Pattern,
        {**item, "origin": origin},
        f"{origin}: pattern '{item['id']}'",
        alias={"regexes": rkey},
        context={"categories": categories},
    )
    links = tuple(dict.fromkeys((*pattern.links, *categories[pattern.category].links)))
    return pattern.model_copy(update={"links": links})


def _rule(raw: Any, ids: set[str], where: str, index: int) -> Rule:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
        raise KnowledgeBaseError(f"{where}: rule #{index + 1}: must be a mapping with an id")
    prefix = f"{where}: rule '{raw['id']}'"
    r = _check(Rule, raw, prefix)
    for ref in r.differ:
        if ":" not in ref:
            raise KnowledgeBaseError(f"{prefix}: field 'differ': '{ref}' is not pattern_id:capture")
    differ = [ref.partition(":")[0] for ref in r.differ]
    for f, named in (
        ("when", r.when),
        ("reroute", [pid for pid, _ in r.reroute]),
        ("differ", differ),
    ):
        for pid in named:
            if pid not in ids:
                raise KnowledgeBaseError(f"{prefix}: field '{f}': unknown pattern '{pid}'")
    return r
