# Sourced by devstack/stack.sh: variant kafka-sasl, a second single-node KRaft broker whose
# only client listener is SASL_SSL (server certificate from the devstack CA), offering
# SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN. Users: `cachesync` (the client) and `admin`
# (inter-broker and the tools). SCRAM credentials go into the metadata when the storage is
# formatted (`kafka-storage format --add-scram`), so they exist before the broker first starts.
# A second process rather than a listener on the plain broker: starting it never restarts
# the broker the rest of the suite uses.
KSASL_PORT="${DEVSTACK_KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}"                        # 19094
KSASL_CONTROLLER_PORT="${DEVSTACK_KAFKA_SASL_CONTROLLER_PORT:-$((KAFKA_PORT + 3))}"  # 19095
KSASL_BASE="$DIR/kafka-sasl"
KSASL_DATA="$KSASL_BASE/data"
KSASL_PROPS="$KSASL_BASE/server.properties"   # holds the PLAIN user list: mode 600
KSASL_ADMIN_PROPS="$KSASL_BASE/admin.properties"
KSASL_PID="$RUN/kafka-sasl.pid"
KSASL_STDOUT="$LOGS/kafka-sasl.out"
KSASL_USER=cachesync

kafka_sasl_procs() { echo "$KSASL_PID kafka.Kafka $KSASL_PORT"; }

kafka_sasl_env() {
  cat <<EOF
DEVSTACK_KAFKA_SASL_BOOTSTRAP_SERVERS=127.0.0.1:$KSASL_PORT
DEVSTACK_KAFKA_SASL_SECURITY_PROTOCOL=SASL_SSL
DEVSTACK_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
DEVSTACK_KAFKA_SASL_MECHANISMS=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
DEVSTACK_KAFKA_SASL_USERNAME=$KSASL_USER
DEVSTACK_KAFKA_SASL_PASSWORD_FILE=$SECRETS/kafka-cachesync.password
DEVSTACK_KAFKA_SSL_CAFILE=$TLS_DIR/ca.crt
DEVSTACK_KAFKA_SSL_TRUSTSTORE_FILE=$TLS_DIR/truststore.p12
DEVSTACK_KAFKA_SSL_TRUSTSTORE_PASSWORD_FILE=$TLS_STORE_PASSWORD_FILE
DEVSTACK_KAFKA_SASL_ADMIN_CONFIG_FILE=$KSASL_ADMIN_PROPS
EOF
}

# the listener's security settings; secrets are read from the files here, never passed in argv
kafka_sasl_security_props() {
  local store ap cp
  store="$(cat "$TLS_STORE_PASSWORD_FILE")"
  ap="$(cat "$SECRETS/kafka-admin.password")"; cp="$(cat "$SECRETS/kafka-cachesync.password")"
  cat <<EOF
listeners=SASL_SSL://127.0.0.1:$KSASL_PORT,CONTROLLER://127.0.0.1:$KSASL_CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$KSASL_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@127.0.0.1:$KSASL_CONTROLLER_PORT
inter.broker.listener.name=SASL_SSL
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$ap";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$ap" user_admin="$ap" user_$KSASL_USER="$cp";
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/server.p12
ssl.keystore.password=$store
ssl.key.password=$store
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS_DIR/truststore.p12
ssl.truststore.password=$store
ssl.client.auth=none
EOF
}

kafka_sasl_render_config() {
  mkdir -p "$KSASL_DATA"
  { # the plain broker's template minus what the SASL broker sets itself
    grep -vE '^(listeners|advertised\.listeners|listener\.security\.protocol\.map|controller\.quorum\.voters|inter\.broker\.listener\.name|log\.dirs)=' \
      "$SCRIPT_DIR/kafka/server.properties.in"
    echo "log.dirs=$KSASL_DATA"
    kafka_sasl_security_props
  } | write_private "$KSASL_PROPS"
  write_private "$KSASL_ADMIN_PROPS" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(cat "$SECRETS/kafka-admin.password")";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
EOF
}

