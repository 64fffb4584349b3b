#!/usr/bin/env bash
# The programs the test suite runs besides the devstack's services, installed when missing
# (Debian packages): promtool checks the shipped Prometheus alert rules (package prometheus,
# tests/unit/test_alerts.py; the server draws the monitoring picture, tests/integration/
# test_bench_dashboard.py); Chromium renders the docs site headless (tests/docs); Graphviz's dot
# draws the docs' diagrams (tests/docs/test_diagrams.py); Go builds go-mysql's reader of the
# shared real binlog files (tests/support/gomysql.py): the go on PATH when it is new enough,
# else Go from the Go module proxy into build/go/ (go-toolchain.py). `make test`
# runs this before the tests, as `devstack/stack.sh up` installs MariaDB and Redis.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/go-toolchain.py" >/dev/null
missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
command -v dot >/dev/null || missing+=(graphviz)
[ "${#missing[@]}" -gt 0 ] || exit 0
echo "test tools: installing ${missing[*]} (apt-get)" >&2
"$here/apt-install.sh" "${CACHESYNC_DEVSTACK_DIR:-$here/../../.devstack}/logs/apt-test-tools.log" "${missing[@]}"
hash -r
command -v promtool >/dev/null || { echo "test tools: promtool still missing" >&2; exit 1; }
command -v dot >/dev/null || { echo "test tools: dot (graphviz) still missing" >&2; exit 1; }
