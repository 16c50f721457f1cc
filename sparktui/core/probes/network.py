"""The node's interfaces and IPv4 addresses: `ip -j addr` (iproute2 >= 4.14), or the text
of `ip -o -4 addr show` + `ip -o link` on older hosts -> list[Interface].

`state` is the kernel's operstate, except that UNKNOWN with the link flags UP and LOWER_UP
(loopback, bridges, some drivers that report no operstate) reads as UP.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sparktui.core.model import Interface


def _state(operstate: str, flags: list[str] | set[str]) -> str:
    state = (operstate or "UNKNOWN").upper()
    if state == "UNKNOWN" and "UP" in flags and "LOWER_UP" in flags:
        return "UP"
    return state


def _base_name(name: str) -> str:
    return name.split("@", 1)[0]  # veth0@if5 -> veth0


def parse_ip_json(text: str) -> list[Interface]:
    """`ip -j addr` -> interfaces in kernel order. Unreadable JSON -> []."""
    try:
        data: Any = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    out: list[Interface] = []
    for item in data:
        if not isinstance(item, dict) or not item.get("ifname"):
            continue
        ipv4 = [
            str(a["local"])
            for a in item.get("addr_info") or []
            if isinstance(a, dict) and a.get("family") == "inet" and a.get("local")
        ]
        flags = item.get("flags") or []
        out.append(
            Interface(
                name=_base_name(str(item["ifname"])),
                state=_state(str(item.get("operstate", "")), set(flags)),
                ipv4=ipv4,
            )
        )
    return out


_LINK = re.compile(r"^\d+:\s+(?P<name>[^:\s]+):\s+<(?P<flags>[^>]*)>.*?\bstate\s+(?P<state>\S+)")
_ADDR4 = re.compile(r"^\d+:\s+(?P<name>\S+)\s+inet\s+(?P<ip>[0-9.]+)(?:/\d+)?")


def parse_ip_text(addr_text: str, link_text: str = "") -> list[Interface]:
    """`ip -o -4 addr show` (+ optionally `ip -o link`) -> interfaces.

    Link order wins when the link listing is given; interfaces without IPv4 come only from it.
    """
    by_name: dict[str, Interface] = {}
    for line in link_text.splitlines():
        m = _LINK.match(line.strip())
        if m:
            name = _base_name(m["name"])
            by_name[name] = Interface(name, _state(m["state"], m["flags"].split(",")), [])
    for line in addr_text.splitlines():
        m = _ADDR4.match(line.strip())
        if not m:
            continue
        name = _base_name(m["name"])
        iface = by_name.setdefault(name, Interface(name, "UNKNOWN", []))
        if m["ip"] not in iface.ipv4:
            iface.ipv4.append(m["ip"])
    return list(by_name.values())


def parse_interfaces(text: str, link_text: str = "") -> list[Interface]:
    """Either format: JSON if it looks like JSON, else the `ip -o` text."""
    if text.lstrip().startswith("["):
        return parse_ip_json(text)
    return parse_ip_text(text, link_text)
