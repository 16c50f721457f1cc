"""Headless core: config-driven transports, probes, checks, monitor, logs, actions.

Nothing under this package may import Textual (import-linter contract in pyproject).
"""
