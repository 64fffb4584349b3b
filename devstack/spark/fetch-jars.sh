#!/usr/bin/env bash
# Fetch the jars the Spark engine needs (Kafka connector matching the installed pyspark,
# MariaDB JDBC driver) with Maven into <devstack dir>/spark/jars, once per pom + version.
#
#   devstack/spark/fetch-jars.sh [PYTHON]      PYTHON: the interpreter that has pyspark
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
PYTHON="${1:-$REPO_ROOT/.venv/bin/python}"
DIR="${CACHESYNC_DEVSTACK_DIR:-$REPO_ROOT/.devstack}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
JARS="$DIR/spark/jars"
POM="$SCRIPT_DIR/pom.xml"

log() { echo "devstack/spark: $*" >&2; }

version="$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)')" ||
  { log "ERROR: pyspark is not installed for $PYTHON (pip install -e '.[spark]')"; exit 1; }
want="$(cat "$POM" "$SCRIPT_DIR/settings.xml" | sha256sum | cut -d' ' -f1)-$version"
if [ -f "$JARS/.stamp" ] && [ "$(cat "$JARS/.stamp")" = "$want" ]; then
  exit 0
fi
if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  # a fresh CI machine: the same packages devstack/stack.sh installs for Kafka
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || { log "ERROR: need java 17 and mvn (no apt-get here)"; exit 1; }
  log "installing openjdk-17-jre-headless maven"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openjdk-17-jre-headless maven </dev/null >/dev/null
fi
mkdir -p "$DIR/spark"
tmp="$DIR/spark/jars.tmp"
rm -rf "$tmp"
log "fetching Spark $version jars: mvn dependency:copy-dependencies -> $JARS"
if ! mvn -q -B -s "$SCRIPT_DIR/settings.xml" -f "$POM" dependency:copy-dependencies \
      -Dspark.version="$version" -DincludeScope=runtime -DoutputDirectory="$tmp" \
      </dev/null >"$DIR/spark/mvn.log" 2>&1; then
  tail -n 20 "$DIR/spark/mvn.log" >&2
  log "ERROR: maven could not fetch the jars for pyspark $version (see $DIR/spark/mvn.log)"
  exit 1
fi
echo "$want" >"$tmp/.stamp"
rm -rf "$JARS"; mv "$tmp" "$JARS"
log "$(ls "$JARS" | wc -l) jars in $JARS"
