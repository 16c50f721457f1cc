"""Crash knowledge: patterns as data (patterns.yaml), a fast matcher, triage and live join.

Headless: nothing here imports Textual. Typical use::

    kb = load_for_config(cfg)                 # shipped patterns + the user's
    matcher = Matcher(kb)
    findings = diagnose_bytes(data, matcher)  # root cause first
    findings = join(findings, snapshot)       # fixes name live nodes and IPs
"""

from sparktui.knowledge.join import join
from sparktui.knowledge.kb import (
    CATEGORIES,
    KnowledgeBase,
    KnowledgeBaseError,
    Pattern,
    load,
    load_builtin,
    load_for_config,
)
from sparktui.knowledge.matcher import Hit, Matcher, Scanner
from sparktui.knowledge.triage import Diagnosis, diagnose_bytes, diagnose_file, triage

__all__ = [
    "CATEGORIES",
    "Diagnosis",
    "Hit",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "Matcher",
    "Pattern",
    "Scanner",
    "diagnose_bytes",
    "diagnose_file",
    "join",
    "load",
    "load_builtin",
    "load_for_config",
    "triage",
]
