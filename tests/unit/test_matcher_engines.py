"""Issue 19: the Hyperscan prefilter (extra `fast`) and the RE2 `Set` give the same hits.

Both engines scan every labelled crash case (`tests/crash_corpus.py` `cases()`), every
healthy public log, and the captured vLLM logs; the hits (pattern, line, text, captures)
must be identical. The logs are only read to run the engines: nothing here derives patterns
from them. Skips when the hyperscan wheel is not installed (RE2 is then the only engine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparktui.knowledge.kb import load_builtin
from sparktui.knowledge.matcher import Matcher, available_engines
from tests import crash_corpus

pytestmark = pytest.mark.skipif(
    "hyperscan" not in available_engines(),
    reason="hyperscan is not installed (pip install 'sparktui[fast]')",
)

VLLM = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"


@pytest.fixture(scope="module")
def engines() -> tuple[Matcher, Matcher]:
    kb = load_builtin()
    hs, r2 = Matcher(kb, "hyperscan"), Matcher(kb, "re2")
    assert (hs.engine, r2.engine) == ("hyperscan", "re2")
    return hs, r2


def _hits(m: Matcher, text: str) -> list[tuple[str, int, str, tuple]]:
    return [(h.id, h.line, h.text, tuple(sorted(h.captures.items()))) for h in m.scan_text(text)]


def _logs() -> list[tuple[str, str]]:
    out = [(c.id, c.log) for c in crash_corpus.cases()]
    out += [(f"healthy:{h.get('id', i)}", h["log"]) for i, h in enumerate(crash_corpus.healthy())]
    out += [(f"vllm:{p.name}", p.read_text("utf-8", "replace")) for p in sorted(VLLM.glob("*.log"))]
    return out


def test_both_engines_give_the_same_hits_on_every_corpus_case(engines):
    hs, r2 = engines
    logs = _logs()
    assert len(logs) > 200  # the whole corpus, not a sample
    differ = [name for name, text in logs if _hits(hs, text) != _hits(r2, text)]
    assert differ == []
    # not vacuous: the corpus cases do hit signatures
    assert sum(bool(_hits(hs, c.log)) for c in crash_corpus.cases()) > 150


def test_both_engines_agree_across_region_blocks(engines):
    """Hits far apart in one big region (the block re-scan) and a prefilter match the
    blocks cannot see alone are found by both engines, on the same lines."""
    hs, r2 = engines
    case = next(c for c in crash_corpus.cases() if _hits(r2, c.log))
    filler = "INFO 01-01 00:00:00 [loggers.py:1] Avg prompt throughput: 0.0 tokens/s\n"
    text = filler * 5_000 + case.log + "\n" + filler * 5_000 + case.log + "\n"
    got = _hits(hs, text)
    assert got == _hits(r2, text)
    assert {h[1] for h in got} & {5_001, 5_001 + 5_000 + case.log.count("\n") + 1}


def test_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="unknown matcher engine"):
        Matcher(load_builtin(), "pcre")
