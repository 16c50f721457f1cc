"""Issue 17 (2): a placement group Ray cannot place, seen live by `sparktui status`.

A DETACHED placement group pinned to `node:198.19.254.99` (an address no lab node has: the
seed failure's shape, a `node:<ip>` demand no Ray node owns) is made in the head container;
`status --json` must carry it under `ray.pending` and report `pg-node-missing` naming the IP
asked and the IPs Ray knows. Removed afterwards.

- the plain lab (Ray without the dashboard: `--include-dashboard=false`, no `ray[default]`):
  the Python route (`ray_nodes.py pending` in the head container);
- the vLLM lab after `sparktui restart` (`ray[default]`: the dashboard answers on the head's
  loopback): the dashboard route, then the same with `ray.dashboard_port` pointing where
  nothing listens, so the Python route is taken again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.test_status_lab import status_json
from tests.lab.state import Lab

pytestmark = pytest.mark.lab

ASKED = "198.19.254.99"
MAKE = (
    "import logging, sys, ray\n"
    "ray.init(address='auto', namespace='sparktui-lab', logging_level=logging.ERROR,"
    " log_to_driver=False)\n"
    "ray.util.placement_group([{'node:' + sys.argv[2]: 0.001, 'CPU': 1}],"
    " lifetime='detached', name=sys.argv[1])\n"
    "print('made')\n"
)
REMOVE = (
    "import logging, sys, ray\n"
    "from ray.util.placement_group import PlacementGroup, remove_placement_group\n"
    "ray.init(address='auto', logging_level=logging.ERROR, log_to_driver=False)\n"
    "for pid, pg in ray.util.placement_group_table().items():\n"
    "    if pg['name'] == sys.argv[1] and pg['state'] != 'REMOVED':\n"
    "        remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(pid)))\n"
    "print('removed')\n"
)


def _py(lab: Lab, code: str, name: str) -> str:
    cp = lab.docker(
        lab.head, "exec", lab.container, "python3", "-c", code, name, ASKED, timeout=120
    )
    return cp.stdout


@pytest.fixture
def pending_pg(request) -> Iterator[tuple[Lab, str]]:
    lab: Lab = request.getfixturevalue(request.param)
    name = f"sparktui-lab-{uuid.uuid4().hex[:8]}"
    assert "made" in _py(lab, MAKE, name)
    try:
        yield lab, name
    finally:
        assert "removed" in _py(lab, REMOVE, name)


def _assert_seen(data: dict, lab: Lab, name: str, via: str) -> None:
    ray = data["ray"]
    assert ray["error"] is None and ray["via"] == via, ray
    pending = ray["pending"]
    assert pending["error"] is None, pending
    (pg,) = [p for p in pending["placement_groups"] if p["name"] == name]
    assert pg["state"] == "PENDING"
    assert pg["detached"] is (True if via == "dashboard" else None)  # the GCS table lacks it
    assert pg["bundles"] == [{"node:" + ASKED: 0.001, "CPU": 1.0}]
    found = [f for f in data["findings"] if f["id"] == "pg-node-missing"]
    assert len(found) == 1, data["findings"]
    f = found[0]
    assert f["severity"] == "error" and f"'{name}'" in f["message"]
    assert f"node:{ASKED}" in f["message"]
    for n in lab.nodes:  # the IPs Ray knows, each with the configured node owning it
        assert f"{n.ic_ip} ({n.name})" in f["message"]
    assert "VLLM_HOST_IP" in f["fix"] and lab.head.ic_ip in f["fix"]


def _demand_seen(data: dict) -> bool:
    demands = data["ray"]["pending"]["demands"]
    return any(b["resources"].get("node:" + ASKED) for d in demands for b in d["bundles"])


def _wait_demand(cfg_path: Path, timeout: float = 45.0) -> dict:
    """`status --json` until Ray's Pending Demands list the group too: the autoscaler
    rewrites that text every few seconds, while the placement group table is immediate."""
    t0 = time.monotonic()
    while True:
        _, data, _ = status_json(cfg_path)
        if _demand_seen(data) or time.monotonic() - t0 > timeout:
            assert _demand_seen(data), data["ray"]["pending"]
            return data
        time.sleep(2)


@pytest.mark.parametrize("pending_pg", ["healthy_lab"], indirect=True)
def test_pending_placement_group_through_python(pending_pg) -> None:
    lab, name = pending_pg
    rc, data, _ = status_json(lab.config_path)
    assert rc == 1
    _assert_seen(data, lab, name, "python")
    _assert_seen(_wait_demand(lab.config_path), lab, name, "python")


@pytest.mark.parametrize("pending_pg", ["healthy_lab"], indirect=True)
async def test_the_console_shows_the_pending_group_and_its_finding(pending_pg) -> None:
    """The operator's screen: the header counts the waiting group, the findings list has
    pg-node-missing, and its detail names the address asked and the node Ray knows."""
    from sparktui import config
    from sparktui.tui.app import SparkApp
    from sparktui.tui.live import LiveBackend
    from sparktui.tui.widgets.findings import FindingsList
    from tests.tui.support import wait_until

    lab, name = pending_pg
    backend = LiveBackend(config.load(str(lab.config_path)), read_only=True)
    app = SparkApp(backend)
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            main = app.main
            flist = main.query_one(FindingsList)

            def finding():
                return next(
                    (f for f in flist._findings.values() if f.id == "pg-node-missing"), None
                )

            await wait_until(pilot, lambda: finding() is not None, 90, "pg-node-missing")
            await wait_until(
                pilot,
                lambda: "Ray: 1 pending placement group" in main.header.refresh_text,
                30,
                "the header's pending count",
            )
            f = finding()
            assert f is not None and f"node:{ASKED}" in f.message and f"'{name}'" in f.message
            assert f"{lab.head.ic_ip} ({lab.head.name})" in f.message
            assert "VLLM_HOST_IP" in f.fix
    finally:
        await backend.close()


def _sparktui(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "sparktui", *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )


@pytest.fixture(scope="module")
def dashboard_lab(vllm_lab: Lab, tmp_path_factory) -> Lab:
    """The vLLM lab with Ray started by `sparktui restart` (its image has ray[default])."""
    r = _sparktui(
        tmp_path_factory.mktemp("state"), "restart", "-c", str(vllm_lab.config_path), "--yes"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return vllm_lab


@pytest.mark.vllm
@pytest.mark.parametrize("pending_pg", ["dashboard_lab"], indirect=True)
def test_pending_placement_group_through_the_dashboard_then_without_it(
    pending_pg, tmp_path
) -> None:
    lab, name = pending_pg
    rc, data, _ = status_json(lab.config_path)
    assert rc == 1
    _assert_seen(data, lab, name, "dashboard")
    (pg,) = [p for p in data["ray"]["pending"]["placement_groups"] if p["name"] == name]
    assert pg["age_s"] is not None and pg["scheduling_state"] == "INFEASIBLE"
    _assert_seen(_wait_demand(lab.config_path), lab, name, "dashboard")
    # the dashboard unreachable (its port points where nothing listens): the Python route
    cfg = yaml.safe_load(lab.config_path.read_text())
    cfg["ray"]["dashboard_port"] = 9
    off = tmp_path / "no_dashboard.yaml"
    off.write_text(yaml.safe_dump(cfg))
    rc, data, _ = status_json(off)
    assert rc == 1
    _assert_seen(data, lab, name, "python")
    assert json.dumps(data)
