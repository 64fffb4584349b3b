#!/usr/bin/env bash
# Install Debian packages without starting their system services (cachesync never uses them):
# `devstack/tools/apt-install.sh LOGFILE PACKAGE...`. Root, or sudo without a password; apt's
# output goes to LOGFILE, whose last lines are shown if apt fails. Used by devstack/stack.sh
# (MariaDB, Redis, Java, Maven) and by `make test` (devstack/tools/test-tools.sh).
set -euo pipefail
logfile="$1"; shift
[ "$#" -gt 0 ] || exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; else
    echo "missing packages ($*) and not root / no sudo: install them, e.g." \
         "apt-get install -y --no-install-recommends $*" >&2
    exit 1
  fi
fi
command -v apt-get >/dev/null || { echo "missing packages ($*) and no apt-get" >&2; exit 1; }
mkdir -p "$(dirname "$logfile")"
# keep the packages from starting the SYSTEM services
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# temporary, created by cachesync devstack/tools/apt-install.sh\nexit 101\n' \
    | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod 755 /usr/sbin/policy-rc.d
  made_policy=1
fi
rc=0
{
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
} </dev/null >"$logfile" 2>&1 || rc=$?
if [ "$made_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
if [ "$rc" != 0 ]; then
  echo "----- last 40 lines of $logfile -----" >&2; tail -n 40 "$logfile" >&2
  echo "apt-get failed (rc=$rc)" >&2
  exit "$rc"
fi
