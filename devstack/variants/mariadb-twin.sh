# Sourced by devstack/stack.sh: variant mariadb-twin, a second, independent MariaDB with the
# main one's identity: server-id 1, GTID domain 0, the same binlog settings, the same accounts
# (devadmin, cachesync). Its GTIDs (0-1-N) collide with the main server's, as two clusters'
# do when both run on the defaults (or two MySQL servers cloned from one data directory):
# tests feed both into one topic with different `source.id`s.
MYSQL_TWIN_PORT="${DEVSTACK_MYSQL_TWIN_PORT:-$((MYSQL_PORT + 3))}"   # 13309
MYSQL_TWIN_BASE="$DIR/mariadb-twin"

mariadb_twin_procs() { echo "$RUN/mariadb-twin.pid mariadbd $MYSQL_TWIN_PORT"; }

mysql_twin_sock() { mysql_at "$MYSQL_TWIN_BASE/mysqld.sock" "$@"; }

mariadb_twin_env() {
  cat <<EOT
DEVSTACK_MYSQL_TWIN_HOST=127.0.0.1
DEVSTACK_MYSQL_TWIN_PORT=$MYSQL_TWIN_PORT
DEVSTACK_MYSQL_TWIN_SOCKET=$MYSQL_TWIN_BASE/mysqld.sock
EOT
}

mariadb_twin_up() {
  mariadb_instance_up mariadb-twin "$MYSQL_TWIN_BASE" "$MYSQL_TWIN_PORT" DEVSTACK_MYSQL_TWIN_PORT 1
  mariadb_bootstrap mysql_twin_sock
  log "mariadb-twin ready (server-id 1, domain 0, like the main server; 127.0.0.1:$MYSQL_TWIN_PORT)"
}
