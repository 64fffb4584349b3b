# Sourced by devstack/stack.sh: variant kafka-oauth, a fourth single-node KRaft broker whose
# client listener is SASL_PLAINTEXT with OAUTHBEARER, validated by Kafka's unsecured JWS
# validator (OAuthBearerUnsecuredValidatorCallbackHandler, the broker's default): it accepts
# an unsigned JWT (`"alg":"none"`) that has not expired and whose `scope` claim holds
# `cachesync`; any other token is refused. connections.max.reauth.ms makes every client
# log in again before its token expires (KIP-368), so a refreshed token is really used.
# The inter-broker login and the tools log in with the unsecured login module as `admin`.
# For tests and development only: a real deployment validates signed tokens (KIP-768).
# A separate process, so starting it never restarts the plain broker.
KOAUTH_PORT="${DEVSTACK_KAFKA_OAUTH_PORT:-$((KAFKA_PORT + 6))}"                        # 19098
KOAUTH_CONTROLLER_PORT="${DEVSTACK_KAFKA_OAUTH_CONTROLLER_PORT:-$((KAFKA_PORT + 7))}"  # 19099
KOAUTH_SCOPE=cachesync
KOAUTH_BASE="$DIR/kafka-oauth"
KOAUTH_DATA="$KOAUTH_BASE/data"
KOAUTH_PROPS="$KOAUTH_BASE/server.properties"
KOAUTH_ADMIN_PROPS="$KOAUTH_BASE/admin.properties"
KOAUTH_PID="$RUN/kafka-oauth.pid"
KOAUTH_STDOUT="$LOGS/kafka-oauth.out"

kafka_oauth_procs() { echo "$KOAUTH_PID kafka.Kafka $KOAUTH_PORT"; }

kafka_oauth_env() {
  cat <<EOT
DEVSTACK_KAFKA_OAUTH_BOOTSTRAP_SERVERS=127.0.0.1:$KOAUTH_PORT
DEVSTACK_KAFKA_OAUTH_SECURITY_PROTOCOL=SASL_PLAINTEXT
DEVSTACK_KAFKA_OAUTH_MECHANISM=OAUTHBEARER
DEVSTACK_KAFKA_OAUTH_REQUIRED_SCOPE=$KOAUTH_SCOPE
DEVSTACK_KAFKA_OAUTH_ADMIN_CONFIG_FILE=$KOAUTH_ADMIN_PROPS
EOT
}

kafka_oauth_login() { # the unsecured login module's JAAS line for `admin`, with the scope
  echo "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"admin\" unsecuredLoginListClaim_scope=\",$KOAUTH_SCOPE\";"
}

kafka_oauth_render_config() {
  mkdir -p "$KOAUTH_DATA"
  { # the plain broker's template minus what this broker sets itself
    grep -vE '^(listeners|advertised\.listeners|listener\.security\.protocol\.map|controller\.quorum\.voters|inter\.broker\.listener\.name|log\.dirs)=' \
      "$SCRIPT_DIR/kafka/server.properties.in"
    echo "log.dirs=$KOAUTH_DATA"
    cat <<EOT
listeners=SASL_PLAINTEXT://127.0.0.1:$KOAUTH_PORT,CONTROLLER://127.0.0.1:$KOAUTH_CONTROLLER_PORT
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$KOAUTH_PORT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@127.0.0.1:$KOAUTH_CONTROLLER_PORT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=OAUTHBEARER
sasl.mechanism.inter.broker.protocol=OAUTHBEARER
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin" unsecuredLoginListClaim_scope=",$KOAUTH_SCOPE" unsecuredValidatorRequiredScope="$KOAUTH_SCOPE";
connections.max.reauth.ms=3600000
EOT
  } >"$KOAUTH_PROPS"
  cat >"$KOAUTH_ADMIN_PROPS" <<EOT
security.protocol=SASL_PLAINTEXT
sasl.mechanism=OAUTHBEARER
sasl.jaas.config=$(kafka_oauth_login)
EOT
}

kafka_oauth_format() { # once
  kafka_variant_format kafka-oauth "$KOAUTH_DATA" "$KOAUTH_PROPS"
}

kafka_oauth_up() {
  local pid
  command -v java >/dev/null || die "java not found (need Java 17+)"
  ensure_kafka_libs
  if pid="$(pid_alive "$KOAUTH_PID" kafka.Kafka)"; then
    grep -q "^advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$KOAUTH_PORT\$" "$KOAUTH_PROPS" ||
      die "kafka-oauth (pid $pid) runs with another port than $KOAUTH_PORT: run '$0 down kafka-oauth' first"
  else
    check_port_free "$KOAUTH_PORT" DEVSTACK_KAFKA_OAUTH_PORT
    check_port_free "$KOAUTH_CONTROLLER_PORT" DEVSTACK_KAFKA_OAUTH_CONTROLLER_PORT
    kafka_oauth_render_config
    kafka_oauth_format
    log "starting kafka-oauth on 127.0.0.1:$KOAUTH_PORT (SASL_PLAINTEXT, OAUTHBEARER; controller $KOAUTH_CONTROLLER_PORT)"
    kafka_variant_start "$KOAUTH_BASE" "$KOAUTH_PROPS" "$KOAUTH_STDOUT" "$KOAUTH_PID"
    pid=$KAFKA_VARIANT_PID
  fi
  local start=$SECONDS
  until port_open "$KOAUTH_PORT" && kafka_describe "127.0.0.1:$KOAUTH_PORT" --command-config "$KOAUTH_ADMIN_PROPS" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { rm -f "$KOAUTH_PID"; show_log_and_die "$KOAUTH_BASE/server.log" "kafka-oauth exited during startup (stdout: $KOAUTH_STDOUT)"; }
    [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && show_log_and_die "$KOAUTH_BASE/server.log" "kafka-oauth: not answering after ${KAFKA_WAIT}s"
    sleep 1
  done
  kafka_ensure_topics "127.0.0.1:$KOAUTH_PORT" --command-config "$KOAUTH_ADMIN_PROPS"
  log "kafka-oauth ready (pid $pid, SASL_PLAINTEXT/OAUTHBEARER 127.0.0.1:$KOAUTH_PORT)"
}
