"""`sparktui status`: one refresh of every node, as a table or JSON."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from sparktui.commands.common import load_config, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from sparktui.core.model import ClusterSnapshot


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON (see README)")


async def take_snapshot(cfg) -> ClusterSnapshot:
    from sparktui.core.monitor import Monitor

    monitor = Monitor(cfg)
    try:
        return await monitor.refresh(wait=None, with_ray=True)
    finally:
        await monitor.close()


def exit_code(snapshot: ClusterSnapshot) -> int:
    return 1 if any(f.severity == "error" for f in snapshot.findings) else 0


def _mem(n) -> str:
    parts = []
    for g in n.gpus:
        if g.memory_total_mib:
            kind = "unified" if g.unified else "GPU"
            parts.append(f"{g.name}: {g.memory_used_mib or 0:,}/{g.memory_total_mib:,} MiB {kind}")
        else:
            parts.append(g.name)
    return "\n".join(parts) or "-"


def render(snapshot: ClusterSnapshot, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"cluster {snapshot.cluster}"), title_justify="left", expand=False)
    for col in ("node", "role", "reach", "configured ip", "ray ip", "ray", "VLLM_HOST_IP",
                "containers", "memory"):
        table.add_column(col, overflow="fold")
    for n in snapshot.nodes:
        reach = Text("yes", style="green") if n.reachable else Text(
            f"no: {n.error or '?'}", style="red")
        rip = n.ray.registered_ip or "-"
        rip_text = Text(rip)
        if n.ray.registered_ip and n.configured_ip and n.ray.registered_ip != n.configured_ip:
            rip_text = Text(f"{rip} ≠", style="bold red")
        alive = {True: Text("alive", style="green"), False: Text("dead/absent", style="red"),
                 None: Text("?")}[n.ray.alive]
        containers = "\n".join(f"{c.name} {c.state} ({c.status})" for c in n.containers) or "-"
        table.add_row(Text(n.name), n.role, reach, n.configured_ip or "-", rip_text, alive,
                      Text(n.env.get("VLLM_HOST_IP", "-")), Text(containers), Text(_mem(n)))
    console.print(table)
    if snapshot.ray_error and snapshot.ray_error != "not read yet":
        console.print(Text(f"Ray table: {snapshot.ray_error}", style="yellow"))
    if not snapshot.findings:
        console.print(Text("No problems found.", style="green"))
        return
    for f in snapshot.findings:
        style = {"error": "bold red", "warning": "yellow"}.get(f.severity, "")
        head = Text(f"{f.severity.upper():7} {f.id}", style=style)
        head.append(f"  [{f.node}]" if f.node else "")
        console.print(head)
        console.print(Text(f"        {f.message}"))
        if f.fix:
            console.print(Text(f"        fix: {f.fix}", style="cyan"))


def run(args) -> int:
    cfg = load_config(args)
    if cfg is None:
        return 2
    from rich.console import Console

    from sparktui.core.serialize import snapshot_to_dict

    snapshot = asyncio.run(take_snapshot(cfg))
    if args.json:
        print_json(snapshot_to_dict(snapshot))
    else:
        render(snapshot, Console(file=sys.stdout, highlight=False, soft_wrap=False))
    return exit_code(snapshot)
