#!/usr/bin/env bash
# The test command (README): lint (ruff, shellcheck on the node scripts), the import
# contracts, the type checker, then every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check sparktui tests bench
python3 -m ruff format --check sparktui tests bench
shellcheck -s sh sparktui/remote/*.sh
shellcheck -s bash sparktui/remote/*.bash
lint-imports
python3 -m mypy
exec python3 -m pytest -q -ra "$@"