kafka_sasl_format() { # once; the SCRAM users go in through a java @argfile, so not in argv
  [ -f "$KSASL_DATA/meta.properties" ] && return 0
  local args="$KSASL_BASE/format.args" cid
  cid="$(kafka_tool kafka.tools.StorageTool random-uuid 2>>"$LOGS/kafka-tools.log" | tail -n 1)"
  ( umask 077; printf '%s\n' kafka.tools.StorageTool format -t "$cid" -c "$KSASL_PROPS" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$(cat "$SECRETS/kafka-admin.password")]" \
      --add-scram "SCRAM-SHA-512=[name=$KSASL_USER,password=$(cat "$SECRETS/kafka-cachesync.password")]" \
      --add-scram "SCRAM-SHA-256=[name=$KSASL_USER,password=$(cat "$SECRETS/kafka-cachesync.password")]" \
      | sed 's/.*/"&"/' >"$args" )
  log "kafka-sasl: formatting storage with SCRAM users admin and $KSASL_USER"
  local rc=0
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2-tools.xml" -cp "$KAFKA_LIBS/*" "@$args" \
    </dev/null >>"$LOGS/kafka-tools.log" 2>&1 || rc=$?
  rm -f "$args"
  [ "$rc" = 0 ] || show_log_and_die "$LOGS/kafka-tools.log" "kafka-sasl: storage format failed"
}

kafka_sasl_up() {
  local pid
  command -v java >/dev/null || die "java not found (need Java 17+)"
  ensure_kafka_libs
  tls_ensure
  ensure_secret "$SECRETS/kafka-admin.password"
  ensure_secret "$SECRETS/kafka-cachesync.password"
  if pid="$(pid_alive "$KSASL_PID" kafka.Kafka)"; then
    grep -q "^advertised.listeners=SASL_SSL://127.0.0.1:$KSASL_PORT\$" "$KSASL_PROPS" ||
      die "kafka-sasl (pid $pid) runs with another port than $KSASL_PORT: run '$0 down kafka-sasl' first"
  else
    check_port_free "$KSASL_PORT" DEVSTACK_KAFKA_SASL_PORT
    check_port_free "$KSASL_CONTROLLER_PORT" DEVSTACK_KAFKA_SASL_CONTROLLER_PORT
    kafka_sasl_render_config
    kafka_sasl_format
    log "starting kafka-sasl on 127.0.0.1:$KSASL_PORT (SASL_SSL; controller $KSASL_CONTROLLER_PORT)"
    kafka_variant_start "$KSASL_BASE" "$KSASL_PROPS" "$KSASL_STDOUT" "$KSASL_PID"
    pid=$KAFKA_VARIANT_PID
  fi
  local start=$SECONDS
  until port_open "$KSASL_PORT"; do
    kill -0 "$pid" 2>/dev/null || { rm -f "$KSASL_PID"; show_log_and_die "$KSASL_BASE/server.log" "kafka-sasl exited during startup (stdout: $KSASL_STDOUT)"; }
    [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && show_log_and_die "$KSASL_BASE/server.log" "kafka-sasl: port $KSASL_PORT not open after ${KAFKA_WAIT}s"
    sleep 0.5
  done
  until kafka_describe "127.0.0.1:$KSASL_PORT" --command-config "$KSASL_ADMIN_PROPS" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { rm -f "$KSASL_PID"; show_log_and_die "$KSASL_BASE/server.log" "kafka-sasl exited during startup (stdout: $KSASL_STDOUT)"; }
    [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && show_log_and_die "$KSASL_BASE/server.log" "kafka-sasl: metadata request still failing after ${KAFKA_WAIT}s"
    sleep 2
  done
  kafka_ensure_topics "127.0.0.1:$KSASL_PORT" --command-config "$KSASL_ADMIN_PROPS"
  log "kafka-sasl ready (pid $pid, SASL_SSL 127.0.0.1:$KSASL_PORT)"
}
