"""Run every benchmark (or the named ones), print one table, exit 1 if a target is missed."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import traceback
from pathlib import Path

from bench.common import Row, fmt


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        m.name[:-6] for m in pkgutil.iter_modules([str(here)]) if m.name.endswith("_bench")
    )


def _result(r: Row) -> str:
    return {True: "ok", False: "MISSED", None: ""}[r.ok]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="short runs (CI)")
    p.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default all: {', '.join(available())})"
    )
    args = p.parse_args(argv)
    names = args.names or available()
    unknown = set(names) - set(available())
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    rows: list[Row] = []
    failed: list[str] = []
    for name in names:
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            got = importlib.import_module(f"bench.{name}_bench").run(args.quick)
        except Exception:  # report and go on with the others
            traceback.print_exc()
            failed.append(name)
            continue
        rows.extend(got)
        # as each one ends, so that a long run stopped later keeps what it measured
        for r in got:
            print(
                f"[bench] {name}: {r.figure.strip()} = {fmt(r.value, r.unit)}"
                f" (ref {fmt(r.reference_value, r.unit)}, target {r.target}) {_result(r)}",
                file=sys.stderr,
                flush=True,
            )
    width = max([len(r.figure) for r in rows] + [6])
    print(
        f"{'figure':<{width}}  {'value':>12}  {'reference':<34} {'ref value':>12}  "
        f"{'ratio':>7}  {'target':<14} result"
    )
    for r in rows:
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else "-"
        result = _result(r)
        print(
            f"{r.figure:<{width}}  {fmt(r.value, r.unit):>12}  {r.reference:<34} "
            f"{fmt(r.reference_value, r.unit):>12}  {ratio:>7}  {r.target:<14} {result}"
            + (f"  ({r.note})" if r.note else "")
        )
    missed = [r.figure for r in rows if r.ok is False]
    if failed:
        print(f"benchmarks that crashed: {', '.join(failed)}")
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if missed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
