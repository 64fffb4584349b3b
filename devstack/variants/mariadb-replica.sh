# Sourced by devstack/stack.sh: variant mariadb-replica, a second MariaDB (server-id 2, the
# same binlog settings, log_slave_updates, GTID strict, read_only) replicating from the
# devstack MariaDB by GTID (MASTER_USE_GTID=slave_pos) as `repl@127.0.0.1`.
#
# It is seeded from a consistent dump of the primary (every database but the system ones,
# taken with --single-transaction --master-data --gtid), so it starts at the primary's GTID
# position; the accounts (devadmin, cachesync, same passwords) are made on it as on the primary.
# `stack.sh promote mariadb-replica` stops replication and makes it writable (a failover);
# the next `up mariadb-replica` rebuilds a promoted replica from the primary.
MYSQL_REPLICA_PORT="${DEVSTACK_MYSQL_REPLICA_PORT:-$((MYSQL_PORT + 1))}"   # 13307
MYSQL_REPLICA_BASE="$DIR/mariadb-replica"
MYSQL_REPLICA_SEEDED="$MYSQL_REPLICA_BASE/seeded"     # replication configured
MYSQL_REPLICA_PROMOTED="$MYSQL_REPLICA_BASE/promoted" # no longer a replica

mariadb_replica_procs() { echo "$RUN/mariadb-replica.pid mariadbd $MYSQL_REPLICA_PORT"; }

mysql_replica_sock() { mysql_at "$MYSQL_REPLICA_BASE/mysqld.sock" "$@"; }

mariadb_replica_env() {
  cat <<EOF
DEVSTACK_MYSQL_REPLICA_HOST=127.0.0.1
DEVSTACK_MYSQL_REPLICA_PORT=$MYSQL_REPLICA_PORT
DEVSTACK_MYSQL_REPLICA_SOCKET=$MYSQL_REPLICA_BASE/mysqld.sock
EOF
}

mariadb_replica_up() {
  mariadb_up
  # never seeded, seeding failed half-way, or promoted since: start afresh
  if [ -f "$MYSQL_REPLICA_PROMOTED" ] || [ ! -f "$MYSQL_REPLICA_SEEDED" ]; then
    [ -f "$MYSQL_REPLICA_PROMOTED" ] && log "mariadb-replica was promoted; rebuilding it as a replica of the primary"
    if variant_active mariadb-replica; then variant_down mariadb-replica; fi
    rm -rf "$MYSQL_REPLICA_BASE"
  fi
  mariadb_instance_up mariadb-replica "$MYSQL_REPLICA_BASE" "$MYSQL_REPLICA_PORT" DEVSTACK_MYSQL_REPLICA_PORT 2 \
    --read-only=ON --relay-log="$MYSQL_REPLICA_BASE/relay/relay-bin"
  [ -f "$MYSQL_REPLICA_SEEDED" ] || mariadb_replica_seed
  wait_until "$MYSQL_WAIT" "mariadb-replica replication threads" mariadb_replica_running ||
    show_log_and_die "$LOGS/mariadb-replica.log" "mariadb-replica: replication is not running ($(mariadb_replica_error))"
  log "mariadb-replica ready (127.0.0.1:$MYSQL_REPLICA_PORT replicating from $MYSQL_PORT)"
}

