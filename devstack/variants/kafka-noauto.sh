# Sourced by devstack/stack.sh: variant kafka-noauto, a third single-node KRaft broker with
# topic auto-creation OFF (auto.create.topics.enable=false), as production clusters often run:
# a client naming a missing topic gets an error, never a topic. Plaintext on loopback; no topic
# is created at start. A second process, so starting it never restarts the plain broker.
# It runs Kafka's StandardAuthorizer, allowing what no ACL denies (every plaintext client is
# User:ANONYMOUS, a super user), so ACLs can be written and read (doctor's ACL check).
KNOAUTO_PORT="${DEVSTACK_KAFKA_NOAUTO_PORT:-$((KAFKA_PORT + 4))}"                        # 19096
KNOAUTO_CONTROLLER_PORT="${DEVSTACK_KAFKA_NOAUTO_CONTROLLER_PORT:-$((KAFKA_PORT + 5))}"  # 19097
KNOAUTO_BASE="$DIR/kafka-noauto"
KNOAUTO_DATA="$KNOAUTO_BASE/data"
KNOAUTO_PROPS="$KNOAUTO_BASE/server.properties"
KNOAUTO_PID="$RUN/kafka-noauto.pid"
KNOAUTO_STDOUT="$LOGS/kafka-noauto.out"

kafka_noauto_procs() { echo "$KNOAUTO_PID kafka.Kafka $KNOAUTO_PORT"; }

kafka_noauto_env() {
  echo "DEVSTACK_KAFKA_NOAUTO_BOOTSTRAP_SERVERS=127.0.0.1:$KNOAUTO_PORT"
}

kafka_noauto_render_config() {
  mkdir -p "$KNOAUTO_DATA"
  { # the plain broker's template with its own ports and data dir, auto-creation off
    grep -vE '^(listeners|advertised\.listeners|controller\.quorum\.voters|log\.dirs|auto\.create\.topics\.enable)=' \
      "$SCRIPT_DIR/kafka/server.properties.in"
    echo "log.dirs=$KNOAUTO_DATA"
    echo "listeners=PLAINTEXT://127.0.0.1:$KNOAUTO_PORT,CONTROLLER://127.0.0.1:$KNOAUTO_CONTROLLER_PORT"
    echo "advertised.listeners=PLAINTEXT://127.0.0.1:$KNOAUTO_PORT"
    echo "controller.quorum.voters=1@127.0.0.1:$KNOAUTO_CONTROLLER_PORT"
    echo "auto.create.topics.enable=false"
    echo "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    echo "allow.everyone.if.no.acl.found=true"
    echo "super.users=User:ANONYMOUS"
  } >"$KNOAUTO_PROPS"
}

kafka_noauto_format() { # once
  kafka_variant_format kafka-noauto "$KNOAUTO_DATA" "$KNOAUTO_PROPS"
}

kafka_noauto_up() {
  local pid
  command -v java >/dev/null || die "java not found (need Java 17+)"
  ensure_kafka_libs
  if pid="$(pid_alive "$KNOAUTO_PID" kafka.Kafka)"; then
    grep -q "^advertised.listeners=PLAINTEXT://127.0.0.1:$KNOAUTO_PORT\$" "$KNOAUTO_PROPS" ||
      die "kafka-noauto (pid $pid) runs with another port than $KNOAUTO_PORT: run '$0 down kafka-noauto' first"
  else
    check_port_free "$KNOAUTO_PORT" DEVSTACK_KAFKA_NOAUTO_PORT
    check_port_free "$KNOAUTO_CONTROLLER_PORT" DEVSTACK_KAFKA_NOAUTO_CONTROLLER_PORT
    kafka_noauto_render_config
    kafka_noauto_format
    log "starting kafka-noauto on 127.0.0.1:$KNOAUTO_PORT (auto.create.topics.enable=false; controller $KNOAUTO_CONTROLLER_PORT)"
    kafka_variant_start "$KNOAUTO_BASE" "$KNOAUTO_PROPS" "$KNOAUTO_STDOUT" "$KNOAUTO_PID"
    pid=$KAFKA_VARIANT_PID
  fi
  local start=$SECONDS
  until port_open "$KNOAUTO_PORT" && kafka_describe "127.0.0.1:$KNOAUTO_PORT" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { rm -f "$KNOAUTO_PID"; show_log_and_die "$KNOAUTO_BASE/server.log" "kafka-noauto exited during startup (stdout: $KNOAUTO_STDOUT)"; }
    [ $((SECONDS - start)) -ge "$KAFKA_WAIT" ] && show_log_and_die "$KNOAUTO_BASE/server.log" "kafka-noauto: not answering after ${KAFKA_WAIT}s"
    sleep 1
  done
  log "kafka-noauto ready (pid $pid, 127.0.0.1:$KNOAUTO_PORT)"
}
