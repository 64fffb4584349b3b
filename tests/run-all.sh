#!/usr/bin/env bash
# Every test, as `make test` runs them: the tests on the devstack's services (tests/contract,
# tests/integration) in one pytest, and beside it, in a second pytest, the ones that need no
# service (tests/unit, tests/docs). The second mostly computes while the first mostly waits on
# the services, so together they take about as long as the first alone. Its output follows
# the first's; the exit code is non-zero when either failed.
# The first runs its test files in CACHESYNC_TEST_WORKERS pytest-xdist workers (default 2; 1:
# one process, no workers), each on a devstack of its own (tests/support/stacks.py): the one
# started here for the first worker, one the worker starts and stops itself for the second.
# Usage: tests/run-all.sh [pytest options for both runs]
set -uo pipefail
cd "$(dirname "$0")/.."
pytest="${BIN:-.venv/bin}/pytest"
log="$(mktemp -t cachesync-tests-without-services.XXXXXX)"
# The second also builds helm first (devstack/tools/helm.sh: a `go install` of a few minutes in
# a fresh clone, cached in .devstack/tools), which tests/integration/test_helm.py would
# otherwise wait for on the first's path; should it fail here, that test builds it again and
# says why.
{ devstack/tools/helm.sh >/dev/null || true
  exec "$pytest" -p no:cacheprovider --durations=20 "$@" tests/unit tests/docs; } >"$log" 2>&1 </dev/null &
pure=$!
trap 'kill "$pure" 2>/dev/null; rm -f "$log"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

workers="${CACHESYNC_TEST_WORKERS:-2}"
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile)
devstack/with-stack.sh "$pytest" -p no:cacheprovider --durations=40 "${parallel[@]}" "$@" \
  tests/contract tests/integration
services=$?
wait "$pure"
without=$?

echo
echo "======== tests/unit and tests/docs (run beside the tests above) ========"
cat "$log"
echo
echo "tests on the services: $([ $services -eq 0 ] && echo passed || echo "FAILED (exit $services)");" \
     "tests without services: $([ $without -eq 0 ] && echo passed || echo "FAILED (exit $without)")"
[ $services -eq 0 ] && [ $without -eq 0 ]
