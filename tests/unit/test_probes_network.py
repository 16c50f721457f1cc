"""Interface parsing on real `ip` output (tests/fixtures/network/README.md) and live."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparktui.core.probes.network import parse_interfaces, parse_ip_json, parse_ip_text

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "network"

SPARK = {
    "lo": ("UP", ["127.0.0.1"]),
    "enp1s0f1np1": ("UP", ["192.168.100.10", "169.254.35.62"]),
    "enP2p1s0f1np1": ("UP", ["192.168.101.10"]),
    "enp1s0f0np0": ("DOWN", []),
    "enP7s7": ("UP", ["10.1.230.180"]),  # its IPv6 address is not listed
}


def as_dict(ifaces):
    return {i.name: (i.state, i.ipv4) for i in ifaces}


def test_spark_like_json() -> None:
    ifaces = parse_ip_json((FIX / "spark_like_ip_j_addr.json").read_text())
    assert as_dict(ifaces) == SPARK
    assert [i.name for i in ifaces][:2] == ["lo", "enp1s0f1np1"]  # kernel order


def test_spark_like_text_fallback_matches_json() -> None:
    ifaces = parse_ip_text(
        (FIX / "spark_like_ip_o_4_addr.txt").read_text(),
        (FIX / "spark_like_ip_o_link.txt").read_text(),
    )
    assert as_dict(ifaces) == SPARK
    # without the link listing only interfaces with IPv4 are known, state unknown
    addr_only = parse_ip_text((FIX / "spark_like_ip_o_4_addr.txt").read_text())
    assert {i.name for i in addr_only} == {"lo", "enp1s0f1np1", "enP2p1s0f1np1", "enP7s7"}
    assert addr_only[1].ipv4 == ["192.168.100.10", "169.254.35.62"]


def test_this_machine_capture_both_formats_agree() -> None:
    j = parse_interfaces((FIX / "ip_j_addr.json").read_text())
    t = parse_interfaces((FIX / "ip_o_4_addr.txt").read_text(), (FIX / "ip_o_link.txt").read_text())
    assert as_dict(j) == as_dict(t)
    assert as_dict(j)["eth0"] == ("UP", ["192.0.2.2"])
    assert as_dict(j)["ifb0"] == ("DOWN", [])


def test_garbage() -> None:
    assert parse_ip_json("") == [] and parse_ip_json("{}") == []
    assert parse_interfaces('Option "-j" is unknown, try "ip -help".') == []


@pytest.mark.skipif(shutil.which("ip") is None, reason="no ip binary")
def test_live_ip() -> None:
    js = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    txt = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    link = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    a, b = as_dict(parse_interfaces(js)), as_dict(parse_interfaces(txt, link))
    assert a == b and "127.0.0.1" in a["lo"][1]
