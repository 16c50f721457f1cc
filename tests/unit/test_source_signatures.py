"""Signatures taken from the sources that print the errors (vLLM, Ray, NCCL, PyTorch, CUDA,
the NVIDIA container runtime), not from crash threads.

`tests/fixtures/source_signatures.tsv` gives, for each such pattern, the message as its
source writes it (the f-string or format string with example values filled in) and the
file it comes from. Each must be the first finding of a log that ends in it: the pattern
matches the message's stable part, whatever the values and the prefix.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sparktui.knowledge import Matcher, diagnose_bytes, load_builtin

TSV = Path(__file__).resolve().parent.parent / "fixtures" / "source_signatures.tsv"
ROWS = [
    r
    for r in csv.reader(TSV.read_text("utf-8").splitlines(), delimiter="\t")
    if r and r[0][0] != "#"
]
PREFIXES = ["", "(RayWorkerWrapper pid=4242, ip=10.0.0.2) ", "2026-01-01T00:00:00.000Z "]


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_builtin())


def test_every_source_signature_names_its_source(matcher):
    ids = {p.id for p in matcher.patterns}
    assert len(ROWS) >= 40
    for pattern, line, source in ROWS:
        assert pattern in ids, pattern
        assert line.strip() and source.strip(), (pattern, source)


@pytest.mark.parametrize("pattern, line, source", ROWS, ids=[r[0] for r in ROWS])
def test_a_source_message_is_named_by_its_pattern(pattern, line, source, matcher):
    for prefix in PREFIXES:
        log = f"INFO 12-01 09:59:59 starting\n{prefix}{line}\n"
        findings = diagnose_bytes(log.encode(), matcher)
        assert findings and findings[0].id == pattern, (prefix, [f.id for f in findings])
