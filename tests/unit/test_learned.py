"""The learned vote: built from the train split only, speaks only where no pattern does."""

from __future__ import annotations

import io
import json

import pytest

from sparktui.knowledge import Matcher, diagnose_bytes, learned, load_builtin
from sparktui.knowledge.triage import LEARNED, UNRECOGNISED, _Tail, diagnose_stream
from tests import crash_corpus


@pytest.fixture(scope="module")
def matcher() -> Matcher:
    return Matcher(load_builtin())


def test_the_shipped_model_is_what_learn_builds_from_the_train_split():
    shipped = json.loads(learned.MODEL.read_text("utf-8"))
    assert shipped == crash_corpus.learned_data(), "run: python -m tests.crash_corpus learn"
    # what it learns from: every train case, the healthy logs of the train split, the lab's
    train = crash_corpus.of_split("train")
    docs = crash_corpus.learn_docs()
    assert docs[: len(train)] == [(c.category, c.log) for c in train]
    healthy = [
        h["log"] for h in crash_corpus.healthy() if crash_corpus.split_of(h["url"]) == "train"
    ]
    assert [log for cls, log in docs[len(train) :]][: len(healthy)] == healthy
    assert len(docs) == len(train) + len(healthy) + len(crash_corpus.LAB_HEALTHY)
    assert json.loads(learned.dumps(shipped)) == shipped


def test_it_names_the_category_of_most_train_logs_it_learned_from():
    model = learned.builtin()
    assert model is not None
    train = crash_corpus.of_split("train")
    right = sum((v := model.vote(c.log)) is not None and v.category == c.category for c in train)
    assert right / len(train) >= 0.9


def test_the_vote_comes_first_only_where_no_pattern_names_a_cause(matcher):
    voted = 0
    for c in crash_corpus.of_split("train"):
        findings = diagnose_bytes(c.log.encode(), matcher)
        votes = [f for f in findings if f.id == LEARNED]
        if not votes:
            continue
        voted += 1
        assert findings[0].id == LEARNED, c.id
        assert all(f.category == "unknown" for f in findings[1:]), c.id
        vote = votes[0]
        assert vote.category != "unknown" and vote.fix.startswith("1. ")
        # it quotes the log's own line that points there most
        assert vote.line is not None and vote.text
        assert c.log.splitlines()[vote.line - 1].strip().startswith(vote.text[:100])
        if any(f.id == UNRECOGNISED for f in findings):
            assert vote.severity == "error"
    assert voted >= 5


def test_no_vote_on_the_labs_healthy_serve_logs(matcher):
    for name in crash_corpus.LAB_HEALTHY:
        data = (crash_corpus.FIXTURES / name).read_bytes()
        assert LEARNED not in [f.id for f in diagnose_bytes(data, matcher)], name
        vote = learned.builtin().vote(data.decode())
        assert vote is None or vote.margin < learned.HEALTHY_MARGIN


def test_a_big_log_read_as_a_stream_gets_the_same_vote_as_its_bytes(matcher):
    # a crash the vote reads right on its own (a few words, such as a bare glibc abort, can
    # read otherwise after a serve's words)
    failed, alone = next(
        (c, fs[0])
        for c in crash_corpus.of_split("train")
        if (fs := diagnose_bytes(c.log.encode(), matcher))
        and fs[0].id == LEARNED
        and fs[0].category == c.category
    )
    # a long serve before it broke: the real log's throughput lines, over and over
    serve = (crash_corpus.FIXTURES / crash_corpus.LAB_HEALTHY[1]).read_text()
    busy = "".join(x + "\n" for x in serve.splitlines() if "Avg prompt throughput" in x).encode()
    data = busy * (3_000_000 // len(busy)) + failed.log.encode()
    assert len(data) > 2 * learned.TAIL_BYTES
    by_bytes = diagnose_bytes(data, matcher)
    by_stream = diagnose_stream(io.BytesIO(data), matcher)
    assert [(f.id, f.category, f.text) for f in by_stream] == [
        (f.id, f.category, f.text) for f in by_bytes
    ]
    assert by_bytes[0].id == LEARNED and by_bytes[0].category == alone.category


def test_tail_keeps_the_last_bytes_read_through_it():
    data = bytes(range(256)) * 40  # 10,240 bytes
    tail = _Tail(io.BytesIO(data), 1000)
    buf = bytearray(300)
    total = 0
    while n := tail.readinto(memoryview(buf)):
        total += n
    assert total == len(data) and tail.end() == data[-1000:]
    assert sum(len(p) for p in tail.parts) < 1000 + 300
