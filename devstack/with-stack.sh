#!/usr/bin/env bash
# Run a command with the devstack up, then stop only the services this call started
# (a stack that was already running stays up). Used by `make demo|test|bench`.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
started=()
for service in mariadb redis kafka; do
  "$here/stack.sh" status 2>/dev/null | grep -Eq "^${service}[[:space:]]+running" || started+=("$service")
done
cleanup() {
  if [ ${#started[@]} -gt 0 ]; then "$here/stack.sh" down "${started[@]}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$here/stack.sh" up || exit $?
CACHESYNC_ENV_FILE="$("$here/stack.sh" env)" "$@"
