"""The learned vote: which category a failed log reads like, when no signature names one.

A naive Bayes model over the words of real logs: for each word (and each word of a line that
says something failed, counted apart), how many of the labelled train logs of each category
and of the healthy logs contain it. `learned.json` holds those counts; it is built from the
corpus' train split and healthy logs only (`python -m tests.crash_corpus learn`), never from
the held-out split, and a test checks that it is exactly what that command builds.

Triage asks it only about a complete log no pattern explains (no finding, or only the
`unrecognised-error` quote): it names the category the log's words point to, and the line
that points there most. It speaks on a failed log, or on another one only when the log reads
much more like that category than like a healthy run (`HEALTHY_MARGIN`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MODEL = Path(__file__).with_name("learned.json")
HEALTHY = "healthy"
ALPHA = 0.1  # additive smoothing of the word counts (0.1-0.5 equal in grouped 5-fold CV on train)
MIN_DOCS = 2  # a word in fewer train logs than this is not in the model
# log-odds (nats) by which a log that does not show it failed must read more like a failure
# than like a healthy run before the vote speaks: above every healthy log's, each left out of
# training in turn (`python -m tests.crash_corpus healthy-margins`, 2026-12-04: the highest
# of 21 was 34.6 after round 17, 34.0 before; 40.3 on 2026-12-02)
HEALTHY_MARGIN = 41.0
TAIL_BYTES = 256 * 1024  # of a bigger log only its end is read (where it broke)
MAX_LINE = 2000  # longer lines are cut: a data dump says little about the cause

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{2,40}")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FAILURE_LINE = re.compile(
    r"(?i)error|exception|fail|fatal|timeout|timed out|refused|killed|abort|unable|cannot"
    r"|could not|denied|not found|segmentation|signal|traceback|warn"
)


def line_words(line: str) -> set[str]:
    """The features of one line: its words lowercased, the parts of snake_case words, and
    the same again marked `!` when the line says something failed."""
    line = _ANSI.sub("", line[:MAX_LINE])
    words = [w.lower() for w in _WORD.findall(line)]
    out = set(words)
    for w in words:
        if "_" in w:
            out.update(p for p in w.split("_") if len(p) >= 3)
    if _FAILURE_LINE.search(line):
        out |= {"!" + w for w in out}
    return out


def words(text: str) -> set[str]:
    """The features of a log: the union of its lines' (a word counts once per log)."""
    out: set[str] = set()
    for line in text.splitlines():
        out |= line_words(line)
    return out


@dataclass(frozen=True)
class Vote:
    category: str
    margin: float  # log-odds over a healthy run (inf without a healthy class)
    runner_up: str | None
    line: int  # 1-based line of the log that points to `category` most
    text: str
    words: tuple[str, ...]  # the words of that line that point there most
    cases: int  # train logs of `category` the model learned from


class Model:
    """Word counts per class (from `learned.json` or `train`), scored as naive Bayes."""

    def __init__(self, data: dict) -> None:
        self.classes: list[str] = list(data["classes"])
        self.docs: list[int] = list(data["docs"])
        counts: dict[str, list[int]] = {}
        n = len(self.classes)
        for word, sparse in data["words"].items():
            row = [0] * n
            for i, c in sparse:
                row[i] = c
            counts[word] = row
        vocab = len(counts)
        totals = [sum(row[i] for row in counts.values()) + ALPHA * vocab for i in range(n)]
        self.absent = [math.log(ALPHA / t) for t in totals]
        self.logp = {
            w: [math.log((c + ALPHA) / t) for c, t in zip(row, totals, strict=True)]
            for w, row in counts.items()
        }
        self.meta = {k: v for k, v in data.items() if k not in ("classes", "docs", "words")}

    def scores(self, feats: Iterable[str]) -> list[float]:
        s = [0.0] * len(self.classes)
        for w in feats:
            lp = self.logp.get(w)
            if lp is None:
                continue
            for i, v in enumerate(lp):
                s[i] += v
        return s

    def vote(self, text: str) -> Vote | None:
        """The failure category `text` reads most like, with its most telling line."""
        lines = text.splitlines()
        per_line = [line_words(x) for x in lines]
        known = set().union(*per_line) & self.logp.keys() if lines else set()
        if not known:
            return None
        s = self.scores(known)
        order = sorted((i for i, c in enumerate(self.classes) if c != HEALTHY), key=lambda i: -s[i])
        best, second = order[0], (order[1] if len(order) > 1 else None)
        h = self.classes.index(HEALTHY) if HEALTHY in self.classes else None
        margin = s[best] - s[h] if h is not None else math.inf
        against = second if second is not None else best

        def pull(w: str) -> float:
            lp = self.logp[w]
            return lp[best] - lp[against]

        line_no, line = 0, ""
        top: tuple[str, ...] = ()
        best_pull = -math.inf
        for n, (x, feats) in enumerate(zip(lines, per_line, strict=True), 1):
            ws = feats & known
            if not ws:
                continue
            p = sum(pull(w) for w in ws)
            if p > best_pull:
                best_pull, line_no, line = p, n, x
                top = tuple(sorted((w for w in ws if pull(w) > 0), key=lambda w: (-pull(w), w))[:4])
        shown = tuple(dict.fromkeys(w.lstrip("!") for w in top))
        return Vote(
            category=self.classes[best],
            margin=margin,
            runner_up=self.classes[second] if second is not None else None,
            line=line_no,
            text=line.strip()[:300],
            words=shown,
            cases=self.docs[best],
        )


def train(docs: Sequence[tuple[str, str]], meta: dict | None = None) -> dict:
    """The model's data from (category, log) pairs; deterministic (sorted, integer counts)."""
    classes = sorted({c for c, _ in docs})
    index = {c: i for i, c in enumerate(classes)}
    per: dict[str, Counter[int]] = {}
    seen: Counter[str] = Counter()
    ndocs = [0] * len(classes)
    for cat, log in docs:
        ndocs[index[cat]] += 1
        for w in words(log):
            seen[w] += 1
            per.setdefault(w, Counter())[index[cat]] += 1
    kept = {
        w: [list(p) for p in sorted(per[w].items())] for w in sorted(per) if seen[w] >= MIN_DOCS
    }
    return {**(meta or {}), "classes": classes, "docs": ndocs, "words": kept}


def dumps(data: dict) -> str:
    """`learned.json`'s text: one word per line, so that a retrain's diff is readable."""
    head = {k: v for k, v in data.items() if k != "words"}
    body = ",\n".join(f"  {json.dumps(w)}: {json.dumps(v)}" for w, v in data["words"].items())
    return json.dumps(head, indent=1)[:-2] + ',\n "words": {\n' + body + "\n }\n}\n"


@cache
def builtin() -> Model | None:
    """The shipped model (None when the file is missing: the vote is then silent)."""
    try:
        return Model(json.loads(MODEL.read_text("utf-8")))
    except FileNotFoundError:
        return None
