# Sourced by devstack/stack.sh: variant mariadb-tls, a second MariaDB (same binlog settings,
# server-id 3) that serves TLS with the devstack CA's server certificate, and the account
# `cachesync_tls@127.0.0.1`: the cachesync account's grants plus REQUIRE SSL. The accounts of
# the plain MariaDB (devadmin, cachesync) exist on it too. A separate server, because a TLS
# capable server makes PyMySQL (1.2: TLS "preferred") encrypt every connection, and the
# default stack's clients and benchmarks must stay as they are.
MYSQL_TLS_PORT="${DEVSTACK_MYSQL_TLS_PORT:-$((MYSQL_PORT + 2))}"   # 13308
MYSQL_TLS_BASE="$DIR/mariadb-tls"
MYSQL_TLS_USER=cachesync_tls

mariadb_tls_procs() { echo "$RUN/mariadb-tls.pid mariadbd $MYSQL_TLS_PORT"; }

mysql_tls_sock() { mysql_at "$MYSQL_TLS_BASE/mysqld.sock" "$@"; }

mariadb_tls_env() {
  cat <<EOF
DEVSTACK_MYSQL_TLS_HOST=127.0.0.1
DEVSTACK_MYSQL_TLS_PORT=$MYSQL_TLS_PORT
DEVSTACK_MYSQL_TLS_USER=$MYSQL_TLS_USER
DEVSTACK_MYSQL_TLS_PASSWORD_FILE=$SECRETS/$MYSQL_TLS_USER.password
DEVSTACK_MYSQL_TLS_SOCKET=$MYSQL_TLS_BASE/mysqld.sock
DEVSTACK_MYSQL_SSL_CA=$TLS_DIR/ca.crt
DEVSTACK_MYSQL_SSL_CERT=$TLS_DIR/client.crt
DEVSTACK_MYSQL_SSL_KEY=$TLS_DIR/client.key
EOF
}

mariadb_tls_up() {
  tls_ensure
  mariadb_instance_up mariadb-tls "$MYSQL_TLS_BASE" "$MYSQL_TLS_PORT" DEVSTACK_MYSQL_TLS_PORT 3 \
    --ssl-ca="$TLS_DIR/ca.crt" --ssl-cert="$TLS_DIR/server.crt" --ssl-key="$TLS_DIR/server.key"
  [ "$(mysql_tls_sock -N -e "SELECT @@have_ssl" </dev/null 2>/dev/null)" = YES ] ||
    show_log_and_die "$LOGS/mariadb-tls.log" "mariadb-tls: the server did not enable TLS"
  mariadb_bootstrap mysql_tls_sock
  ensure_secret "$SECRETS/$MYSQL_TLS_USER.password"
  local tp; tp="$(read_password "$SECRETS/$MYSQL_TLS_USER.password")"
  if ! mysql_tls_sock >"$LOGS/mariadb-tls-bootstrap.log" 2>&1 <<SQL
SET SESSION sql_log_bin = 0;
$(cachesync_user_sql "$MYSQL_TLS_USER" "$tp" "REQUIRE SSL")
FLUSH PRIVILEGES;
SQL
  then
    show_log_and_die "$LOGS/mariadb-tls-bootstrap.log" "mariadb-tls: creating $MYSQL_TLS_USER failed"
  fi
  log "mariadb-tls ready ($MYSQL_TLS_USER REQUIRE SSL on 127.0.0.1:$MYSQL_TLS_PORT)"
}
