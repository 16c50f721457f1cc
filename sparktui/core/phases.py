"""vLLM's start-up phases, read from vLLM's own output (pure: lines in, a timeline out).

vLLM has no start-up endpoint (vllm #50282 asks for one), so the phase comes from the log:
process start, distributed init (Ray placement group, NCCL/Gloo), weight loading with
`Loading safetensors checkpoint shards: N% Completed | a/b [elapsed<eta, rate]`, `Model
loading took X GiB and Y seconds`, the KV cache size, graph capture / compilation, the API
server, `Application startup complete`. Lines forwarded by Ray carry `(RayWorkerProc pid=N,
ip=<ip>)`: the rank is keyed by that IP (`""` for the driver's own node), so a worker that
stops loading is told apart from the head.

Only the output after the last `=== sparktui serve ` marker counts (the log is appended to
by every serve). tqdm writes its bar updates with `\\r`: each `\\r`-separated part is one
update.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import accumulate

import re2

SERVE_MARKER = "=== sparktui serve "  # = core/actions/builtin.py's SERVE_MARKER_PREFIX

# In order. A phase never goes back (a later line of an earlier phase is only detail).
PHASES: tuple[str, ...] = (
    "starting",
    "distributed-init",
    "loading-weights",
    "kv-cache",
    "compiling",
    "api-server",
    "ready",
)
LABELS: dict[str, str] = {
    "starting": "starting",
    "distributed-init": "distributed init",
    "loading-weights": "loading weights",
    "kv-cache": "profiling / KV cache",
    "compiling": "compiling / graph capture",
    "api-server": "starting API server",
    "ready": "ready",
}
LOADING_PHASES = frozenset({"loading-weights", "compiling"})  # the ones with a progress bar

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_RAY_PREFIX = re.compile(r"^\((?P<actor>[A-Za-z_][\w.]*) pid=\d+(?:, ip=(?P<ip>[\d.]+))?\)\s?")
# vLLM's logger: `INFO 11-30 00:46:46 [file.py:12]`
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")

# (phase, regex) in order of precedence; the first that matches a line decides.
_RULE_TEXT: tuple[tuple[str, str], ...] = (
    ("ready", r"Application startup complete"),
    (
        "api-server",
        r"Starting vLLM (?:API )?server on|Available routes are:|"
        r"Started server process|Waiting for application startup",
    ),
    (
        "compiling",
        r"Capturing CUDA graphs?|Graph capturing finished|torch\.compile takes|"
        r"Compiling a graph for|Warming up model for the compilation|"
        r"Dynamo bytecode transform time|saved AOT compiled function|"
        r"init engine \(profile, create kv cache, warmup model\) took",
    ),
    (
        "kv-cache",
        r"(?:GPU|CPU|XPU|TPU) KV cache size:|Maximum concurrency for|"
        r"Available KV cache memory|Memory profiling takes|KV cache layout|"
        r"for KV cache on node|num_gpu_blocks is:|# (?:GPU|CPU) blocks:",
    ),
    (
        "loading-weights",
        r"Model loading took|Loading weights took|Starting to load model|"
        r"Loading (?:safetensors|pt) checkpoint shards|Initializing model took|"
        r"Filesystem type for checkpoints|Loading model weights took",
    ),
    (
        "distributed-init",
        r"distributed_init_method=|world_size=\d+ rank=\d+|"
        r"Creating a new placement group|Waiting for creating a placement group|"
        r"NCCL INFO (?:Bootstrap|comm 0x|Init COMPLETE)|vLLM is using nccl==|"
        r"is assigned as DP rank|Gloo|ProcessGroupNCCL|"
        r"Connecting to existing Ray cluster",
    ),
    (
        "starting",
        r"non-default args:|Initializing a V1 LLM engine|vLLM API server version|"
        r"Resolved architecture:|Using max model len",
    ),
)
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((p, re.compile(r)) for p, r in _RULE_TEXT)
_ANY = re2.compile("|".join(f"(?:{r})" for _, r in _RULE_TEXT))  # a line of some phase

_TQDM = re.compile(
    r"(?P<label>[A-Za-z][\w ()/,.-]*?):\s*(?P<pct>\d{1,3})%\s*(?:Completed\s*)?\|[^|\n]*?\|?\s*"
    r"(?P<n>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>[\d:]+)<(?P<eta>[\d:?]+),\s*"
    r"(?P<rate>[\d.]+|\?)\s*(?P<unit>s/it|it/s)?\]"
)
_MODEL_TOOK = re.compile(
    r"Model loading took (?P<gib>[\d.]+) ?GiB(?: memory)?"
    r"(?: and (?P<secs>[\d.]+) seconds)?"
)
_KV_SIZE = re.compile(r"(?:GPU|CPU|XPU|TPU) KV cache size: (?P<tokens>[\d,]+) tokens")


def _clock(text: str) -> float | None:
    """`1:33:55` / `09:30` -> seconds; `?` -> None."""
    if not text or "?" in text:
        return None
    secs = 0.0
    for part in text.split(":"):
        if not part.isdigit():
            return None
        secs = secs * 60 + int(part)
    return secs


@dataclass
class Progress:
    """One tqdm update: `done` of `total` items, tqdm's own elapsed / ETA / rate."""

    label: str
    done: int
    total: int
    elapsed_s: float | None
    eta_s: float | None
    rate_per_s: float | None  # items per second (tqdm's `s/it` inverted)

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total > 0 else 0.0


