#!/usr/bin/env bash
# cachesync local dev stack: MariaDB (binlog, GTID) + Redis + single-node Kafka (KRaft).
# No Docker; everything lives under ${CACHESYNC_DEVSTACK_DIR:-<repo>/.devstack}, loopback only.
#
#   devstack/stack.sh up      [service|variant ...]     start (default: mariadb redis kafka)
#   devstack/stack.sh down    [--wipe] [service ...]    stop (default: everything; keeps data unless --wipe)
#   devstack/stack.sh wipe                              stop everything and delete the data dir
#   devstack/stack.sh status                            one line per service and variant
#   devstack/stack.sh running                           the names of those running or starting
#   devstack/stack.sh env                               print the env file path
#   devstack/stack.sh promote mariadb-replica           make the replica a writable primary
# Variants (started only by name): kafka-sasl kafka-oauth kafka-noauto mariadb-tls redis-tls
# redis-cluster redis-cluster-tls redis-sentinel redis-aof mariadb-replica mariadb-twin spark; see devstack/README.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

ALL_SERVICES=(mariadb redis kafka)
# Extra services started only by name (`up kafka-sasl`), one file each under devstack/variants/.
VARIANTS=(kafka-sasl kafka-oauth kafka-noauto mariadb-tls redis-tls redis-cluster redis-cluster-tls redis-sentinel redis-aof mariadb-replica mariadb-twin spark)

MYSQL_PORT="${DEVSTACK_MYSQL_PORT:-13306}"
REDIS_PORT="${DEVSTACK_REDIS_PORT:-16379}"
KAFKA_PORT="${DEVSTACK_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${DEVSTACK_KAFKA_CONTROLLER_PORT:-19093}"

MYSQL_WAIT="${DEVSTACK_MYSQL_WAIT:-60}"
REDIS_WAIT="${DEVSTACK_REDIS_WAIT:-20}"
KAFKA_WAIT="${DEVSTACK_KAFKA_WAIT:-240}"   # a broker restart on a 2-core host at load 30 took 140 s
STOP_WAIT="${DEVSTACK_STOP_WAIT:-30}"
# 1: `up kafka` returns once the broker's port is open, without the metadata and topic checks
# (each starts a JVM tool: 2 CPU-seconds). For a restart whose caller checks readiness itself.
KAFKA_PORT_ONLY="${DEVSTACK_KAFKA_PORT_ONLY:-0}"

KAFKA_TOPICS=("cachesync.changes:6" "cachesync.dlq:3")

