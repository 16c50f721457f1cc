"""Benchmarks with targets: `python -m bench [--quick] [NAME ...]`.

Each `bench/<name>_bench.py` has `run(quick: bool) -> list[Row]`; every figure is measured
side by side with its reference in the same run (this machine is shared and noisy), and
reported as a ratio with its target.
"""
