#!/usr/bin/env bash
# The test command (README): lint, the headless-core contract, then every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m ruff check sparktui tests bench
shellcheck -s sh sparktui/remote/*.sh
lint-imports
exec python3 -m pytest -q -ra "$@"
