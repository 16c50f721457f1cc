"""Fast signature scanning: one RE2 `Set` pass over big chunks, full regexes only on hits.

The naive way (every Python regex over every line) runs at a few MB/s. Here a chunk of
complete lines (about 1 MiB) goes once through a multi-pattern engine holding every pattern's
single-line prefilter (its `anchor`, or its regexes): Hyperscan when its wheel is installed
(`pip install 'sparktui[fast]'`), else an RE2 `Set`. Almost all chunks hit nothing and cost
one linear pass. Prefilters Hyperscan cannot compile stay in a (small) RE2 `Set`; both
engines report the same prefilter ids, so the hits are the same. For a chunk that hits, each matched prefilter locates its lines, and only
those lines (plus `span` continuation lines, for wrapped messages) are decoded and matched with
the pattern's full Python regexes, which yield the captures.

Lines are matched with ANSI escapes and Ray's ` [repeated Nx across cluster]` suffix removed;
the Ray/vLLM process prefix (`(RayWorkerWrapper pid=N, ip=X)`) stays in the text and its
`ip=` becomes the `node_ip` capture. Invalid UTF-8 is decoded with replacement; very long
lines are matched on a bounded slice around the prefilter hit.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from sparktui.core.safe_text import ANSI_RE
from sparktui.knowledge.kb import KnowledgeBase, Pattern

try:  # google-re2 is a declared dependency; stay correct (slow) without it
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only on broken installs
    _re2 = None

_hs: Any = None
try:  # optional (extra `fast`): a faster multi-pattern prefilter where its wheel installs
    import hyperscan as _hs_module

    _hs = _hs_module
except ImportError:
    pass

ENGINES = ("auto", "hyperscan", "re2")


def available_engines() -> list[str]:
    """Prefilter engines this install can use, fastest first."""
    return [e for e, mod in (("hyperscan", _hs), ("re2", _re2)) if mod is not None]


_HS_FLAGS = ("MULTILINE", "SINGLEMATCH", "ALLOWEMPTY")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparktui"


class _HsSet:
    """The subset of `re2.Set` the matcher uses (`Match(buf) -> ids`), on Hyperscan.

    Each expression reports at most once per scan (SINGLEMATCH): the matcher only needs
    which prefilters occur in a region; their lines are then located with RE2. Byte
    semantics (no UTF-8 flag), `^`/`$` at line ends (MULTILINE), as the RE2 set is built.
    Compiling ~600 prefilters takes seconds, so the compiled database is cached under
    `$XDG_CACHE_HOME/sparktui/` by the hash of its expressions (a stale or unreadable cache
    file is just recompiled). Expressions Hyperscan rejects (look-around, backreferences)
    are found by splitting the set and are left out: `rejected` lists their positions.
    """

    def __init__(self, exprs: list[bytes]) -> None:
        assert _hs is not None
        self.flags = 0
        for name in _HS_FLAGS:
            self.flags |= getattr(_hs, f"HS_FLAG_{name}")
        key = hashlib.sha256(b"\0".join([repr(_HS_FLAGS).encode(), *exprs])).hexdigest()[:24]
        cache = _cache_dir() / f"hyperscan-{getattr(_hs, '__version__', '')}-{key}.db"
        self.rejected: list[int] = []
        self.ids: list[int] = list(range(len(exprs)))
        db = self._load(cache, len(exprs))
        if db is None:
            db, self.ids = self._compile_good(exprs, list(range(len(exprs))))
            self.rejected = sorted(set(range(len(exprs))) - set(self.ids))
            self._save(cache, db)
        self.db = db
        self.scratch = _hs.Scratch(db) if db is not None else None

    def _load(self, cache: Path, n: int):
        assert _hs is not None
        try:
            raw = cache.read_bytes()
            meta, blob = raw.split(b"\n", 1)
            ids = [int(x) for x in meta.split(b",") if x]
            if ids and max(ids) >= n:
                return None
            self.ids = ids
            self.rejected = sorted(set(range(n)) - set(ids))
            return _hs.loadb(blob, mode=_hs.HS_MODE_BLOCK) if ids else None
        except (OSError, ValueError, _hs.error):
            return None

    def _save(self, cache: Path, db) -> None:
        assert _hs is not None
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            blob = _hs.dumpb(db) if db is not None else b""
            tmp.write_bytes(",".join(map(str, self.ids)).encode() + b"\n" + blob)
            tmp.replace(cache)
        except (OSError, _hs.error):  # no cache: compiled again next time
            pass

    def _compile(self, exprs: list[bytes], ids: list[int]):
        assert _hs is not None
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        db.compile(
            expressions=[exprs[i] for i in ids],
            ids=list(range(len(ids))),
            elements=len(ids),
            flags=[self.flags] * len(ids),
        )
        return db

    def _compile_good(self, exprs: list[bytes], ids: list[int]):
        """(database, the ids it holds, in database order): rejected ones split away."""
        assert _hs is not None
        if not ids:
            return None, []
        try:
            return self._compile(exprs, ids), ids
        except _hs.error:
            if len(ids) == 1:
                return None, []
        good = self._good(exprs, ids)
        return (self._compile(exprs, good) if good else None), good

    def _good(self, exprs: list[bytes], ids: list[int]) -> list[int]:
        assert _hs is not None
        try:
            self._compile(exprs, ids)
            return ids
        except _hs.error:
            if len(ids) == 1:
                return []
        mid = len(ids) // 2
        return self._good(exprs, ids[:mid]) + self._good(exprs, ids[mid:])

    def Match(self, data) -> list[int]:  # noqa: N802 - re2.Set's name
        """Positions (in the `exprs` given) of the expressions that occur in `data`."""
        if self.db is None:
            return []
        found: list[int] = []

        def on_match(i: int, _from: int, _to: int, _flags: int, _ctx: object) -> None:
            found.append(i)

        self.db.scan(
            bytes(data) if isinstance(data, memoryview) else data,
            match_event_handler=on_match,
            scratch=self.scratch,
        )
        ids = self.ids
        return [ids[i] for i in found]


CHUNK = 1 << 20  # bytes per scan region
MAX_EVAL = 64 * 1024  # longest text a full Python regex sees
MAX_TEXT = 2000  # characters of the line kept in a hit (for display)
MAX_PARTIAL = 8 << 20  # a "line" longer than this without a newline is cut

# CSI (colours), OSC (titles, links) and two-byte escapes; never across a newline
ANSI_RE_B = re.compile(ANSI_RE.pattern.encode())
REPEATED_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
REPEATED_RE_B = re.compile(rb"[ \t]*\[repeated \d+x across cluster\][ \t]*$")
# "(EngineCore_DP0 pid=1088) (RayWorkerWrapper pid=285, ip=192.168.177.12) ERROR ..."
PREFIX_RE = re.compile(r"\((?P<proc>[^()\s]+) pid=\d+(?:, ip=(?P<ip>[\w.:-]+))?\) ")
# what may precede the first process prefix: nothing, quote markers of a pasted log
# (`> `, `▎`, `|`), a timestamp (docker logs -t, Ray), a `[rank0]:` tag
_QUOTE = r"(?:[>▎│|]\s*)*"
_LEAD_RE = re.compile(
    r"\s*" + _QUOTE + r"(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+Z?\]?\s*)?(?:\[rank\d+\]:\s*)?$"
)
LEADING_PREFIXES_RE = re.compile(
    r"^\s*" + _QUOTE + r"(?:\[?\d{4}-\d\d-\d\dT[\d:.]+Z\]? )?"  # docker logs -t
    r"(?:\[rank\d+\]:\s*)?"  # torchrun's rank tag
    r"(?:\((?:[^()\s]+ pid=\d+(?:, ip=[\w.:-]+)?|raylet|autoscaler[^()]*)\) ?)*"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[?[^\]\s]+:\d+\]? )?"
)


@dataclass(frozen=True)
class Hit:
    """One pattern matched at one line (1-based)."""

    pattern: Pattern
    line: int
    text: str
    captures: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.pattern.id


def clean_line(text: str) -> str:
    """A log line as patterns see it: no ANSI, no trailing CR, no Ray dedup suffix."""
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    text = text.rstrip("\r\n")
    if "repeated" in text:
        text = REPEATED_RE.sub("", text)
    return text


def _per_line(text: bytes, needle: bytes, fix: Callable[[bytes], bytes]) -> bytes:
    """Apply `fix` to the lines containing `needle` (found with a fast substring search)."""
    i = text.find(needle)
    if i < 0:
        return text
    parts: list[bytes] = []
    last = 0
    while i >= 0:
        start = text.rfind(b"\n", last, i) + 1 or last
        end = text.find(b"\n", i)
        if end < 0:
            end = len(text)
        parts.append(text[last:start])
        parts.append(fix(text[start:end]))
        last = end
        i = text.find(needle, end)
    parts.append(text[last:])
    return b"".join(parts)


def _strip_ansi_line(line: bytes) -> bytes:
    return ANSI_RE_B.sub(b"", line)


def _strip_repeated_line(line: bytes) -> bytes:
    return REPEATED_RE_B.sub(b"", line.rstrip(b"\r"))


def strip_ansi_bytes(text: bytes) -> bytes:
    """`text` without ANSI escapes; line structure kept. Cheap when escapes are rare."""
    i = text.find(b"\x1b")
    if i < 0:
        return text
    if text.count(b"\x1b", i) * 4096 > len(text):  # a coloured log: one pass over all
        return ANSI_RE_B.sub(b"", text)
    return _per_line(text, b"\x1b", _strip_ansi_line)


def strip_prefixes(text: str) -> str:
    """The message part of a continuation line (process, level, timestamp prefixes removed)."""
    return LEADING_PREFIXES_RE.sub("", text, count=1)


def prefix_captures(text: str) -> dict[str, str]:
    """`process` and `node_ip` from the leading chain of Ray/vLLM prefixes.

    In `(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=2, ip=X) ERROR ...` the innermost
    prefix names the process that logged the line and `ip=` the node it ran on.
    """
    out: dict[str, str] = {}
    end = None
    for m in PREFIX_RE.finditer(text, 0, 600):
        if end is None:
            if m.start() and not _LEAD_RE.match(text, 0, m.start()):
                break
        elif m.start() != end:
            break
        end = m.end()
        out["process"] = m.group("proc")
        if m.group("ip"):
            out["node_ip"] = m.group("ip")
    return out


class Matcher:
    """Compiled form of a knowledge base for scanning. Immutable; share it freely."""

    def __init__(self, kb: KnowledgeBase, engine: str = "auto") -> None:
        """`engine`: `hyperscan`, `re2`, or `auto` (Hyperscan when installed, else RE2)."""
        if engine not in ENGINES:
            raise ValueError(f"unknown matcher engine {engine!r} (one of {', '.join(ENGINES)})")
        if engine == "auto":
            engine = "hyperscan" if _hs is not None and _re2 is not None else "re2"
        elif engine == "hyperscan" and (_hs is None or _re2 is None):
            raise ValueError(
                "matcher engine hyperscan: install it with pip install 'sparktui[fast]'"
            )
        self.engine = engine
        self.kb = kb
        self.patterns: tuple[Pattern, ...] = kb.patterns
        self.max_span = max((p.span for p in self.patterns), default=0)
        entries: list[tuple[int, str]] = []
        for i, p in enumerate(self.patterns):
            for rx in p.prefilter:
                entries.append((i, rx))
        self._fast: list[tuple[int, object]] = []  # (pattern index, re2 regex)
        self._slow: list[tuple[int, re.Pattern[bytes]]] = []  # RE2 cannot: Python re
        self._set = None
        self._hs_set: _HsSet | None = None
        self._hs: list[tuple[int, object]] = []  # (pattern index, re2 regex): in _hs_set
        hs_exprs: list[bytes] = []
        set_entries: list[tuple[int, object]] = []
        if _re2 is not None:
            opts = _re2.Options()
            opts.encoding = _re2.Options.Encoding.LATIN1
            opts.max_mem = 256 << 20
            rset = _re2.Set.SearchSet(opts)
            for i, rx in entries:
                b = _prefilter_bytes(rx)
                if b is None:
                    self._slow.append((i, _py_bytes(rx)))
                    continue
                b = b"(?m)" + b  # ^ and $ are line anchors, as in Python re.M
                try:
                    compiled = _re2.compile(b, opts)
                except _re2.error:  # RE2 syntax gap (look-around, backrefs): Python re
                    self._slow.append((i, _py_bytes(rx)))
                    continue
                if engine == "hyperscan":
                    hs_exprs.append(_prefilter_bytes(rx) or b)  # (?m): the MULTILINE flag
                    self._hs.append((i, compiled))
                    continue
                rset.Add(b)
                set_entries.append((i, compiled))
            if hs_exprs:
                self._hs_set = _HsSet(hs_exprs)
                for k in self._hs_set.rejected:  # Hyperscan cannot: the RE2 set
                    rset.Add(b"(?m)" + hs_exprs[k])
                    set_entries.append(self._hs[k])
            if set_entries:
                rset.Compile()
                self._set = rset
            self._fast = set_entries
        else:
            self._slow = [(i, _py_bytes(rx)) for i, rx in entries]

    # -- locating candidate lines in a region of complete lines --------------------------
    def candidates(self, buf, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """(absolute offset of a prefilter hit, pattern index) pairs in buf[start:end]."""
        end = len(buf) if end is None else end
        view = memoryview(buf)[start:end]
        found: list[tuple[int, int]] = []
        if self._hs_set is not None:
            found += _locate(self._hs_set, self._hs, view, start)
        if self._set is not None:
            found += _locate(self._set, self._fast, view, start)
        for pidx, prx in self._slow:
            for m in prx.finditer(buf, start, end):
                found.append((m.start(), pidx))
        return found

    def scanner(self, first_line: int = 1) -> Scanner:
        return Scanner(self, first_line=first_line)

    def scan_bytes(self, data: bytes) -> list[Hit]:
        sc = self.scanner()
        return sc.feed(data) + sc.close()

    def scan_text(self, text: str) -> list[Hit]:
        return self.scan_bytes(text.encode("utf-8", "surrogateescape"))

    def scan_lines(self, lines: Iterable[str], first_line: int = 1) -> list[Hit]:
        sc = self.scanner(first_line)
        return sc.feed_lines(list(lines)) + sc.close()

    def scan_stream(self, f: BinaryIO, chunk: int = CHUNK) -> Iterator[Hit]:
        """Hits of a binary file object, read in chunks (bounded memory)."""
        sc = self.scanner()
        yield from sc.feed_stream(f, chunk)
        yield from sc.close()


SUB = 8 * 1024  # a region with hits is set-scanned again in blocks this big


def _locate(
    rset: Any, entries: list[tuple[int, Any]], view: memoryview, start: int
) -> list[tuple[int, int]]:
    """(offset, pattern index) of every prefilter match in `view` (at `start` in its buffer).

    One set pass says which prefilters occur. In a big region, each ~8 KiB block of
    whole lines is set-scanned again, and only the prefilters found in a block are run
    (RE2) over that block: a region with 25 prefilters hitting costs 25 short runs, not 25
    passes over the region. A prefilter seen in the region but in no block (a match across
    a block's edge, e.g. `\\s` over a newline) runs over the whole region as before.
    """
    ids = rset.Match(view)
    if not ids:
        return []
    found: list[tuple[int, int]] = []
    n = len(view)
    if n <= 2 * SUB:
        for entry in ids:
            pidx, rx = entries[entry]
            found += [(start + m.start(), pidx) for m in rx.finditer(view)]
        return found
    left = set(ids)
    whole: Any = view.obj
    pos = 0
    while pos < n:
        cut = n if n - pos <= SUB else whole.find(b"\n", start + pos + SUB, start + n) - start
        if cut < 0 or cut >= n:
            cut = n
        else:
            cut += 1
        block = view[pos:cut]
        for entry in rset.Match(block) or ():
            pidx, rx = entries[entry]
            left.discard(entry)
            found += [(start + pos + m.start(), pidx) for m in rx.finditer(block)]
        pos = cut
    for entry in left:
        pidx, rx = entries[entry]
        found += [(start + m.start(), pidx) for m in rx.finditer(view)]
    return found


def _prefilter_bytes(rx: str) -> bytes | None:
    """The prefilter as RE2 Latin-1 bytes, or None when it is not plain ASCII."""
    if not rx.isascii():
        return None
    # Python's \Z is RE2's \z; everything else we use is shared syntax.
    return rx.replace(r"\Z", r"\z").encode("ascii")


def _py_bytes(rx: str) -> re.Pattern[bytes]:
    try:
        return re.compile(rx.encode("utf-8"), re.M)
    except re.error:  # e.g. \d in a str-only construct: fall back to matching every line
        return re.compile(rb"^", re.M)


@dataclass
class _Pending:
    pattern: Pattern
    line: int
    first: str
    pos: int
    rest: list[str]


class Scanner:
    """Incremental scan of one log stream: feed bytes (or lines), get hits as lines complete.

    Holds only the unfinished last line and hits still waiting for their continuation
    lines: memory stays bounded whatever the input. Regions are scanned in place (no copy);
    lines carrying ANSI escapes or Ray's dedup suffix are also scanned once cleaned.
    """

    def __init__(self, matcher: Matcher, *, first_line: int = 1) -> None:
        self.m = matcher
        self.next_line = first_line  # number of the next line not yet scanned
        self._carry = b""  # the unfinished last line
        self._pending: list[_Pending] = []
        self.bytes_seen = 0

    # -- input ----------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Hit]:
        """Any bytes; complete lines are scanned now, an unfinished one waits."""
        self.bytes_seen += len(data)
        if self._carry:
            data = self._carry + data
            self._carry = b""
        hits: list[Hit] = []
        pos = 0
        n = len(data)
        while pos < n:
            if n - pos <= CHUNK:
                cut = data.rfind(b"\n", pos)
            else:  # bounded regions, whatever the caller hands us
                cut = data.rfind(b"\n", pos, pos + CHUNK)
                if cut < 0:
                    cut = data.find(b"\n", pos + CHUNK)
            if cut < 0:
                rest = data[pos:] if pos else data
                if len(rest) > MAX_PARTIAL:  # a monster line: cut it here
                    rest += b"\n"
                    hits += self._region(rest, 0, len(rest))
                else:
                    self._carry = rest
                return hits
            hits += self._region(data, pos, cut + 1)
            pos = cut + 1
        return hits

    def feed_stream(self, f: BinaryIO, chunk: int = CHUNK) -> Iterator[Hit]:
        """Read `f` to its end with one reused buffer (readinto: no per-chunk copies)."""
        buf = bytearray(2 * chunk)
        k = 0  # bytes of an unfinished line at buf[0:k]
        if self._carry:
            buf[: len(self._carry)] = self._carry
            k, self._carry = len(self._carry), b""
        while True:
            if len(buf) < k + chunk:
                buf.extend(bytes(k + chunk - len(buf)))
            n = cast(io.BufferedIOBase, f).readinto(memoryview(buf)[k : k + chunk])
            if not n:
                break
            self.bytes_seen += n
            total = k + n
            cut = buf.rfind(b"\n", k, total)
            if cut < 0:
                k = total
                if k > MAX_PARTIAL:  # a monster line: cut it here
                    yield from self._region(bytes(buf[:k]) + b"\n", 0, k + 1)
                    k = 0
                continue
            yield from self._region(buf, 0, cut + 1)
            k = total - (cut + 1)
            buf[:k] = buf[cut + 1 : total]
        self._carry = bytes(buf[:k])

    def feed_lines(self, lines: Sequence[str]) -> list[Hit]:
        """Complete lines (without newlines), e.g. a follower's batch."""
        if not lines:
            return []
        data = "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n"
        return self.feed(data)

    def close(self) -> list[Hit]:
        """End of input: scan the unfinished last line, settle pending hits."""
        hits: list[Hit] = []
        if self._carry:
            region = self._carry + b"\n"
            self._carry = b""
            hits += self._region(region, 0, len(region))
        self._pending = []
        return hits

    # -- scanning -------------------------------------------------------------------------
    def _region(self, buf, start: int, end: int) -> list[Hit]:
        """Scan the complete lines buf[start:end] (end is just after a newline)."""
        hits = self._feed_pending(buf, start, end) if self._pending else []
        cands = self.m.candidates(buf, start, end)
        cands += self._dirty_candidates(buf, start, end)
        line_no, last = self.next_line, start
        if cands:
            cands.sort()
            found, line_no, last = self._evaluate(buf, start, end, line_no, cands)
            hits += found
        self.next_line = line_no + buf.count(b"\n", last, end)  # one pass over the region
        if len(self._pending) > 64:  # never let waiting hits grow without bound
            self._pending = self._pending[-64:]
        return _suppress_benign(hits) if hits else hits

    def _dirty_candidates(self, buf, start: int, end: int) -> list[tuple[int, int]]:
        """Prefilter hits that only show once ANSI escapes / dedup suffixes are removed.

        Those lines are few (colour around prefixes, Ray's dedup notes): they are cleaned
        and scanned as a small side text; hits map back to the raw line's start.
        """
        starts: list[int] = []
        for needle in (b"\x1b", b"x across cluster]"):
            i = buf.find(needle, start, end)
            while i >= 0:
                ls = buf.rfind(b"\n", start, i) + 1 or start
                le = buf.find(b"\n", i, end)
                starts.append(ls)
                i = buf.find(needle, le, end) if le >= 0 else -1
        if not starts:
            return []
        starts = sorted(set(starts))
        cleaned = []
        for ls in starts:
            le = buf.find(b"\n", ls, end)
            line = bytes(buf[ls : le if le >= 0 else end])
            cleaned.append(_strip_repeated_line(_strip_ansi_line(line)))
        side = b"\n".join(cleaned) + b"\n"
        offsets = []
        pos = 0
        for c in cleaned:
            offsets.append(pos)
            pos += len(c) + 1
        out = []
        for spos, pidx in self.m.candidates(side):
            idx = bisect.bisect_right(offsets, spos) - 1
            out.append((starts[idx], pidx))
        return out

    def _evaluate(
        self, buf, start: int, end: int, base: int, cands: list[tuple[int, int]]
    ) -> tuple[list[Hit], int, int]:
        """Full matches of the candidates; also (line number at `last`, `last`) offset."""
        hits: list[Hit] = []
        line_no = base
        last = start
        done: set[tuple[int, int]] = set()
        for pos, pidx in cands:
            line_no += buf.count(b"\n", last, pos)
            last = pos
            key = (line_no, pidx)
            if key in done:
                continue
            done.add(key)
            ls = buf.rfind(b"\n", start, pos) + 1 or start
            le = buf.find(b"\n", pos, end)
            if le < 0:
                le = end
            pattern = self.m.patterns[pidx]
            first, rel = _slice_line(buf, ls, le, pos)
            rest: list[str] = []
            nxt = le + 1
            for _ in range(pattern.span):
                if nxt >= end:
                    break
                e = buf.find(b"\n", nxt, end)
                if e < 0:
                    e = end
                rest.append(_decode(buf[nxt : min(e, nxt + MAX_EVAL)]))
                nxt = e + 1
            hit = _match(pattern, line_no, first, rel, rest)
            if hit is not None:
                hits.append(hit)
            elif len(rest) < pattern.span:
                # the continuation may still come: wait for it (bounded by MAX_SPAN lines)
                self._pending.append(_Pending(pattern, line_no, first, rel, rest))
        return hits, line_no, last

    def _feed_pending(self, buf, start: int, end: int) -> list[Hit]:
        need = max(p.pattern.span - len(p.rest) for p in self._pending)
        lines: list[str] = []
        pos = start
        while len(lines) < need and pos < end:
            e = buf.find(b"\n", pos, end)
            if e < 0:
                e = end
            lines.append(_decode(buf[pos : min(e, pos + MAX_EVAL)]))
            pos = e + 1
        hits: list[Hit] = []
        keep: list[_Pending] = []
        for p in self._pending:
            p.rest.extend(lines[: p.pattern.span - len(p.rest)])
            hit = _match(p.pattern, p.line, p.first, p.pos, p.rest)
            if hit is not None:
                hits.append(hit)
            elif len(p.rest) < p.pattern.span:
                keep.append(p)
        self._pending = keep
        return hits


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _slice_line(text: bytes, start: int, end: int, pos: int) -> tuple[str, int]:
    """The hit line (bounded to MAX_EVAL bytes around the hit) and the hit's offset in it."""
    if end - start > MAX_EVAL:
        lo = max(start, pos - MAX_EVAL // 8)
        hi = min(end, lo + MAX_EVAL)
        head = _decode(text[lo:pos])
        return head + _decode(text[pos:hi]), len(head)
    head = _decode(text[start:pos])
    return head + _decode(text[pos:end]), len(head)


def _match(pattern: Pattern, line: int, first: str, pos: int, rest: list[str]) -> Hit | None:
    """Full regexes over the cleaned hit line, then over it plus its continuation lines."""
    line_text = clean_line(first)
    m = None
    if rest:  # wrapped messages first: they may carry more captures
        window = "\n".join([line_text, *(strip_prefixes(clean_line(r)) for r in rest)])
        limit = len(line_text)
        for rx in pattern.compiled:
            m = next((x for x in rx.finditer(window) if x.start() <= limit), None)
            if m is not None:
                break
    if m is None:  # the line alone ($ anchors the line end)
        m = pattern.search(line_text)
    if m is None:
        return None
    caps = {k: v for k, v in m.groupdict().items() if v is not None}
    for k, v in prefix_captures(line_text).items():
        caps.setdefault(k, v)
    shown = line_text if len(line_text) <= MAX_TEXT else line_text[:MAX_TEXT] + "…"
    return Hit(pattern, line, shown, caps)


_UNNAMED = ("context", "fallback", "hint", "signal")  # roles that explain no line
_WEAK = ("fallback", "hint", "signal")  # ... and stand only on lines without


def _suppress_benign(hits: list[Hit]) -> list[Hit]:
    """A benign hit silences alarms on the same line (context captures stay); fallback,
    hint and signal hits stand only on a line no other signature explains."""
    benign = {h.line for h in hits if h.pattern.role == "benign"}
    named = {h.line for h in hits if h.pattern.role not in _UNNAMED}
    weak = [h for h in hits if h.pattern.role in _WEAK]
    if not benign and not named.intersection(h.line for h in weak):
        return hits
    return [
        h
        for h in hits
        if (h.pattern.role in ("benign", "context") or h.line not in benign)
        and (h.pattern.role not in _WEAK or h.line not in named)
    ]
