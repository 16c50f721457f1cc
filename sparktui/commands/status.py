"""`sparktui status`: one refresh of every node, as a table or JSON."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from sparktui.commands.common import load_config, print_json
from sparktui.core.checks import IFNAME_VARS
from sparktui.core.model import ip_mismatch

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


def _mem(n) -> list[str]:
    out = []
    for g in n.gpus:
        if g.memory_total_mib:
            kind = "unified" if g.unified else "GPU"
            out.append(f"{g.name}: {g.memory_used_mib or 0:,} / {g.memory_total_mib:,} MiB {kind}")
        else:
            out.append(g.name)
    return out


def render(snapshot: ClusterSnapshot, console: Console) -> None:
    """One block per node, then the findings with their fixes. Data is never markup."""
    from rich.text import Text

    def line(label: str, value: Text | str, style: str = "") -> None:
        t = Text(f"  {label:<12}", style="dim")
        t.append(value if isinstance(value, Text) else Text(value, style=style))
        console.print(t)

    console.print(
        Text(
            f"cluster {snapshot.cluster}: {len(snapshot.nodes)} node(s), backend "
            f"{snapshot.backend}",
            style="bold",
        )
    )
    if snapshot.backend_note:
        console.print(Text(f"  ({snapshot.backend_note})", style="dim"))
    native_mode = snapshot.backend == "native"
    for n in snapshot.nodes:
        head = Text(f"{n.name}", style="bold")
        head.append(f"  {n.role}  {n.host}  ")
        head.append(
            "reachable" if n.reachable else f"UNREACHABLE: {n.error or '?'}",
            style="green" if n.reachable else "bold red",
        )
        console.print(head)
        if not n.reachable:
            continue
        ips = Text(f"configured {n.configured_ip or '-'}" + ("" if native_mode else "   ray "))
        rip = n.ray.registered_ip or "-"
        if native_mode:
            pass
        elif ip_mismatch(n.configured_ip, n.ray.registered_ip, None)[0]:
            ips.append(f"{rip} ≠ MISMATCH", style="bold red")
        else:
            ips.append(rip)
        line("ip", ips)
        shown = {k: v for k, v in n.env.items() if k == "VLLM_HOST_IP" or k in IFNAME_VARS}
        line("env", "  ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "-")
        alive = {True: ("alive", "green"), False: ("dead or absent", "red"), None: ("unknown", "")}[
            n.ray.alive
        ]
        gpus = f", {n.ray.gpus:g} GPU" if n.ray.gpus is not None else ""
        if native_mode:
            from sparktui.core.native import rank_summary

            summary = rank_summary(n)
            line(
                "vllm",
                summary,
                "yellow" if summary.startswith(("vllm serve not", "unknown")) else "",
            )
        else:
            line("ray", alive[0] + gpus, alive[1])
        for c in n.containers or []:
            line(
                "container",
                f"{c.name}  {c.state}  ({c.status})  {c.image}",
                "" if c.running else "yellow",
            )
        if not n.containers:
            line("container", "none")
        for m in _mem(n):
            line("gpu", m)
        if n.error:
            line("note", n.error, "yellow")
    if snapshot.ray_error and snapshot.ray_error != "not read yet":
        console.print(Text(snapshot.ray_error, style="yellow"))
    console.print()
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
