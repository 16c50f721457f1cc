#!/usr/bin/env bash
# One-time setup on a fresh Debian machine (root): system packages for the lab, and
# sparktui itself with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  for pkg in docker.io openssh-server iproute2 iptables busybox-static tmux python3-pip; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
