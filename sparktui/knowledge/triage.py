"""Triage: from pattern hits to findings, root cause first (taxonomy section 0).

- One finding per category; the pattern with the strongest role names it (primary, then
  predictive, then secondary, then benign), the earliest such line is shown.
- Wrappers (`Engine core initialization failed`, `ActorDiedError`, ...) are secondary: they
  never outrank a primary. When only wrappers are present the finding says the root cause is
  not in this excerpt instead of guessing.
- Categories marked `defer` (NCCL: peers blame the network when rank 0 died) rank after
  other root causes of the same role; the knowledge base's rules demote or reroute
  categories when a more specific signature was seen (/dev/shm explains NCCL's
  'unhandled system error'; a GB10-sized total turns a free-memory error into a UMA one).
- Context patterns only add captures; benign ones never raise more than an info finding.
- Generic patterns (a category's broad key phrases) name a root cause when no specific
  pattern does; they rank after primaries and before warnings and wrappers.
- Absences (`unless_later`): a start that never finished within the log (NCCL `Init START`
  without `Init COMPLETE` for the same comm, weight loading that stopped). They are judged
  only on a finished log (`final=True`), never while a live log may still finish them.
- Never silent on a failed log: when no error finding stands but fallback patterns saw an
  exception or an ERROR/FATAL line, an `unrecognised-error` finding quotes the last one.
- The learned vote (`learned.py`): a complete log no pattern explains (no finding, or only
  the unrecognised quote) gets, first, the category its words read most like, learned from
  the corpus' train logs, with the line that points there most - on a failed log, or on
  another one only when it reads far more like a failure than like a healthy run.
- Hints name the likely category when nothing more specific does: a category's keywords
  (`hint` patterns: NCCL, /dev/shm, placement group, ...) counted over the log, the category
  with the most hits wins - but only in a log that shows it failed (a fallback hit, or a
  `signal` word - `failed`, `timed out`, `Killed`, ... - in a log without a `healthy` line
  such as `Application startup complete`), never in a healthy one.

`Diagnosis` accumulates hits with bounded memory (first hit and a count per pattern), so a
live log can feed it for days.
"""

from __future__ import annotations

import io
import ipaddress
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from sparktui.core.model import SEVERITY_RANK, Finding
from sparktui.knowledge import learned
from sparktui.knowledge.kb import KnowledgeBase, Pattern
from sparktui.knowledge.matcher import Hit, Matcher

ROLE_RANK = {
    "primary": 0,
    "generic": 1,
    "predictive": 2,
    "secondary": 3,
    "benign": 4,
    "context": 5,
    "fallback": 6,
    "hint": 7,
    "signal": 8,
    "healthy": 9,
}
MAX_KEYS = 256  # values of an absence's `same` capture remembered per pattern
UNRECOGNISED = "unrecognised-error"
LEARNED = "learned-vote"
HINT_CAP = 3  # hits of one hint pattern that count towards its category's vote
NO_ROOT_CAUSE = "Root cause not in this log excerpt: only wrapper/aftermath messages were found. "
NO_ROOT_CAUSE_FIX = (
    "Look at the first ERROR of EngineCore or a worker earlier in the log, or "
    "at the dead worker's own log on the node named by ip=; raise verbosity "
    "with VLLM_LOGGING_LEVEL=DEBUG (and NCCL_DEBUG=INFO) if it is not there."
)


@dataclass
class Evidence:
    first: Hit
    count: int = 1
    last_line: int = 0
    last: Hit | None = None
    # for absences: value of the `same` capture ("" without one) -> first / last line seen
    keys: dict[str, tuple[int, int]] | None = None


