"""The labelled crash corpus: real logs from public threads, split once by a fixed hash.

`tests/fixtures/crashlogs_dev.yaml` (41 cases) is what the knowledge base was first written
from: always `train`. `tests/fixtures/crashlogs/public*.yaml` are the cases collected
later; each goes to `train` or `heldout` by the SHA-256 of its thread URL (35 % held out),
decided before any pattern was written from them and never changed. Patterns are written
from `train` only; `heldout` is the honest estimate of how sparktui does on the next
user's log. `healthy_public.yaml` holds real logs of runs that worked.

    python -m tests.crash_corpus train      # accuracy and every miss (for pattern work)
    python -m tests.crash_corpus heldout    # accuracy and the misses (to report, not tune)
    python -m tests.crash_corpus export-train FILE   # the train cases only, one file
    python -m tests.crash_corpus learn      # rebuild sparktui/knowledge/learned.json
    python -m tests.crash_corpus healthy-margins   # each healthy train log left out in turn

The learned vote (`sparktui/knowledge/learned.py`) is trained on the train cases and the
healthy logs of the train split (by the same URL hash) plus the lab's own healthy serve logs.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PUBLIC = FIXTURES / "crashlogs"
HELDOUT_PERCENT = 35
REQUIRED = ("id", "category", "source", "url", "confidence", "log", "root_cause", "fix")
LAB_HEALTHY = (  # the lab's real logs of runs that worked: vLLM serving, Ray's nodes starting
    "vllm/vllm_cpu_serve_ok.log",
    "vllm/lab/serve_tp2_healthy.vllm.log",
    "vllm/lab/serve_tp2_worker_raylet_killed.spark-1.ray.log",
    "vllm/lab/seed_pg_ip_mismatch_cli.spark-1.ray.log",
    "vllm/lab/seed_pg_ip_mismatch_cli.spark-2.ray.log",
)


def split_of(url: str) -> str:
    """`heldout` for 35 % of thread URLs, `train` for the rest: fixed, by SHA-256."""
    digest = hashlib.sha256(url.strip().encode("utf-8")).hexdigest()
    return "heldout" if int(digest[:8], 16) % 100 < HELDOUT_PERCENT else "train"


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    url: str
    log: str
    split: str
    file: str
    raw: dict[str, Any]


def _load(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text("utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: not a list of cases")
    return data


def cases() -> list[Case]:
    """Every crash case, dev first; public cases deduplicated by (URL, log)."""
    out: list[Case] = []
    seen: set[tuple[str, str]] = set()
    dev = _load(FIXTURES / "crashlogs_dev.yaml")
    dev_urls = {c["url"] for c in dev}
    for c in dev:
        out.append(Case(c["id"], c["category"], c["url"], c["log"], "train", "dev", c))
        seen.add((c["url"], c["log"].strip()))
    for path in sorted(PUBLIC.glob("public*.yaml")):
        for c in _load(path):
            missing = [k for k in REQUIRED if not c.get(k)]
            if missing:
                raise ValueError(f"{path.name}: case {c.get('id')}: missing {missing}")
            key = (c["url"], c["log"].strip())
            if key in seen or c["url"] in dev_urls:
                continue
            seen.add(key)
            out.append(
                Case(c["id"], c["category"], c["url"], c["log"], split_of(c["url"]), path.name, c)
            )
    return out


def healthy() -> list[dict[str, Any]]:
    return _load(PUBLIC / "healthy_public.yaml")


def of_split(split: str) -> list[Case]:
    return [c for c in cases() if c.split == split]


def learn_docs() -> list[tuple[str, str]]:
    """(class, log) pairs the learned vote is trained on: train split and healthy logs only."""
    from sparktui.knowledge.learned import HEALTHY

    docs = [(c.category, c.log) for c in of_split("train")]
    docs += [(HEALTHY, h["log"]) for h in healthy() if split_of(h["url"]) == "train"]
    docs += [(HEALTHY, (FIXTURES / f).read_text("utf-8")) for f in LAB_HEALTHY]
    return docs


def learned_data() -> dict:
    """What `learn` writes: the model built from `learn_docs()`."""
    from sparktui.knowledge import learned

    docs = learn_docs()
    meta = {
        "built_by": "python -m tests.crash_corpus learn",
        "from": f"{sum(c != learned.HEALTHY for c, _ in docs)} train cases and "
        f"{sum(c == learned.HEALTHY for c, _ in docs)} healthy logs (no held-out case)",
    }
    return learned.train(docs, meta)


@dataclass
class Score:
    right: int
    total: int
    misses: list[tuple[Case, list[str]]]

    @property
    def accuracy(self) -> float:
        return self.right / self.total if self.total else 0.0


def score(split: str) -> Score:
    """Top-1 category of `sparktui diagnose`'s findings against the labels of `split`."""
    from sparktui.knowledge import Matcher, diagnose_bytes, load_builtin

    matcher = Matcher(load_builtin())
    right, misses = 0, []
    chosen = of_split(split)
    for c in chosen:
        findings = diagnose_bytes(c.log.encode("utf-8"), matcher)
        got = [f"{f.category}:{f.id}" for f in findings]
        if findings and findings[0].category == c.category:
            right += 1
        else:
            misses.append((c, got))
    return Score(right, len(chosen), misses)