def parse_progress(text: str) -> Progress | None:
    """A tqdm bar as vLLM prints it -> Progress, else None."""
    m = _TQDM.search(text)
    if not m:
        return None
    rate: float | None = None
    if m["rate"] != "?":
        r = float(m["rate"])
        rate = (1.0 / r if r > 0 else None) if m["unit"] == "s/it" else r
    return Progress(
        m["label"].strip(),
        int(m["n"]),
        int(m["total"]),
        _clock(m["elapsed"]),
        _clock(m["eta"]),
        rate,
    )


@dataclass
class RankState:
    """What one rank (a node, keyed by the Ray prefix's ip; "" for the driver's node) said."""

    key: str
    phase: str | None = None
    progress: Progress | None = None
    first_rate: float | None = None  # the first non-zero rate of the current bar
    line: int | None = None  # 1-based line of its latest phase line


@dataclass
class Timeline:
    """Where start-up is. `phases`: each phase reached, in order, with the 1-based line of its
    first line and the vLLM timestamp seen at or before it (None when there was none yet)."""

    phases: list[tuple[str, int, float | None]] = field(default_factory=list)
    ranks: dict[str, RankState] = field(default_factory=dict)
    model_gib: float | None = None
    model_load_s: float | None = None
    kv_cache_tokens: int | None = None
    marker_line: int | None = None  # the serve marker the timeline starts after
    last_stamp: float | None = None

    @property
    def phase(self) -> str | None:
        return self.phases[-1][0] if self.phases else None

    @property
    def label(self) -> str | None:
        return LABELS.get(self.phase or "", self.phase)

    @property
    def started_at(self) -> float | None:
        return self.phases[-1][2] if self.phases else None

    def _bars(self) -> list[Progress]:
        """The progress bars of the current phase, one per rank that shows one."""
        if self.phase not in LOADING_PHASES:
            return []
        return [
            r.progress
            for r in self.ranks.values()
            if r.progress is not None and r.phase == self.phase
        ]

    @property
    def progress(self) -> Progress | None:
        """The slowest rank's bar in the current phase (None when the phase has none)."""
        bars = self._bars()
        return min(bars, key=lambda p: p.fraction) if bars else None

    @property
    def fraction(self) -> float | None:
        """0-1 in a phase with a progress bar, 1.0 once ready, else None."""
        if self.phase == "ready":
            return 1.0
        p = self.progress
        return p.fraction if p is not None else None

    @property
    def eta_s(self) -> float | None:
        bars = self._bars()
        etas = [p.eta_s for p in bars if p.eta_s is not None and p.done < p.total]
        return max(etas) if etas else None

    def rate_drop(self) -> tuple[str, float, float] | None:
        """(rank key, first rate, latest rate) of a bar whose rate fell by more than 10x."""
        for r in self.ranks.values():
            p = r.progress
            if (
                p is not None
                and r.phase in LOADING_PHASES
                and p.done < p.total
                and r.first_rate
                and p.rate_per_s is not None
                and p.rate_per_s * 10 < r.first_rate
            ):
                return r.key, r.first_rate, p.rate_per_s
        return None

    def describe(self) -> str:
        """`loading weights 50% (2/4, ETA 0:10)` — for serve's progress line."""
        if self.phase is None:
            return "no vLLM output yet"
        text = self.label or self.phase
        p = self.progress
        if p is not None:
            text += f" {p.fraction * 100:.0f}% ({p.done}/{p.total}"
            eta = self.eta_s
            text += f", ETA {format_seconds(eta)})" if eta is not None else ")"
        return text


def format_seconds(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _stamp(m: re.Match[str], year: int) -> float | None:
    try:
        dt = datetime(
            year, int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), tzinfo=timezone.utc
        )
    except ValueError:
        return None
    return dt.timestamp()


def classify(text: str) -> str | None:
    """The phase one (clean) line belongs to, else None."""
    for phase, rx in _RULES:
        if rx.search(text):
            return phase
    return None


def _candidates(lines: list[str]) -> list[int]:
    """The lines that may hold a phase (one RE2 pass over them all), a serve marker or
    ANSI escapes (their phrases are matched once the escapes are removed), in order."""
    text = "\n".join(lines)
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
    found = {bisect_right(starts, m.start()) - 1 for m in _ANY.finditer(text)}
    found.update(
        i for i, line in enumerate(lines) if "\x1b" in line or line.startswith(SERVE_MARKER)
    )
    return sorted(found)


def _last_stamp(lines: list[str], start: int, end: int, year: int) -> float | None:
    """The stamp of the last line in lines[start:end] that has one (the last `\r` part)."""
    for raw in reversed(lines[start:end]):
        for part in reversed(raw.split("\r")):
            sm = _STAMP.search(part)
            if sm and (t := _stamp(sm, year)) is not None:
                return t
    return None


