#!/usr/bin/env bash
# Run a command with the devstack up, then stop only what this call started: the base
# services that were not running before, and any variant (kafka-sasl, redis-cluster, ...)
# that the command started (tests start variants by name). What was already running stays up.
# Used by `make demo|test|bench`.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
running() { "$here/stack.sh" running 2>/dev/null; }
before=" $(running | tr '\n' ' ') "
cleanup() {
  local service stop=()
  for service in mariadb redis kafka $(running | tr '\n' ' '); do
    case "$before" in *" $service "*) ;; *) case " ${stop[*]-} " in *" $service "*) ;; *) stop+=("$service");; esac;; esac
  done
  if [ ${#stop[@]} -gt 0 ]; then "$here/stack.sh" down "${stop[@]}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$here/stack.sh" up || exit $?
CACHESYNC_ENV_FILE="$("$here/stack.sh" env)" "$@"
