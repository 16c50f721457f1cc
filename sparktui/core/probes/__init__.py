"""Node probes: pure parsers (`text -> dataclasses`), one module per source, plus the
combined per-node probe script (`script.py`) that gathers every source in one round trip."""
