#!/usr/bin/env bash
# The devstack's Spark executor Python: a virtualenv made from BASE (the interpreter the
# project's venv was made from: PySpark wants the driver's Python version) holding only
# executor-requirements.txt (pyarrow, orjson, hiredis), never cachesync: the executors run
# what the driver ships, as on a real cluster whose workers have these libraries installed.
# Prints the Python to use; prints BASE (and warns) when the venv cannot be made, so the
# cluster still starts and the executors fall back to pickled rows.
#
#   devstack/spark/executor-python.sh BASE DIR
set -uo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BASE="$1" DIR="$2"
REQS="$SCRIPT_DIR/executor-requirements.txt"
PY="$DIR/bin/python"
want="$(sha256sum "$REQS" | cut -d' ' -f1)-$("$BASE" -c 'import sys; print(sys.version)' | head -1 | tr ' ' _)"

ready() { [ -x "$PY" ] && [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$want" ]; }

mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9                       # two `stack.sh up spark` at once make it once
if ! ready; then
  echo "devstack/spark: making the executors' Python in $DIR ($(grep -v '^#' "$REQS" | xargs))" >&2
  rm -rf "$DIR"
  if "$BASE" -m venv "$DIR" >&2 && "$PY" -m pip install -q --disable-pip-version-check -r "$REQS" >&2 </dev/null; then
    echo "$want" >"$DIR/.stamp"
  else
    echo "devstack/spark: WARNING: could not make $DIR; the executors run $BASE (no pyarrow: micro-batches reach them as pickled rows)" >&2
    rm -rf "$DIR"
    echo "$BASE"
    exit 0
  fi
fi
echo "$PY"
