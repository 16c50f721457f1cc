"""The fast matcher finds what the naive loop finds, on the right lines, with captures."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from sparktui.knowledge import kb as kb_mod
from sparktui.knowledge.kb import load, load_builtin
from sparktui.knowledge.matcher import (
    CHUNK,
    Matcher,
    clean_line,
    prefix_captures,
    strip_ansi_bytes,
    strip_prefixes,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VLLM = FIXTURES / "vllm"


@pytest.fixture(scope="module")
def m() -> Matcher:
    return Matcher(load_builtin())


def naive(matcher: Matcher, data: bytes) -> set[tuple[str, int]]:
    """Reference: every pattern's regexes on every cleaned line (single-line hits)."""
    out = set()
    lines = data.decode("utf-8", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for no, raw in enumerate(lines, 1):
        line = clean_line(raw)
        for p in matcher.patterns:
            if p.search(line):
                out.add((p.id, no))
    role = {p.id: p.role for p in matcher.patterns}
    benign = {no for pid, no in out if role[pid] == "benign"}
    named = {no for pid, no in out if role[pid] not in ("context", "fallback", "hint", "signal")}
    weak = ("fallback", "hint", "signal")
    return {
        (pid, no)
        for pid, no in out
        if (no not in benign or role[pid] in ("benign", "context"))
        and (role[pid] not in weak or no not in named)
    }


@pytest.mark.parametrize("name", sorted(p.name for p in VLLM.glob("*.log")))
def test_fast_scan_finds_every_naive_hit_on_real_logs(name, m):
    data = (VLLM / name).read_bytes()
    fast = {(h.id, h.line) for h in m.scan_bytes(data)}
    slow = naive(m, data)
    assert slow <= fast
    # anything extra must be a multi-line match (a wrapped message), never a stray hit
    for pid, no in fast - slow:
        assert m.kb.by_id[pid].span > 0, (pid, no)


def test_crash_corpus_naive_hits_are_found(m):
    for case in yaml.safe_load((FIXTURES / "crashlogs_dev.yaml").read_text()):
        data = case["log"].encode()
        hits = m.scan_bytes(data)
        # a wrapped message (span > 0) explains its line: no fallback there, unlike naive's
        named = {
            h.line for h in hits if h.pattern.role not in ("context", "fallback", "hint", "signal")
        }
        slow = {
            (pid, no)
            for pid, no in naive(m, data)
            if not (m.kb.by_id[pid].role in ("fallback", "hint", "signal") and no in named)
        }
        assert slow <= {(h.id, h.line) for h in hits}, case["id"]


def test_line_numbers_are_exact_across_chunks(m):
    filler = b"(APIServer pid=1) INFO 11-29 22:00:01 [loggers.py:283] Engine 000: ok\n"
    n_fill = (3 * CHUNK) // len(filler)
    sig = b"OSError: [Errno 98] Address already in use\n"
    data = filler * n_fill + sig + filler * 10 + sig
    hits = [h for h in m.scan_bytes(data) if h.id == "port.errno98"]
    assert [h.line for h in hits] == [n_fill + 1, n_fill + 12]


@pytest.mark.parametrize("step", [1, 7, 4096, 1 << 20])
def test_feeding_in_pieces_gives_the_same_hits(step, m):
    data = (VLLM / "vllm_ray_ip_mismatch.log").read_bytes()
    whole = [(h.id, h.line, h.captures.get("ip")) for h in m.scan_bytes(data)]
    sc = m.scanner()
    got = []
    for i in range(0, len(data), step):
        got += sc.feed(data[i : i + step])
    got += sc.close()
    assert sorted((h.id, h.line, h.captures.get("ip")) for h in got) == sorted(whole)


def test_scan_stream_reads_a_file_object(m):
    data = (VLLM / "vllm_port_in_use.log").read_bytes()
    hits = list(m.scan_stream(io.BytesIO(data), chunk=100))
    assert [h.id for h in hits if h.pattern.role not in ("fallback", "signal")] == ["port.errno98"]


def test_wrapped_message_matches_across_lines(m):
    log = (
        "(EngineCore pid=630) [autoscaler] Error: No available node types can fulfill resource"
        " request\n"
        "                     {'GPU': 1.0, 'node:192.168.50.192': 0.001}.\n"
    )
    hits = [h for h in m.scan_text(log) if h.id == "pg.no_node_type"]
    assert [(h.line, h.captures["ip"]) for h in hits] == [(1, "192.168.50.192")]


def test_wrapped_message_with_prefixed_continuation_lines(m):
    log = (
        "(EngineCore pid=9) ERROR 11-29 22:32:30 [core.py:1] ValueError: Free memory on device "
        "cuda:0 (109.53/121.69 GiB) on startup is\n"
        "(EngineCore pid=9) ERROR 11-29 22:32:30 [core.py:1] less than desired GPU memory "
        "utilization (0.91, 110.74 GiB)\n"
    )
    hit = next(h for h in m.scan_text(log) if h.id == "oom.free_mem_startup")
    assert (hit.line, hit.captures["want"], hit.captures["process"]) == (1, "110.74", "EngineCore")


def test_continuation_arriving_later_still_matches(m):
    sc = m.scanner()
    first = sc.feed(b"ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node\n")
    assert [h.id for h in first if h.pattern.role not in ("fallback", "signal", "hint")] == []
    later = sc.feed(
        b"running low on memory. Memory on the node (IP: 10.99.0.2) was\n"
        b"113.76GB / 119.70GB (0.950345)\n"
    )
    hit = next(h for h in later if h.id == "spark.ray_oom_monitor")
    assert (hit.line, hit.captures["ip"], hit.captures["used"]) == (1, "10.99.0.2", "113.76")


@pytest.mark.parametrize(
    "order", ["{'GPU': 1.0, 'node:%s': 0.001}", "{'node:%s': 0.001, 'GPU': 1.0}"]
)
def test_autoscaler_line_with_ansi_and_either_key_order(order, m):
    spec = order % "192.168.200.12"
    line = (
        f"\x1b[33m(autoscaler +41s)\x1b[0m Error: No available node types can fulfill "
        f"resource request {spec}. Add suitable node types to this cluster.\n"
    )
    hit = next(h for h in m.scan_text(line) if h.id == "pg.no_node_type")
    assert hit.captures["ip"] == "192.168.200.12"
    assert "\x1b" not in hit.text and hit.text.startswith("(autoscaler +41s) Error")


def test_ray_prefix_gives_node_ip_and_process(m):
    line = (
        "(EngineCore_DP0 pid=1088) (RayWorkerWrapper pid=285, ip=192.168.177.12) ERROR "
        "12-17 23:28:01 [worker_base.py:344] Error executing method 'load_model'. This "
        "might cause deadlock in distributed execution.\n"
    )
    hit = next(h for h in m.scan_text(line) if h.id == "model.load_model_wrapper")
    assert hit.captures["node_ip"] == "192.168.177.12"
    assert hit.captures["process"] == "RayWorkerWrapper"


def test_prefix_helpers():
    assert prefix_captures("(APIServer pid=1) INFO x") == {"process": "APIServer"}
    assert prefix_captures("text (Foo pid=2, ip=1.2.3.4) later") == {}
    assert (
        strip_prefixes("(EngineCore pid=9) ERROR 11-29 22:32:30 [core.py:1] less than")
        == "less than"
    )
    assert clean_line("x [repeated 6x across cluster]\r\n") == "x"
    assert strip_ansi_bytes(b"a\x1b[1;32mb\x1b[0m\nc\n") == b"ab\nc\n"


def test_repeated_suffix_does_not_defeat_end_anchors():
    kb = load([{"id": "t.end", "category": "nccl_error", "regex": r"init_device failed\.$"}])
    line = "(RayWorkerWrapper pid=1) init_device failed. [repeated 6x across cluster]\n"
    assert [h.id for h in Matcher(kb).scan_text(line)] == ["t.end"]


def test_pattern_re2_cannot_compile_still_works():
    kb = load(
        [{"id": "t.look", "category": "nccl_error", "regex": r"(?<=worker )died(?! peacefully)"}]
    )
    mt = Matcher(kb)
    assert any(pid == "t.look" for pid in (mt.patterns[i].id for i, _ in mt._slow))
    hits = mt.scan_text("worker died peacefully\nworker died\n")
    assert [(h.id, h.line) for h in hits if h.id == "t.look"] == [("t.look", 2)]


def test_non_ascii_user_pattern_is_matched():
    kb = load([{"id": "t.uni", "category": "model_loading", "regex": "modèle (?P<m>\\w+) absent"}])
    hits = Matcher(kb).scan_text("le modèle llama absent\n")
    assert [(h.id, h.captures["m"]) for h in hits] == [("t.uni", "llama")]


def test_benign_line_silences_other_patterns_on_it(m):
    kb = load([{"id": "t.supported", "category": "nccl_error", "regex": "Not Supported"}])
    mt = Matcher(kb)
    hits = mt.scan_text("| N/A  39C  P8  4W / N/A |  Not Supported  |  0%  Default |\n")
    assert {h.id for h in hits} == {"spark.nvml_not_supported"}


def test_shipped_knowledge_base_compiles_entirely_to_re2(m):
    assert m._slow == []  # every shipped prefilter runs in the RE2 set


def test_kb_module_has_no_textual_dependency():
    import sys

    assert "textual" not in kb_mod.__dict__
    assert all(
        not name.startswith("textual")
        for name in (
            getattr(mod, "__name__", "")
            for mod in vars(sys.modules["sparktui.knowledge"]).values()
            if hasattr(mod, "__name__")
        )
    )


def test_multi_line_captures_of_a_version_mismatch(m):
    log = (
        "RuntimeError: Version mismatch: The cluster was started with:\n"
        "    Ray: 2.12.0\n    Python: 3.11.11\n"
        "This process on node 10.123.3.87 was started with:\n"
        "    Ray: 2.42.0\n    Python: 3.9.21\n"
    )
    hit = next(h for h in m.scan_text(log) if h.id == "gcs.version_mismatch")
    assert hit.captures == {
        "cluster_ray": "2.12.0",
        "cluster_py": "3.11.11",
        "ip": "10.123.3.87",
        "proc_ray": "2.42.0",
        "proc_py": "3.9.21",
    }
