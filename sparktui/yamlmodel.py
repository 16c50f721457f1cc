"""YAML files checked against pydantic models, with errors at the offending line.

The config, the knowledge base and theme files are all read the same way: PyYAML composes
the node tree (so every value keeps its line, and duplicate keys are caught), pydantic
validates the plain data against the file's model, and the first error is translated into
the file's own words (`ssh.port must be an integer`, not pydantic's JSON vocabulary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

Path = tuple[str | int, ...]


class YamlError(Exception):
    """A problem at one line of a YAML file; `str()` is `FILE:LINE: message`."""

    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.file, self.line, self.message = file, line, message
        super().__init__(f"{file}:{line if line else 1}: {message}")


@dataclass
class Lines:
    """Where each value (and each mapping key) of a composed document starts, 1-based."""

    values: dict[Path, int] = field(default_factory=dict)
    keys: dict[Path, int] = field(default_factory=dict)

    def of(self, path: Path, *, key: bool = False) -> int | None:
        """The line of `path`, else of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        for n in range(len(path), -1, -1):
            found = (table if n == len(path) else self.values).get(path[:n])
            if found is not None:
                return found
        return None


def rule(kind: str, message: str, **ctx: Any) -> PydanticCustomError:
    """A rule broken: `message` is the tail after the field's name ("must be ...")."""
    return PydanticCustomError(kind, message, ctx or None)


def dotted(path: Path) -> str:
    """`ssh.port`, `nodes[0].host`: a path as the file's author would name it."""
    out = ""
    for part in path:
        out = f"{out}[{part}]" if isinstance(part, int) else f"{out}.{part}" if out else part
    return out


def compose(text: str, file: str, describe: Callable[[Path], str] = dotted) -> tuple[Any, Lines]:
    """Parse `text`: (plain data, line map). Syntax errors and duplicate keys raise YamlError."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            problem = e.problem or "invalid YAML"
            rows = text.splitlines()
            if mark is not None and mark.line < len(rows) and "\t" in rows[mark.line]:
                problem += " (tabs are not allowed for indentation in YAML; use spaces)"
            raise YamlError(
                file, mark.line + 1 if mark else None, f"YAML syntax error: {problem}"
            ) from None
        except yaml.YAMLError as e:
            raise YamlError(file, None, f"YAML error: {e}") from None
        if root is None:
            return None, Lines()
        lines = Lines()
        _walk(root, (), lines, file, describe)
        return loader.construct_document(root), lines
    finally:
        loader.dispose()


def _walk(
    node: yaml.Node, path: Path, lines: Lines, file: str, describe: Callable[[Path], str]
) -> None:
    lines.values[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise YamlError(
                    file,
                    k.start_mark.line + 1,
                    f"{describe(path) or 'config'}: keys must be plain names",
                )
            if k.value in seen:
                raise YamlError(
                    file,
                    k.start_mark.line + 1,
                    f"{describe(path) or 'config'}: duplicate key '{k.value}'",
                )
            seen.add(k.value)
            lines.keys[path + (k.value,)] = k.start_mark.line + 1
            _walk(v, (*path, k.value), lines, file, describe)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), lines, file, describe)


# pydantic error type -> the file's words (after the field's name)
_WORDS = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a non-empty string",
    "string_too_short": "must be a non-empty string",
    "dict_type": "must be a mapping (key: value)",
    "model_type": "must be a mapping (key: value)",
    "model_attributes_type": "must be a mapping (key: value)",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "too_short": "must not be empty",
}


def first_error(exc: ValidationError, lines: Lines) -> tuple[Path, int | None, ErrorDetails]:
    """The error that comes first in the file, with its path and line."""
    best: tuple[int, int, Path, int | None, ErrorDetails] | None = None
    for order, err in enumerate(exc.errors()):
        path = _clean(err["loc"])
        key = err["type"] == "extra_forbidden"
        line = lines.of(path, key=key)
        rank = (line or 0, order)
        if best is None or rank < best[:2]:
            best = (*rank, path, line, err)
    assert best is not None
    return best[2], best[3], best[4]


def _clean(loc: Sequence[str | int]) -> Path:
    """Drop pydantic's union/validator tags (`function-after[...]`) from a location."""
    return tuple(
        p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function")))
    )


def words(err: ErrorDetails) -> str:
    """The error's message in the file's words, to follow the field's name."""
    kind = err["type"]
    if kind in _WORDS:
        return _WORDS[kind]
    if kind == "literal_error":
        return f"must be {err.get('ctx', {}).get('expected', 'one of the listed values')}, not '{err['input']}'"
    if kind == "missing":
        return "is missing"
    return err["msg"]


def validate(
    model: type[BaseModel],
    data: Any,
    lines: Lines,
    file: str,
    describe: Callable[[Path], str],
    explain: Callable[[Path, ErrorDetails], str] | None = None,
    context: dict[str, Any] | None = None,
    root: str = "config",
) -> Any:
    """`model` validated from `data`, or YamlError at the first error's line.

    `root` names the whole file in messages ("config: unknown key ...")."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        path, line, err = first_error(exc, lines)
        message = explain(path, err) if explain else ""
        if not message:
            message = default_message(path, err, lambda p: describe(p) or root, model)
        raise YamlError(file, line, message) from None


def default_message(
    path: Path, err: ErrorDetails, describe: Callable[[Path], str], model: type[BaseModel]
) -> str:
    """`what` + words: `ssh.port must be an integer`, `nodes[0]: unknown key 'addr' ...`."""
    kind = err["type"]
    if kind == "extra_forbidden":
        known = known_keys(model, path[:-1])
        hint = f" (known: {', '.join(known)})" if known else ""
        return f"{describe(path[:-1])}: unknown key '{path[-1]}'{hint}"
    if kind == "missing":
        return f"{describe(path[:-1])}: missing '{path[-1]}'"
    text = words(err)
    what = describe(path)
    return f"{what} {text}" if text.startswith(("must ", "is ")) else f"{what}: {text}"


def known_keys(model: type[BaseModel], path: Path) -> list[str]:
    """The field names (aliases) of the model found at `path` (for 'unknown key' hints)."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        info = getattr(current, "model_fields", {}).get(part)
        if info is None:
            info = next(
                (f for f in getattr(current, "model_fields", {}).values() if f.alias == part), None
            )
        if info is None:
            return []
        current = _inner_model(info.annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return [f.alias or name for name, f in fields.items()]


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None
