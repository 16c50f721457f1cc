#!/usr/bin/env bash
# Refresh the committed real logs of the vLLM lab (tests/fixtures/vllm/lab/): runs the vLLM
# tier with its log directory pointed at the fixtures. The test suite itself never writes
# there (its logs go to a temp dir), so `git status` stays clean after scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export SPARKTUI_LAB_LOGS="$PWD/tests/fixtures/vllm/lab"
exec python3 -m pytest -q -m vllm tests/e2e/test_vllm_lab.py "$@"