class Diagnosis:
    """Accumulates hits of one log (or several), yields triaged findings on demand."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.evidence: dict[str, Evidence] = {}
        self._keyed = _keyed_patterns(kb)

    def add(self, hits: Iterable[Hit]) -> None:
        for h in hits:
            ev = self.evidence.get(h.id)
            if ev is None:
                ev = self.evidence[h.id] = Evidence(h, 1, h.line, h)
            else:
                ev.count += 1
                ev.last_line = max(ev.last_line, h.line)
                ev.last = h
            key_name = self._keyed.get(h.id)
            if key_name is not None:
                _remember(ev, h.captures.get(key_name, "") if key_name else "", h.line)

    def clear(self) -> None:
        self.evidence.clear()

    def findings(self, *, final: bool = False, text: str | None = None) -> list[Finding]:
        """Triaged findings; `final`: the log is complete, so absences count too; `text`:
        the log (its end), for the learned vote when no pattern explains it."""
        return triage(self.evidence, self.kb, final=final, text=text)


def _keyed_patterns(kb: KnowledgeBase) -> dict[str, str]:
    """Pattern id -> the capture its absence bookkeeping keys on ("" for none)."""
    out: dict[str, str] = {}
    for p in kb.patterns:
        if p.unless_later:
            out[p.id] = p.same or ""
            for pid in p.unless_later:
                out.setdefault(pid, p.same or "")
    return out


def _remember(ev: Evidence, key: str, line: int) -> None:
    if ev.keys is None:
        ev.keys = {}
    seen = ev.keys.get(key)
    if seen is not None:
        ev.keys[key] = (seen[0], line)
    elif len(ev.keys) < MAX_KEYS:
        ev.keys[key] = (line, line)


def _unfinished(ev: Evidence, p: Pattern, evidence: dict[str, Evidence]) -> bool:
    """An absence whose start has, for some key, no later hit of its `unless_later` ids."""
    for key, (first, _last) in (ev.keys or {"": (ev.first.line, ev.last_line)}).items():
        ended = False
        for pid in p.unless_later:
            other = evidence.get(pid)
            if other is None:
                continue
            seen = (other.keys or {}).get(key) if p.same else (other.first.line, other.last_line)
            if seen is not None and seen[1] > first:
                ended = True
                break
        if not ended:
            return True
    return False


@dataclass
class _Group:
    category: str
    best: Evidence
    role: str
    members: list[Evidence]


def _differ(evidence: dict[str, Evidence], refs: tuple[str, ...]) -> bool:
    """Every "pattern_id:capture" of `refs` was seen, each an IP address that is not
    loopback (a ":port" after it dropped), and they are not all the same address."""
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for ref in refs:
        pid, _, cap = ref.partition(":")
        ev = evidence.get(pid)
        value = ev.first.captures.get(cap, "") if ev is not None else ""
        host = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        if ip.is_loopback or ip.is_unspecified:
            return False
        found.add(ip)
    return len(found) > 1


def triage(
    evidence: dict[str, Evidence] | Iterable[Hit],
    kb: KnowledgeBase,
    *,
    final: bool = False,
    text: str | None = None,
) -> list[Finding]:
    """Findings, root cause first. Accepts accumulated evidence or plain hits.

    `final`: the log is complete (a file, a pasted excerpt), so absences are judged.
    `text`: that log (or its end): the learned vote reads it when no pattern explains it.
    """
    if not isinstance(evidence, dict):
        d = Diagnosis(kb)
        d.add(evidence)
        evidence = d.evidence
    seen = set(evidence)
    demoted: set[str] = set()
    kept: set[str] = set()
    reroute: dict[str, str] = {}
    for rule in kb.rules:
        if seen.intersection(rule.when) and (not rule.differ or _differ(evidence, rule.differ)):
            demoted.update(rule.demote)
            kept.update(rule.keep)
            reroute.update(rule.reroute)
    demoted -= kept

    groups: dict[str, _Group] = {}
    context: dict[str, list[Evidence]] = {}
    fallback: list[Evidence] = []
    hints: list[Evidence] = []
    signals: list[Evidence] = []
    healthy: list[Evidence] = []
    for pid, ev in evidence.items():
        p = ev.first.pattern
        cat = reroute.get(pid, p.category)
        if p.role == "fallback":
            fallback.append(ev)
            continue
        if p.role in ("hint", "signal", "healthy"):
            {"hint": hints, "signal": signals, "healthy": healthy}[p.role].append(ev)
            continue
        if p.unless_later and not (final and _unfinished(ev, p, evidence)):
            continue
        if p.role == "context":
            context.setdefault(cat, []).append(ev)
            continue
        if p.role == "benign" and p.silent:
            continue
        g = groups.get(cat)
        if g is None:
            groups[cat] = _Group(cat, ev, p.role, [ev])
            continue
        g.members.append(ev)
        best = g.best.first
        if (ROLE_RANK[p.role], ev.first.line, p.catch_all) < (
            ROLE_RANK[g.role],
            best.line,
            best.pattern.catch_all,
        ):
            g.best, g.role = ev, p.role

    def key(g: _Group) -> tuple:
        role = g.role
        if g.category in demoted and role in ("primary", "generic", "predictive"):
            role = "secondary"
        deferred = kb.categories[g.category].defer
        sev = g.best.first.pattern.severity
        return (ROLE_RANK[role], deferred, SEVERITY_RANK.get(sev, 9), g.best.first.line)

    ordered = sorted(groups.values(), key=key)
    out: list[Finding] = []
    for i, g in enumerate(ordered):
        out.append(
            _finding(
                g,
                kb,
                context.get(g.category, []),
                demoted,
                wrapper_only=(i == 0 and g.role == "secondary"),
            )
        )
    # after the named causes and the warnings that name one (a stalled load, a handshake
    # that never finished, a GPU shortfall warned of), before wrappers - when no error
    # finding stands; else last
    quiet = not any(f.severity == "error" for f in out)
    named = (
        next(
            (i for i, g in enumerate(ordered) if key(g)[0] > ROLE_RANK["predictive"]), len(ordered)
        )
        if quiet
        else len(out)
    )
    # a log that shows the server serving is not failed for its warnings' words alone
    failed = fallback or (signals and not healthy)
    # hints and the unrecognised error speak of a whole log: a complete one (a file, a pasted
    # excerpt, a failed serve), never a stream that is still being written
    if final and hints and failed and not any(g.role in ("primary", "generic") for g in ordered):
        hinted = _hinted(hints, kb, {f.category for f in out})
        if hinted is not None:
            out.insert(named, hinted)
            named += 1
    if final and fallback and quiet:
        out.insert(named, _unrecognised(fallback, kb))
    if final and text and (not out or out[0].category == "unknown"):
        vote = _voted(text, kb, failed=bool(failed))
        if vote is not None:
            out.insert(0, vote)
    return out


def _voted(text: str, kb: KnowledgeBase, *, failed: bool) -> Finding | None:
    """The learned vote as a finding: on a failed log, or on one far from a healthy run."""
    model = learned.builtin()
    vote = model.vote(text) if model is not None else None
    if vote is None or vote.category not in kb.categories:
        return None
    if not failed and vote.margin < learned.HEALTHY_MARGIN:
        return None
    category = kb.categories[vote.category]
    said = f" ({', '.join(vote.words)})" if vote.words else ""
    return Finding(
        id=LEARNED,
        severity="error" if failed else "warning",
        node=None,
        message=(
            f"Probably: {category.title[:1].lower()}{category.title[1:]}. No known signature "
            f"matched; this log's words{said} read most like the {vote.cases} real logs of "
            "this kind sparktui learned from"
        ),
        fix=format_fix(list(category.fix)),
        source="log",
        category=vote.category,
        title=category.title,
        explanation=category.explanation,
        links=category.links,
        line=vote.line or None,
        text=vote.text or None,
        captures={"runner_up": vote.runner_up or ""},
    )


def _hinted(hints: list[Evidence], kb: KnowledgeBase, taken: set[str | None]) -> Finding | None:
    """The category whose keywords the failed log mentions most (ties: the earliest)."""
    votes: dict[str, list[Evidence]] = {}
    for ev in hints:
        votes.setdefault(ev.first.pattern.category, []).append(ev)
    # one keyword repeated in every traceback frame must not outvote several different ones
    best = min(
        votes.items(),
        key=lambda kv: (
            -sum(min(e.count, HINT_CAP) for e in kv[1]),
            min(e.first.line for e in kv[1]),
        ),
    )
    name, evs = best
    if name in taken:
        return None
    first = min(evs, key=lambda e: e.first.line).first
    n = sum(e.count for e in evs)
    category = kb.categories[name]
    return Finding(
        id=first.pattern.id,
        severity=first.pattern.severity,
        node=None,
        message=(
            f"Probably: {category.title[:1].lower()}{category.title[1:]} "
            f"({n} line(s) of this failed log point there; no known signature matched)"
        ),
        fix=format_fix(list(category.fix)),
        source="log",
        category=name,
        title=category.title,
        explanation=category.explanation,
        links=category.links,
        line=first.line,
        text=first.text,
        captures=dict(first.captures),
    )


def _unrecognised(fallback: list[Evidence], kb: KnowledgeBase) -> Finding:
    """The last exception (or ERROR/FATAL line) of a log no pattern explains, quoted."""
    order = {p.id: i for i, p in enumerate(kb.patterns)}
    best = min(fallback, key=lambda e: (order[e.first.pattern.id], -e.last_line))
    hit = best.last or best.first
    p = hit.pattern
    category = kb.categories[p.category]
    return Finding(
        id=UNRECOGNISED,
        severity="error",
        node=None,
        message=p.render_message(hit.captures),
        fix=format_fix(list(p.fix)),
        source="log",
        category=p.category,
        title=p.title,
        explanation=p.explanation,
        links=tuple(dict.fromkeys((*p.links, *category.links))),
        line=hit.line,
        text=hit.text,
        captures=dict(hit.captures),
    )


def _finding(
    g: _Group, kb: KnowledgeBase, context: list[Evidence], demoted: set[str], wrapper_only: bool
) -> Finding:
    hit = g.best.first
    p: Pattern = hit.pattern
    captures: dict[str, str] = dict(hit.captures)
    for ev in sorted(g.members, key=lambda e: e.first.line):
        for k, v in ev.first.captures.items():
            captures.setdefault(k, v)
    for ev in sorted(context, key=lambda e: e.first.line):
        for k, v in ev.first.captures.items():
            captures.setdefault(k, v)
    category = kb.categories[g.category]
    message = p.render_message(captures)
    total = g.best.count
    if total > 1:
        message += f" (seen {total}x)"
    fix_steps = list(p.fix)
    if p.category != g.category:  # rerouted: the destination category's advice comes first
        fix_steps = list(category.fix) + [s for s in fix_steps if s not in category.fix]
    explanation = p.explanation if p.category == g.category else category.explanation
    if wrapper_only:
        message = NO_ROOT_CAUSE + message
        fix_steps = [NO_ROOT_CAUSE_FIX, *fix_steps]
    elif g.category in demoted and g.role in ("primary", "generic", "predictive"):
        explanation = "Probably a consequence of an earlier, more specific finding. " + explanation
    title = p.title if p.category == g.category else category.title
    return Finding(
        id=p.id,
        severity=p.severity,
        node=None,
        message=message,
        fix=format_fix(fix_steps),
        source="log",
        category=g.category,
        title=title,
        explanation=explanation,
        links=tuple(dict.fromkeys((*p.links, *category.links))),
        line=hit.line,
        text=hit.text,
        captures=captures,
    )


def format_fix(steps: list[str]) -> str:
    return "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))


# --- one-shot helpers ----------------------------------------------------------------------


def diagnose_bytes(data: bytes, matcher: Matcher) -> list[Finding]:
    """Findings of a complete log."""
    d = Diagnosis(matcher.kb)
    d.add(matcher.scan_bytes(data))
    return d.findings(final=True, text=_text(data[-learned.TAIL_BYTES :]))


def diagnose_stream(f: BinaryIO, matcher: Matcher) -> list[Finding]:
    """Findings of a complete log read from `f` (bounded memory)."""
    d = Diagnosis(matcher.kb)
    tail = _Tail(f, learned.TAIL_BYTES)
    d.add(matcher.scan_stream(cast(BinaryIO, tail)))
    return d.findings(final=True, text=_text(tail.end()))


def _text(data: bytes) -> str:
    """A log's end as text, from its first whole line."""
    text = data.decode("utf-8", "replace")
    return text if len(data) < learned.TAIL_BYTES else text.partition("\n")[2]


class _Tail:
    """A binary reader that keeps the last `keep` bytes read through it."""

    def __init__(self, f: BinaryIO, keep: int) -> None:
        self.f, self.keep = f, keep
        self.parts: deque[bytes] = deque()
        self.size = 0

    def readinto(self, buf: memoryview) -> int:
        n = cast(io.BufferedIOBase, self.f).readinto(buf) or 0
        if n:
            self.parts.append(bytes(buf[max(0, n - self.keep) : n]))
            self.size += min(n, self.keep)
            while self.size - len(self.parts[0]) >= self.keep:
                self.size -= len(self.parts.popleft())
        return n

    def end(self) -> bytes:
        return b"".join(self.parts)[-self.keep :]


def diagnose_file(path: str | Path, matcher: Matcher) -> list[Finding]:
    with open(path, "rb") as f:
        return diagnose_stream(f, matcher)