log() { echo "devstack: $*" >&2; }
die() { echo "devstack: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- paths
resolve_dir() {
  local d="${CACHESYNC_DEVSTACK_DIR:-$REPO_ROOT/.devstack}"
  case "$d" in /*) ;; *) d="$PWD/$d" ;; esac
  # normalise without requiring existence
  d="$(python3 -c 'import os,sys; print(os.path.normpath(sys.argv[1]))' "$d" 2>/dev/null || echo "$d")"
  case "$d" in /|"") die "refusing to use '$d' as data dir" ;; esac
  echo "$d"
}
DIR="$(resolve_dir)"
RUN="$DIR/run"
LOGS="$DIR/logs"
SECRETS="$DIR/secrets"
ENV_FILE="$DIR/env"
ENV_D="$DIR/env.d"                      # one KEY=VALUE file per running variant, appended to env
TLS_DIR="$DIR/tls"

MYSQL_BASE="$DIR/mariadb"
MYSQL_SOCKET="$MYSQL_BASE/mysqld.sock"
MYSQL_PID="$RUN/mariadb.pid"
MYSQL_LOG="$LOGS/mariadb.log"

REDIS_DIR="$DIR/redis"
REDIS_PID="$RUN/redis.pid"
REDIS_LOG="$LOGS/redis.log"

KAFKA_BASE="$DIR/kafka"
KAFKA_LIBS="$KAFKA_BASE/libs"
KAFKA_DATA="$KAFKA_BASE/data"
KAFKA_PROPS="$KAFKA_BASE/server.properties"
KAFKA_PID="$RUN/kafka.pid"
KAFKA_LOG="$KAFKA_BASE/server.log"      # log4j2 output
KAFKA_STDOUT="$LOGS/kafka.out"          # JVM stdout/stderr (GC, crashes)
KAFKA_POM="$SCRIPT_DIR/kafka/pom.xml"

ME="$(id -un)"
IS_ROOT=0; [ "$(id -u)" = 0 ] && IS_ROOT=1
SUDO=""
if [ "$IS_ROOT" = 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# mariadb admin account reachable over the unix socket without password:
# root (socket auth) when we are root, else the account mariadb-install-db made for --user.
if [ "$IS_ROOT" = 1 ]; then MYSQL_SOCKET_USER=root; else MYSQL_SOCKET_USER="$ME"; fi

# ---------------------------------------------------------------- helpers
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

read_pid() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }

# pid_alive PIDFILE PATTERN -> prints pid if process alive and its cmdline matches PATTERN
pid_alive() {
  local pid; pid="$(read_pid "$1")"
  [ -n "$pid" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2" || return 1
  fi
  echo "$pid"
}

svc_pidfile() { case "$1" in mariadb) echo "$MYSQL_PID";; redis) echo "$REDIS_PID";; kafka) echo "$KAFKA_PID";; esac; }
svc_pattern() { case "$1" in mariadb) echo "mariadbd";; redis) echo "redis-server";; kafka) echo "kafka.Kafka";; esac; }
svc_port()    { case "$1" in mariadb) echo "$MYSQL_PORT";; redis) echo "$REDIS_PORT";; kafka) echo "$KAFKA_PORT";; esac; }
svc_log()     { case "$1" in mariadb) echo "$MYSQL_LOG";; redis) echo "$REDIS_LOG";; kafka) echo "$KAFKA_LOG";; esac; }

fail_with_log() { # SERVICE MESSAGE
  local svc="$1"; shift
  echo "devstack: ERROR: $svc: $*" >&2
  local f files=("$(svc_log "$svc")")
  case "$svc" in
    kafka) files+=("$KAFKA_STDOUT") ;;
    mariadb) files+=("$LOGS/mariadb.out") ;;
  esac
  for f in "${files[@]}"; do
    if [ -s "$f" ]; then
      echo "----- last 40 lines of $f -----" >&2
      tail -n 40 "$f" >&2 || true
      echo "-----" >&2
    fi
  done
  exit 1
}

gen_secret() {
  openssl rand -hex 16 2>/dev/null || python3 -c 'import secrets; print(secrets.token_hex(16))'
}

ensure_secret() { # FILE
  if [ ! -s "$1" ]; then
    ( umask 077; gen_secret >"$1" )
    log "generated $(basename "$1") in $SECRETS"
  fi
  chmod 600 "$1"
}

ensure_dirs() {
  mkdir -p "$DIR" "$RUN" "$LOGS"
  ( umask 077; mkdir -p "$SECRETS" ); chmod 700 "$SECRETS"
}

# ---------------------------------------------------------------- install
package_needs() { # services/variants... -> the base pieces they need, one per line
  local s
  for s in "$@"; do
    case "$s" in
      mariadb-tls) echo mariadb; echo tls ;;
      mariadb-*) echo mariadb ;;
      kafka-sasl) echo kafka; echo tls ;;
      kafka-oauth) echo kafka ;;
      redis-tls) echo redis; echo tls ;;
      redis-*) echo redis ;;
      *) echo "$s" ;;
    esac
  done | sort -u
}

ensure_packages() { # services...
  local pkgs=() s
  for s in $(package_needs "$@"); do
    case "$s" in
      tls) command -v openssl >/dev/null || pkgs+=(openssl) ;;
      mariadb)
        if ! command -v mariadbd >/dev/null || ! command -v mariadb-install-db >/dev/null; then pkgs+=(mariadb-server); fi
        if ! command -v mariadb >/dev/null || ! command -v mariadb-admin >/dev/null; then pkgs+=(mariadb-client); fi ;;
      redis)
        if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then pkgs+=(redis-server); fi ;;
      kafka)
        command -v java >/dev/null || pkgs+=(openjdk-17-jre-headless)
        command -v mvn  >/dev/null || pkgs+=(maven) ;;
      spark) command -v java >/dev/null || pkgs+=(openjdk-17-jre-headless) ;;
    esac
  done
  [ "${#pkgs[@]}" -gt 0 ] || return 0
  # always install the full trio the first time any of them is missing (cheap, one apt run)
  local p want=()
  for p in mariadb-server mariadb-client redis-server; do
    case " ${pkgs[*]} " in *" $p "*) want+=("$p");; esac
  done
  for p in "${pkgs[@]}"; do case "$p" in mariadb-*|redis-server) ;; *) want+=("$p");; esac; done
  log "installing: apt-get install -y --no-install-recommends ${want[*]}"
  "$SCRIPT_DIR/tools/apt-install.sh" "$LOGS/apt.log" "${want[@]}" || die "apt-get failed"
  hash -r
}

ensure_kafka_libs() {
  local stamp="$KAFKA_LIBS/.pom.sha256" want
  want="$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && ls "$KAFKA_LIBS"/kafka_2.13-*.jar >/dev/null 2>&1; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found"
  local tmp="$KAFKA_BASE/libs.tmp"
  rm -rf "$tmp"; mkdir -p "$KAFKA_BASE"
  log "installing Kafka jars: mvn -q -B -f $KAFKA_POM dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$KAFKA_LIBS"
  if ! mvn -q -B -f "$KAFKA_POM" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$tmp" </dev/null >"$LOGS/mvn.log" 2>&1; then
    echo "----- last 40 lines of $LOGS/mvn.log -----" >&2; tail -n 40 "$LOGS/mvn.log" >&2
    die "maven failed to fetch Kafka jars"
  fi
  echo "$want" >"$tmp/.pom.sha256"
  rm -rf "$KAFKA_LIBS"; mv "$tmp" "$KAFKA_LIBS"
}

# ---------------------------------------------------------------- mariadb
mysql_at() { # SOCKET extra args...: the admin client over an instance's unix socket
  local sock="$1"; shift
  mariadb --no-defaults --protocol=socket --socket="$sock" -u"$MYSQL_SOCKET_USER" "$@"
}
mysql_sock() { mysql_at "$MYSQL_SOCKET" "$@"; }
mysql_ready_at() { mysql_at "$1" -N -e 'SELECT 1' </dev/null >/dev/null 2>&1; }
mysql_ready() { mysql_ready_at "$MYSQL_SOCKET"; }

mariadb_up() {
  mariadb_instance_up mariadb "$MYSQL_BASE" "$MYSQL_PORT" DEVSTACK_MYSQL_PORT 1
  mariadb_bootstrap
}

# mariadb_instance_up LABEL BASE PORT PORT-VARIABLE SERVER-ID [EXTRA-ARGS...]
# starts (or finds running) one MariaDB with its data, binlog and socket under BASE, pid file
# $RUN/LABEL.pid and logs $LOGS/LABEL.*; binlog ROW/FULL/FULL, GTID strict, on 127.0.0.1.
mariadb_instance_up() {
  local label="$1" base="$2" port="$3" portvar="$4" server_id="$5"; shift 5
  local data="$base/data" sock="$base/mysqld.sock" pidfile="$RUN/$label.pid" pid
  if pid="$(pid_alive "$pidfile" mariadbd)" && mysql_ready_at "$sock"; then
    local cur; cur="$(mysql_at "$sock" -N -e 'SELECT @@port' </dev/null 2>/dev/null || true)"
    [ "$cur" = "$port" ] || die "$label (pid $pid) is running on port $cur, not $port: run '$0 down $label' first"
    log "$label already running (pid $pid, port $port)"
    return 0
  fi
  if [ -n "${pid:-}" ]; then
    log "$label pid $pid alive but not answering yet; waiting"
  else
    port_open "$port" && die "port $port is in use by another process (set $portvar)"
    mkdir -p "$base" "$base/binlog"
    [ -d "$data/mysql" ] || mariadb_install_db "$label" "$data"
    local args=(
      --no-defaults
      --datadir="$data"
      --socket="$sock"
      --port="$port"
      --bind-address=127.0.0.1
      --skip-name-resolve
      --pid-file="$pidfile"
      --log-error="$LOGS/$label.log"
      --server-id="$server_id"
      --log-bin="$base/binlog/mysql-bin"
      --binlog-format=ROW
      --binlog-row-image=FULL
      --binlog-row-metadata=FULL
      --log-slave-updates
      --gtid-strict-mode=ON
      --binlog-expire-logs-seconds=86400
      --innodb-buffer-pool-size=256M
      --max-connections=300
      --character-set-server=utf8mb4
      --collation-server=utf8mb4_unicode_ci
      "$@"
    )
    [ "$IS_ROOT" = 1 ] && args+=(--user=root)
    rm -f "$pidfile"
    log "starting $label on 127.0.0.1:$port"
    setsid nohup mariadbd "${args[@]}" </dev/null >>"$LOGS/$label.out" 2>&1 &
    echo $! >"$pidfile.launch"
  fi
  local i=0
  until mysql_ready_at "$sock"; do
    i=$((i + 1))
    if [ "$i" -gt "$MYSQL_WAIT" ]; then mariadb_fail "$label" "not ready after ${MYSQL_WAIT}s"; fi
    local lp; lp="$(read_pid "$pidfile.launch")"
    if [ -n "$lp" ] && ! kill -0 "$lp" 2>/dev/null && ! pid_alive "$pidfile" mariadbd >/dev/null; then
      mariadb_fail "$label" "mariadbd exited during startup"
    fi
    sleep 1
  done
  rm -f "$pidfile.launch"
  log "$label ready (pid $(read_pid "$pidfile"), port $port)"
}

mariadb_install_db() { # LABEL DATADIR
  log "initialising MariaDB data dir $2"
  rm -rf "$2"; mkdir -p "$2"
  if ! mariadb-install-db --no-defaults --datadir="$2" --user="$ME" \
        --auth-root-authentication-method=socket --skip-test-db \
        </dev/null >"$LOGS/$1-install-db.log" 2>&1; then
    echo "----- $LOGS/$1-install-db.log -----" >&2; tail -n 40 "$LOGS/$1-install-db.log" >&2
    rm -rf "$2"
    die "mariadb-install-db failed"
  fi
}

mariadb_fail() { # LABEL MESSAGE: the main instance shows its logs the usual way
  if [ "$1" = mariadb ]; then fail_with_log mariadb "$2"; fi
  [ -s "$LOGS/$1.out" ] && { echo "----- last 20 lines of $LOGS/$1.out -----" >&2; tail -n 20 "$LOGS/$1.out" >&2; }
  show_log_and_die "$LOGS/$1.log" "$1: $2"
}

# the least-privilege account's SQL; NAME PASSWORD [REQUIRE-CLAUSE] (`REQUIRE SSL` for cachesync_tls)
cachesync_user_sql() {
  local u="'$1'@'127.0.0.1'" require="${3:+ $3}"
  cat <<SQL
CREATE USER IF NOT EXISTS $u IDENTIFIED BY '$2'$require;
ALTER USER $u IDENTIFIED BY '$2'$require;
REVOKE ALL PRIVILEGES, GRANT OPTION FROM $u;
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO $u;
GRANT SELECT ON demo.* TO $u;
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.* TO $u;
SQL
}

read_password() { # FILE: its content, refused if it could break out of an SQL string
  local p; p="$(cat "$1")"
  case "$p" in *"'"*|*"\\"*) die "$1 must not contain quotes/backslashes";; esac
  echo "$p"
}

mariadb_bootstrap() { # [CLIENT-FUNCTION]: users and databases, over the socket (default: mysql_sock)
  local client="${1:-mysql_sock}" ap cp
  ensure_secret "$SECRETS/admin.password"
  ensure_secret "$SECRETS/cachesync.password"
  ap="$(read_password "$SECRETS/admin.password")"; cp="$(read_password "$SECRETS/cachesync.password")"
  # SQL goes through stdin so passwords never appear in argv; not written to the binlog.
  if ! "$client" >"$LOGS/mariadb-bootstrap.log" 2>&1 <<SQL
SET SESSION sql_log_bin = 0;
CREATE DATABASE IF NOT EXISTS cachesync CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;

CREATE USER IF NOT EXISTS 'devadmin'@'127.0.0.1' IDENTIFIED BY '$ap';
ALTER USER 'devadmin'@'127.0.0.1' IDENTIFIED BY '$ap';
GRANT ALL PRIVILEGES ON *.* TO 'devadmin'@'127.0.0.1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'devadmin'@'localhost' IDENTIFIED BY '$ap';
ALTER USER 'devadmin'@'localhost' IDENTIFIED BY '$ap';
GRANT ALL PRIVILEGES ON *.* TO 'devadmin'@'localhost' WITH GRANT OPTION;

$(cachesync_user_sql cachesync "$cp")
FLUSH PRIVILEGES;
SQL
  then
    echo "----- $LOGS/mariadb-bootstrap.log -----" >&2; tail -n 20 "$LOGS/mariadb-bootstrap.log" >&2
    die "mariadb: creating users/databases failed"
  fi
}

# ---------------------------------------------------------------- redis
redis_ready() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null </dev/null)" = PONG ]; }

redis_up() {
  local pid
  if pid="$(pid_alive "$REDIS_PID" redis-server)"; then
    if redis_ready; then
      local rpid; rpid="$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info server </dev/null 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')"
      [ "$rpid" = "$pid" ] || die "redis (pid $pid) is not the server answering on port $REDIS_PORT (port changed?): run '$0 down redis' first"
      log "redis already running (pid $pid, port $REDIS_PORT)"; return 0
    fi
    grep -q -- "--port $REDIS_PORT\b\|:$REDIS_PORT\b" <(tr '\0' ' ' <"/proc/$pid/cmdline") ||
      die "redis (pid $pid) is running with a different port than $REDIS_PORT: run '$0 down redis' first"
  fi
  if [ -z "${pid:-}" ]; then
    port_open "$REDIS_PORT" && die "port $REDIS_PORT is in use by another process (set DEVSTACK_REDIS_PORT)"
    mkdir -p "$REDIS_DIR"
    rm -f "$REDIS_PID"
    log "starting redis on 127.0.0.1:$REDIS_PORT"
    if ! redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
          --daemonize yes --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --dir "$REDIS_DIR" \
          </dev/null >>"$REDIS_LOG" 2>&1; then
      fail_with_log redis "redis-server failed to start"
    fi
  fi
  local i=0
  until redis_ready; do
    i=$((i + 1))
    [ "$i" -gt "$((REDIS_WAIT * 4))" ] && fail_with_log redis "not answering PING after ${REDIS_WAIT}s"
    sleep 0.25
  done
  log "redis ready (pid $(read_pid "$REDIS_PID"), port $REDIS_PORT)"
}

# ---------------------------------------------------------------- kafka
kafka_tool() { # MAINCLASS args...
  local cls="$1"; shift
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2-tools.xml" \
    -cp "$KAFKA_LIBS/*" "$cls" "$@" </dev/null
}

kafka_render_config() {
  mkdir -p "$KAFKA_DATA"
  sed -e "s#@KAFKA_PORT@#$KAFKA_PORT#g" \
      -e "s#@KAFKA_CONTROLLER_PORT@#$KAFKA_CONTROLLER_PORT#g" \
      -e "s#@KAFKA_DATA_DIR@#$KAFKA_DATA#g" \
      "$SCRIPT_DIR/kafka/server.properties.in" >"$KAFKA_PROPS.tmp"
  mv "$KAFKA_PROPS.tmp" "$KAFKA_PROPS"
}

kafka_format() {
  if [ -f "$KAFKA_DATA/meta.properties" ]; then return 0; fi
  local cid_file="$KAFKA_BASE/cluster.id"
  if [ ! -s "$cid_file" ]; then
    kafka_tool kafka.tools.StorageTool random-uuid 2>>"$LOGS/kafka-tools.log" | tail -n 1 >"$cid_file.tmp"
    mv "$cid_file.tmp" "$cid_file"
  fi
  log "formatting Kafka storage (cluster id $(cat "$cid_file"))"
  if ! kafka_tool kafka.tools.StorageTool format -t "$(cat "$cid_file")" -c "$KAFKA_PROPS" \
        >>"$LOGS/kafka-tools.log" 2>&1; then
    echo "----- $LOGS/kafka-tools.log -----" >&2; tail -n 30 "$LOGS/kafka-tools.log" >&2
    die "kafka storage format failed"
  fi
}

# prints "topic partitions" lines for the cachesync topics; fails if the broker can't be queried
kafka_describe() { # [BOOTSTRAP [TOOL-ARGS...]]  (default: the plain broker)
  local bootstrap="${1:-127.0.0.1:$KAFKA_PORT}"; [ $# -gt 0 ] && shift
  timeout 60 java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2-tools.xml" \
    -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$bootstrap" "$@" --describe --if-exists --topic 'cachesync\..*' </dev/null \
    2>>"$LOGS/kafka-tools.log" \
  | awk '/^Topic:/ && /PartitionCount:/ { t=""; p=""; for (i=1;i<=NF;i++) { if ($i=="Topic:") t=$(i+1); if ($i=="PartitionCount:") p=$(i+1) } print t, p }'
  return "${PIPESTATUS[0]}"
}

kafka_ensure_topics() { # [BOOTSTRAP [TOOL-ARGS...]]
  local bootstrap="${1:-127.0.0.1:$KAFKA_PORT}"; [ $# -gt 0 ] && shift
  local desc spec name parts have
  desc="$(kafka_describe "$bootstrap" "$@")" || fail_with_log kafka "metadata request (TopicCommand --describe) failed; see $LOGS/kafka-tools.log"
  for spec in "${KAFKA_TOPICS[@]}"; do
    name="${spec%%:*}"; parts="${spec##*:}"
    have="$(awk -v t="$name" '$1==t {print $2}' <<<"$desc")"
    if [ -z "$have" ]; then
      log "creating topic $name (partitions=$parts, replication=1)"
      kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" "$@" \
        --create --if-not-exists --topic "$name" --partitions "$parts" --replication-factor 1 \
        >>"$LOGS/kafka-tools.log" 2>&1 || fail_with_log kafka "creating topic $name failed; see $LOGS/kafka-tools.log"
    elif [ "$have" != "$parts" ]; then
      log "WARNING: topic $name has $have partitions (expected $parts); leaving it (use 'wipe' to reset)"
    fi
  done
}

kafka_up() {
  local pid
  command -v java >/dev/null || die "java not found (need Java 17+)"
  ensure_kafka_libs
  if pid="$(pid_alive "$KAFKA_PID" kafka.Kafka)" &&
     ! grep -q "^advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT\$" "$KAFKA_PROPS" 2>/dev/null; then
    die "kafka (pid $pid) is running with a different port than $KAFKA_PORT: run '$0 down kafka' first"
  fi
  if [ -n "${pid:-}" ] && port_open "$KAFKA_PORT"; then
    log "kafka already running (pid $pid, port $KAFKA_PORT)"
  else
    if [ -z "${pid:-}" ]; then
      port_open "$KAFKA_PORT" && die "port $KAFKA_PORT is in use by another process (set DEVSTACK_KAFKA_PORT)"
      port_open "$KAFKA_CONTROLLER_PORT" && die "port $KAFKA_CONTROLLER_PORT is in use by another process (set DEVSTACK_KAFKA_CONTROLLER_PORT)"
      kafka_render_config
      kafka_format
      log "starting kafka on 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT)"
      : >"$KAFKA_STDOUT"
      setsid nohup java -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$KAFKA_BASE" \
        -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2.xml" \
        -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
        </dev/null >>"$KAFKA_STDOUT" 2>&1 &
      pid=$!
      echo "$pid" >"$KAFKA_PID"
    fi
    local i=0 start=$SECONDS
    until port_open "$KAFKA_PORT"; do
      kill -0 "$pid" 2>/dev/null || { rm -f "$KAFKA_PID"; fail_with_log kafka "broker exited during startup"; }
      [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && fail_with_log kafka "port $KAFKA_PORT not open after ${KAFKA_WAIT}s"
      sleep 1
    done
    if [ "$KAFKA_PORT_ONLY" = 1 ]; then
      log "kafka port open (pid $pid, port $KAFKA_PORT); DEVSTACK_KAFKA_PORT_ONLY=1: no checks"
      return 0
    fi
    # port open; now wait until a metadata request succeeds
    until kafka_describe >/dev/null; do
      kill -0 "$pid" 2>/dev/null || { rm -f "$KAFKA_PID"; fail_with_log kafka "broker exited during startup"; }
      [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && fail_with_log kafka "metadata request still failing after ${KAFKA_WAIT}s"
      sleep 2
      i=$((i + 1))
    done
    log "kafka ready (pid $pid, port $KAFKA_PORT)"
  fi
  kafka_ensure_topics
}

# ---------------------------------------------------------------- env file
write_env() {
  ensure_dirs
  cat >"$ENV_FILE.tmp" <<EOF
CACHESYNC_MYSQL_HOST=127.0.0.1
CACHESYNC_MYSQL_PORT=$MYSQL_PORT
CACHESYNC_MYSQL_USER=cachesync
CACHESYNC_MYSQL_PASSWORD_FILE=$SECRETS/cachesync.password
CACHESYNC_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT
CACHESYNC_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
DEVSTACK_DIR=$DIR
DEVSTACK_MYSQL_ADMIN_USER=devadmin
DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE=$SECRETS/admin.password
DEVSTACK_MYSQL_SOCKET=$MYSQL_SOCKET
EOF
  local f
  for f in "$ENV_D"/*.env; do if [ -f "$f" ]; then cat "$f" >>"$ENV_FILE.tmp"; fi; done
  mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------- down / status
stop_pid() { # LABEL PIDFILE PATTERN: SIGTERM, SIGKILL after STOP_WAIT; 0 if it was not running
  local label="$1" pidfile="$2" pattern="$3" pid
  if ! pid="$(pid_alive "$pidfile" "$pattern")"; then
    rm -f "$pidfile" "$pidfile.launch"
    log "$label not running"
    return 0
  fi
  log "stopping $label (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local i=0 limit=$((STOP_WAIT * 4))
  while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt "$limit" ]; then
      log "$label did not stop within ${STOP_WAIT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.25
  done
  rm -f "$pidfile" "$pidfile.launch"
  log "$label stopped"
}

stop_service() { # SERVICE
  stop_pid "$1" "$(svc_pidfile "$1")" "$(svc_pattern "$1")"
  [ "$1" = mariadb ] && rm -f "$MYSQL_SOCKET" "$MYSQL_SOCKET.lock" 2>/dev/null || true
}

status_line() { # SERVICE
  local svc="$1" pid port state
  port="$(svc_port "$svc")"
  if pid="$(pid_alive "$(svc_pidfile "$svc")" "$(svc_pattern "$svc")")"; then
    if port_open "$port"; then state=running; else state=starting; fi
  else
    pid="-"; state=stopped
    port_open "$port" && state="stopped (port in use by another process)"
  fi
  printf '%-8s %-8s pid=%-8s port=%s\n' "$svc" "$state" "$pid" "$port"
}

# ---------------------------------------------------------------- variants
for f in "$SCRIPT_DIR"/variants/*.sh; do . "$f"; done

# ---------------------------------------------------------------- main
usage() {
  awk 'NR == 1 { next } !/^#/ { exit } { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"   # the header comment
}

is_variant() { local v; for v in "${VARIANTS[@]}"; do [ "$1" = "$v" ] && return 0; done; return 1; }

parse_services() { # DEFAULT(base|all) args... -> SERVICES array
  local default="$1"; shift
  SERVICES=()
  local a s ok
  for a in "$@"; do
    ok=0
    for s in "${ALL_SERVICES[@]}" "${VARIANTS[@]}"; do [ "$a" = "$s" ] && ok=1; done
    [ "$ok" = 1 ] || die "unknown service '$a' (expected: ${ALL_SERVICES[*]} ${VARIANTS[*]})"
    SERVICES+=("$a")
  done
  if [ "${#SERVICES[@]}" -eq 0 ]; then
    if [ "$default" = all ]; then SERVICES=("${VARIANTS[@]}" "${ALL_SERVICES[@]}")
    else SERVICES=("${ALL_SERVICES[@]}"); fi
  fi
}

# stop dependants before the services they use
STOP_ORDER=(spark mariadb-twin mariadb-replica redis-aof redis-sentinel redis-cluster-tls redis-cluster redis-tls mariadb-tls kafka-noauto kafka-oauth kafka-sasl kafka redis mariadb)

cmd="${1:-}"; [ $# -gt 0 ] && shift
case "$cmd" in
  up)
    parse_services base "$@"
    ensure_dirs
    ensure_packages "${SERVICES[@]}"
    for s in "${SERVICES[@]}"; do
      if is_variant "$s"; then variant_up "$s"; else "${s}_up"; fi
    done
    write_env
    log "env file: $ENV_FILE"
    ;;
  down)
    wipe=0; args=()
    for a in "$@"; do if [ "$a" = --wipe ]; then wipe=1; else args+=("$a"); fi; done
    parse_services all "${args[@]+"${args[@]}"}"
    if [ "$wipe" = 1 ]; then SERVICES=("${VARIANTS[@]}" "${ALL_SERVICES[@]}"); fi
    named="${#args[@]}"
    for s in "${STOP_ORDER[@]}"; do
      case " ${SERVICES[*]} " in *" $s "*) ;; *) continue;; esac
      if ! is_variant "$s"; then stop_service "$s"
      # a plain `down` stops the variants that are up, without a line for every other one
      elif [ "$named" -gt 0 ] || variant_active "$s"; then variant_down "$s"; fi
    done
    if [ "$wipe" = 1 ] && [ -d "$DIR" ]; then log "deleting $DIR"; rm -rf "$DIR"
    elif [ -f "$ENV_FILE" ]; then write_env; fi
    ;;
  wipe)
    "${BASH_SOURCE[0]}" down --wipe
    ;;
  status)
    for s in "${ALL_SERVICES[@]}"; do status_line "$s"; done
    for s in "${VARIANTS[@]}"; do variant_status "$s"; done
    ;;
  running)
    "$0" status | awk '$2 == "running" || $2 == "starting" || $2 == "degraded" {print $1}'
    ;;
  env)
    echo "$ENV_FILE"
    ;;
  promote)
    [ "${1:-}" = mariadb-replica ] || die "usage: $0 promote mariadb-replica"
    ensure_dirs
    mariadb_replica_promote
    write_env
    ;;
  ""|-h|--help|help)
    usage
    ;;
  *)
    usage >&2; die "unknown command '$cmd'"
    ;;
esac