def parse_phases(lines: Iterable[str], *, year: int | None = None, start_line: int = 1) -> Timeline:
    """vLLM output -> Timeline. `year` dates vLLM's `MM-DD hh:mm:ss` stamps (taken as UTC,
    as in containers; default: this year); `start_line` numbers the first line given.

    Only the lines one RE2 pass finds a phase phrase in are read line by line; the stamps
    of the others (most of a log: metrics, requests) only when a phase line or the end
    needs the latest one. The monitor parses 256 KB of the log at each refresh on the UI's
    loop while vLLM is not healthy: 22 ms a refresh with Python's re line by line, a
    frame's stall under a flood of lines.
    """
    year = year or time.gmtime().tm_year
    tl = Timeline()
    order = {p: i for i, p in enumerate(PHASES)}
    lines = lines if isinstance(lines, list) else list(lines)
    unstamped = 0  # lines[unstamped:i] were skipped without reading their stamps
    for i in _candidates(lines):
        raw = lines[i]
        no = i + start_line
        if raw.startswith(SERVE_MARKER):
            tl = Timeline(marker_line=no)
            unstamped = i + 1
            continue
        if unstamped < i:
            tl.last_stamp = _last_stamp(lines, unstamped, i, year) or tl.last_stamp
        unstamped = i + 1
        line = _ANSI.sub("", raw)
        key = ""
        m = _RAY_PREFIX.match(line)
        if m:
            key = m["ip"] or ""
            line = line[m.end() :]
        for part in line.split("\r"):
            part = part.strip()
            if not part:
                continue
            sm = _STAMP.search(part)
            if sm:
                tl.last_stamp = _stamp(sm, year) or tl.last_stamp
            phase = classify(part)
            if phase is None:
                continue
            rank = tl.ranks.setdefault(key, RankState(key))
            if rank.phase is None or order[phase] >= order[rank.phase]:
                if phase != rank.phase:
                    rank.progress, rank.first_rate = None, None
                rank.phase, rank.line = phase, no
            if phase == rank.phase and (p := parse_progress(part)) is not None:
                rank.progress = p
                if rank.first_rate is None and p.rate_per_s and p.done > 0:
                    rank.first_rate = p.rate_per_s
            if (mt := _MODEL_TOOK.search(part)) is not None:
                tl.model_gib = float(mt["gib"])
                tl.model_load_s = float(mt["secs"]) if mt["secs"] else None
            if (kv := _KV_SIZE.search(part)) is not None:
                tl.kv_cache_tokens = int(kv["tokens"].replace(",", ""))
            if tl.phase is None or order[phase] > order[tl.phase]:
                tl.phases.append((phase, no, tl.last_stamp))
    if unstamped < len(lines):
        tl.last_stamp = _last_stamp(lines, unstamped, len(lines), year) or tl.last_stamp
    return tl


def parse_phases_text(text: str, **kw: object) -> Timeline:
    return parse_phases(text.split("\n"), **kw)  # type: ignore[arg-type]


def parse_log_tail(stdout: str, *, year: int | None = None) -> tuple[Timeline | None, float | None]:
    """The probe's `vllm_log` section (`mtime=.. size=..`, then the bytes) -> (Timeline, the log's mtime), or (None, None)
    when there is no log. A tail that starts inside the file drops its first, partial line."""
    first, _, body = stdout.partition("\n")
    if not first.startswith("mtime="):
        return None, None
    fields = dict(kv.partition("=")[::2] for kv in first.split())
    mtime = float(fields["mtime"]) if fields.get("mtime", "").isdigit() else None
    size = int(fields["size"]) if fields.get("size", "").isdigit() else None
    lines = body.split("\n")
    if size is None or size > len(body.encode("utf-8", "surrogateescape")):
        lines = lines[1:]
    if year is None and mtime is not None:
        year = time.gmtime(mtime).tm_year
    return parse_phases(lines, year=year), mtime


def merge_timelines(old: Timeline | None, new: Timeline) -> Timeline:
    """`new` (read from a later tail of the same log), kept from going back: a tail that no
    longer reaches the lines of the phase already seen (and holds no new serve marker)
    keeps the phases seen before; its ranks' bars are still its own."""
    if old is None or old.phase is None or new.marker_line is not None:
        return new
    order = {p: i for i, p in enumerate(PHASES)}
    if new.phase is not None and order[new.phase] >= order[old.phase]:
        if new.phases and new.phases[0][0] != old.phases[0][0]:
            seen = {p for p, _l, _t in new.phases}
            new.phases = [
                e for e in old.phases if e[0] not in seen and order[e[0]] < order[new.phases[0][0]]
            ] + new.phases
        return new
    new.phases = list(old.phases)
    new.model_gib = new.model_gib if new.model_gib is not None else old.model_gib
    new.kv_cache_tokens = (
        new.kv_cache_tokens if new.kv_cache_tokens is not None else old.kv_cache_tokens
    )
    return new
