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

`Diagnosis` accumulates hits with bounded memory (first hit and a count per pattern), so a
live log can feed it for days.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sparktui.core.model import SEVERITY_RANK, Finding
from sparktui.knowledge.kb import KnowledgeBase, Pattern
from sparktui.knowledge.matcher import Hit, Matcher

ROLE_RANK = {"primary": 0, "predictive": 1, "secondary": 2, "benign": 3, "context": 4}
NO_ROOT_CAUSE = ("Root cause not in this log excerpt: only wrapper/aftermath messages were "
                 "found. ")
NO_ROOT_CAUSE_FIX = ("Look at the first ERROR of EngineCore or a worker earlier in the log, or "
                     "at the dead worker's own log on the node named by ip=; raise verbosity "
                     "with VLLM_LOGGING_LEVEL=DEBUG (and NCCL_DEBUG=INFO) if it is not there.")


@dataclass
class Evidence:
    first: Hit
    count: int = 1
    last_line: int = 0


class Diagnosis:
    """Accumulates hits of one log (or several), yields triaged findings on demand."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.evidence: dict[str, Evidence] = {}

    def add(self, hits: Iterable[Hit]) -> None:
        for h in hits:
            ev = self.evidence.get(h.id)
            if ev is None:
                self.evidence[h.id] = Evidence(h, 1, h.line)
            else:
                ev.count += 1
                ev.last_line = max(ev.last_line, h.line)

    def clear(self) -> None:
        self.evidence.clear()

    def findings(self) -> list[Finding]:
        return triage(self.evidence, self.kb)


@dataclass
class _Group:
    category: str
    best: Evidence
    role: str
    members: list[Evidence]


def triage(evidence: dict[str, Evidence] | Iterable[Hit], kb: KnowledgeBase) -> list[Finding]:
    """Findings, root cause first. Accepts accumulated evidence or plain hits."""
    if not isinstance(evidence, dict):
        d = Diagnosis(kb)
        d.add(evidence)
        evidence = d.evidence
    seen = set(evidence)
    demoted: set[str] = set()
    reroute: dict[str, str] = {}
    for rule in kb.rules:
        if seen.intersection(rule.when):
            demoted.update(rule.demote)
            reroute.update(rule.reroute)

    groups: dict[str, _Group] = {}
    context: dict[str, list[Evidence]] = {}
    for pid, ev in evidence.items():
        p = ev.first.pattern
        cat = reroute.get(pid, p.category)
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
        if (ROLE_RANK[p.role], ev.first.line) < (ROLE_RANK[g.role], g.best.first.line):
            g.best, g.role = ev, p.role

    def key(g: _Group) -> tuple:
        role = g.role
        if g.category in demoted and role in ("primary", "predictive"):
            role = "secondary"
        deferred = kb.categories[g.category].defer
        sev = g.best.first.pattern.severity
        return (ROLE_RANK[role], deferred, SEVERITY_RANK.get(sev, 9), g.best.first.line)

    ordered = sorted(groups.values(), key=key)
    out: list[Finding] = []
    for i, g in enumerate(ordered):
        out.append(_finding(g, kb, context.get(g.category, []), demoted,
                            wrapper_only=(i == 0 and g.role == "secondary")))
    return out


def _finding(g: _Group, kb: KnowledgeBase, context: list[Evidence], demoted: set[str],
             wrapper_only: bool) -> Finding:
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
    if p.category != g.category:   # rerouted: the destination category's advice comes first
        fix_steps = list(category.fix) + [s for s in fix_steps if s not in category.fix]
    explanation = p.explanation if p.category == g.category else category.explanation
    if wrapper_only:
        message = NO_ROOT_CAUSE + message
        fix_steps = [NO_ROOT_CAUSE_FIX, *fix_steps]
    elif g.category in demoted and g.role in ("primary", "predictive"):
        explanation = ("Probably a consequence of an earlier, more specific finding. "
                       + explanation)
    title = p.title if p.category == g.category else category.title
    return Finding(
        id=p.id,
        severity=p.severity,  # type: ignore[arg-type]
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
    return triage(matcher.scan_bytes(data), matcher.kb)


def diagnose_stream(f: BinaryIO, matcher: Matcher) -> list[Finding]:
    d = Diagnosis(matcher.kb)
    d.add(matcher.scan_stream(f))
    return d.findings()


def diagnose_file(path: str | Path, matcher: Matcher) -> list[Finding]:
    with open(path, "rb") as f:
        return diagnose_stream(f, matcher)