def _iter_report(split: str) -> Iterator[str]:
    s = score(split)
    yield f"{split}: {s.right}/{s.total} = {s.accuracy:.1%} top-1"
    by_cat = Counter(c.category for c, _ in s.misses)
    if by_cat:
        yield "misses by labelled category: " + ", ".join(
            f"{k} {v}" for k, v in by_cat.most_common()
        )
    for c, got in s.misses:
        yield f"  MISS {c.id} [{c.category}] got {got[:3] or 'nothing'}"


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] in ("train", "heldout"):
        for line in _iter_report(argv[0]):
            print(line)
        return 0
    if len(argv) == 2 and argv[0] == "export-train":
        train = [c.raw | {"split": "train"} for c in of_split("train")]
        Path(argv[1]).write_text(
            yaml.safe_dump(train, sort_keys=False, allow_unicode=True, width=1000), "utf-8"
        )
        print(f"{len(train)} train cases -> {argv[1]}")
        return 0
    if argv == ["learn"]:
        from sparktui.knowledge import learned

        data = learned_data()
        learned.MODEL.write_text(learned.dumps(data), "utf-8")
        print(f"{data['from']}, {len(data['words'])} words -> {learned.MODEL}")
        return 0
    if argv == ["healthy-margins"]:
        from sparktui.knowledge import learned

        docs = learn_docs()
        margins = []
        for i, (cls, log) in enumerate(docs):
            if cls != learned.HEALTHY:
                continue
            vote = learned.Model(learned.train(docs[:i] + docs[i + 1 :])).vote(log)
            margins.append(vote.margin if vote else float("-inf"))
        over = sum(m >= learned.HEALTHY_MARGIN for m in margins)
        print(
            f"healthy logs left out in turn, log-odds of the best failure class: "
            f"{sorted(round(m, 1) for m in margins)}; {over} at or over "
            f"HEALTHY_MARGIN {learned.HEALTHY_MARGIN}"
        )
        return 0
    if argv == ["stats"]:
        all_cases = cases()
        for split in ("train", "heldout"):
            sub = [c for c in all_cases if c.split == split]
            cats = Counter(c.category for c in sub)
            print(
                f"{split}: {len(sub)} cases, {len({c.url for c in sub})} URLs; "
                + ", ".join(f"{k} {v}" for k, v in sorted(cats.items()))
            )
        public = [c for c in all_cases if c.file != "dev"]
        held = sum(c.split == "heldout" for c in public)
        print(
            f"public: {len(public)} cases, held out {held} = {held / len(public):.1%}; "
            f"healthy: {len(healthy())}"
        )
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