mariadb_replica_seed() { # dump the primary into the fresh replica and start replicating
  local dump="$MYSQL_REPLICA_BASE/seed.sql" dbs pos rp
  ensure_secret "$SECRETS/repl.password"
  rp="$(read_password "$SECRETS/repl.password")"
  mysql_sock >"$LOGS/mariadb-replica-seed.log" 2>&1 <<SQL || show_log_and_die "$LOGS/mariadb-replica-seed.log" "mariadb-replica: creating repl on the primary failed"
SET SESSION sql_log_bin = 0;
CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY '$rp';
ALTER USER 'repl'@'127.0.0.1' IDENTIFIED BY '$rp';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';
SQL
  dbs="$(mysql_sock -N -e "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('mysql','information_schema','performance_schema','sys')" </dev/null)"
  log "mariadb-replica: seeding from a dump of the primary ($(echo "$dbs" | wc -w) databases)"
  mkdir -p "$MYSQL_REPLICA_BASE/relay"
  # shellcheck disable=SC2086  # one word per database name
  mariadb_replica_dump "$dump" $dbs ||
    show_log_and_die "$LOGS/mariadb-replica-seed.log" "mariadb-replica: dumping the primary failed"
  pos="$(sed -n "s/^-- SET GLOBAL gtid_slave_pos='\(.*\)';$/\1/p" "$dump")"
  { echo "SET SESSION sql_log_bin = 0;"; cat "$dump"; } | mysql_replica_sock >>"$LOGS/mariadb-replica-seed.log" 2>&1 ||
    show_log_and_die "$LOGS/mariadb-replica-seed.log" "mariadb-replica: loading the dump failed"
  rm -f "$dump"
  mariadb_bootstrap mysql_replica_sock
  mysql_replica_sock >>"$LOGS/mariadb-replica-seed.log" 2>&1 <<SQL || show_log_and_die "$LOGS/mariadb-replica-seed.log" "mariadb-replica: starting replication failed"
SET GLOBAL gtid_slave_pos = '$pos';
CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$MYSQL_PORT, MASTER_USER='repl',
  MASTER_PASSWORD='$rp', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
START SLAVE;
SQL
  touch "$MYSQL_REPLICA_SEEDED"
  log "mariadb-replica: replicating from 127.0.0.1:$MYSQL_PORT from GTID position '${pos}'"
}

mariadb_replica_dump() { # FILE DB...: a consistent dump of the primary's DBs into FILE
  # The dump only reads, so a failed one is taken again: mariadb-dump 10.11 has been seen to
  # die of a segmentation fault once in a test run, on a primary the next attempt dumped fine.
  local dump="$1" attempt rc=0; shift
  for attempt in 1 2 3; do
    ( umask 077; mariadb-dump --no-defaults --protocol=socket --socket="$MYSQL_SOCKET" -u"$MYSQL_SOCKET_USER" \
        --single-transaction --master-data=2 --gtid --routines --events --triggers --databases "$@" \
        </dev/null >"$dump" 2>>"$LOGS/mariadb-replica-seed.log" ) && return 0
    rc=$?
    log "mariadb-replica: mariadb-dump exited $rc (attempt $attempt of 3)$([ "$rc" -gt 128 ] && echo ", signal $((rc - 128))")"
  done
  return "$rc"
}

mariadb_replica_status_field() { # FIELD of SHOW SLAVE STATUS
  mysql_replica_sock -e 'SHOW SLAVE STATUS\G' </dev/null 2>/dev/null | sed -n "s/^ *$1: //p"
}

mariadb_replica_running() {
  [ "$(mariadb_replica_status_field Slave_IO_Running)" = Yes ] &&
    [ "$(mariadb_replica_status_field Slave_SQL_Running)" = Yes ]
}

mariadb_replica_error() {
  echo "IO: $(mariadb_replica_status_field Last_IO_Error) SQL: $(mariadb_replica_status_field Last_SQL_Error)"
}

mariadb_replica_promote() { # failover: the replica stops replicating and takes writes
  mysql_ready_at "$MYSQL_REPLICA_BASE/mysqld.sock" || die "mariadb-replica is not running: '$0 up mariadb-replica' first"
  mysql_replica_sock -e "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0;" </dev/null ||
    die "mariadb-replica: promotion failed"
  touch "$MYSQL_REPLICA_PROMOTED"
  log "mariadb-replica promoted: writable primary on 127.0.0.1:$MYSQL_REPLICA_PORT (GTID $(mysql_replica_sock -N -e 'SELECT @@gtid_current_pos' </dev/null))"
}
