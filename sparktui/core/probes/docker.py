"""The node's containers -> list[Container]: from `docker ps -a --no-trunc --size=false
--format '{{json .}}'` (one object a line) or from dockerd's own API, `GET /containers/json
?all=1` on its socket (one JSON array; what probe.sh reads when curl can reach the socket)."""

from __future__ import annotations

import json
import time
from typing import Any

from sparktui.core.model import Container

DOCKER_PS_ARGV: tuple[str, ...] = (
    "docker",
    "ps",
    "-a",
    "--no-trunc",
    "--size=false",
    "--format",
    "{{json .}}",
)


def parse_labels(value: Any) -> dict[str, str]:
    """Docker's `Labels` column (`k=v,k2=v2`; a dict from other CLIs) -> dict.

    A piece without `=` is taken as the continuation of the previous value (a comma inside
    a label value), so `a=1,2,b=3` reads as {'a': '1,2', 'b': '3'}.
    """
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    if not isinstance(value, str) or not value:
        return {}
    labels: dict[str, str] = {}
    last: str | None = None
    for piece in value.split(","):
        if "=" in piece:
            k, _, v = piece.partition("=")
            labels[k] = v
            last = k
        elif last is not None:
            labels[last] += "," + piece
    return labels


def _name(value: Any) -> str:
    if isinstance(value, list):  # podman's JSON
        value = value[0] if value else ""
    if not isinstance(value, str):
        return ""
    return value.split(",")[0].lstrip("/")


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _created(value: Any) -> str:
    """The API's `Created` (Unix seconds) in the CLI's `CreatedAt` form, UTC."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(value))


def parse_container(obj: dict[str, Any]) -> Container | None:
    """One decoded `{{json .}}` object -> Container (None if it has no name)."""
    name = _name(obj.get("Names"))
    if not name:
        return None
    state = _str(obj.get("State")).lower()
    status = _str(obj.get("Status"))
    if not state:  # very old CLIs have no State column: derive it from Status
        low = status.lower()
        if "paused" in low:
            state = "paused"
        elif low.startswith("up"):
            state = "running"
        elif low.startswith("exited"):
            state = "exited"
        elif low.startswith("created"):
            state = "created"
        elif low.startswith("restarting"):
            state = "restarting"
    command = _str(obj.get("Command"))
    if len(command) >= 2 and command[0] == command[-1] == '"':
        try:  # the CLI strconv.Quote()s it
            command = json.loads(command)
        except ValueError:
            command = command[1:-1]
    return Container(
        name=name,
        image=_str(obj.get("Image")),
        state=state,
        status=status,
        id=_str(obj.get("ID") or obj.get("Id")),
        created_at=_str(obj.get("CreatedAt")) or _created(obj.get("Created")),
        running_for=_str(obj.get("RunningFor")),
        command=command,
        labels=parse_labels(obj.get("Labels")),
    )


def parse_docker_ps(text: str) -> list[Container]:
    """The API's JSON array, or the CLI's one JSON object per line (lines that are not JSON
    objects, warnings, are skipped)."""
    containers: list[Container] = []
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError:
            rows = []
        for obj in rows if isinstance(rows, list) else []:
            if isinstance(obj, dict) and (c := parse_container(obj)) is not None:
                containers.append(c)
        return containers
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            c = parse_container(obj)
            if c is not None:
                containers.append(c)
    return containers
