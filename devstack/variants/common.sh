# Sourced by devstack/stack.sh: what every variant shares.
#
# A variant NAME (e.g. kafka-sasl) is implemented by functions named after it with `_`
# for `-` (kafka_sasl_*):
#   <fn>_up       start it (idempotent), waiting until it answers
#   <fn>_procs    one line "PIDFILE PATTERN PORT" per process it runs, in starting order
#   <fn>_env      its KEY=VALUE lines for the env file (paths absolute, secrets as *_FILE)

variant_fn() { echo "${1//-/_}"; }

variant_up() { # NAME
  local fn; fn="$(variant_fn "$1")"
  "${fn}_up"
  mkdir -p "$ENV_D"
  "${fn}_env" >"$ENV_D/$1.env.tmp"
  mv "$ENV_D/$1.env.tmp" "$ENV_D/$1.env"
}

variant_down() { # NAME: stop its processes, last started first, and drop its env lines
  local fn lines=() i pidfile pattern port
  fn="$(variant_fn "$1")"
  mapfile -t lines < <("${fn}_procs")
  for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
    read -r pidfile pattern port <<<"${lines[$i]}"
    stop_pid "$1:$port" "$pidfile" "$pattern"
  done
  rm -f "$ENV_D/$1.env"
}

variant_active() { # NAME: any of its processes alive, or its env lines present
  local fn pidfile pattern port
  [ -f "$ENV_D/$1.env" ] && return 0
  fn="$(variant_fn "$1")"
  while read -r pidfile pattern port; do
    pid_alive "$pidfile" "$pattern" >/dev/null && return 0
  done < <("${fn}_procs")
  return 1
}

variant_status() { # NAME: running | starting | degraded (some processes down) | stopped
  local fn pidfile pattern port pid total=0 alive=0 open=0 pids=() ports=() state
  fn="$(variant_fn "$1")"
  while read -r pidfile pattern port; do
    total=$((total + 1)); ports+=("$port")
    if pid="$(pid_alive "$pidfile" "$pattern")"; then
      alive=$((alive + 1)); pids+=("$pid")
      port_open "$port" && open=$((open + 1))
    else
      pids+=("-")
    fi
  done < <("${fn}_procs")
  if [ "$alive" -eq 0 ]; then state=stopped
  elif [ "$alive" -lt "$total" ]; then state=degraded
  elif [ "$open" -lt "$total" ]; then state=starting
  else state=running; fi
  local IFS=,
  printf '%-15s %-8s pid=%-8s port=%s\n' "$1" "$state" "${pids[*]}" "${ports[*]}"
}

write_private() { # FILE: stdin to FILE, mode 600
  ( umask 077; cat >"$1.tmp" ) && mv "$1.tmp" "$1"
}

check_port_free() { # PORT ENVVAR
  if port_open "$1"; then die "port $1 is in use by another process (set $2)"; fi
}

wait_until() { # SECONDS WHAT COMMAND...: poll every 0.5 s; fails naming WHAT
  local limit="$1" what="$2" start=$SECONDS; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $((SECONDS - start)) -ge "$limit" ] && { log "ERROR: $what: not ready after ${limit}s"; return 1; }
    sleep 0.5
  done
}

show_log_and_die() { # LOGFILE MESSAGE
  if [ -s "$1" ]; then
    echo "----- last 40 lines of $1 -----" >&2; tail -n 40 "$1" >&2; echo "-----" >&2
  fi
  die "$2"
}

kafka_variant_format() { # LABEL DATA_DIR PROPS: format a variant broker's storage, once
  [ -f "$2/meta.properties" ] && return 0
  local cid
  cid="$(kafka_tool kafka.tools.StorageTool random-uuid 2>>"$LOGS/kafka-tools.log" | tail -n 1)"
  log "$1: formatting storage"
  kafka_tool kafka.tools.StorageTool format -t "$cid" -c "$3" >>"$LOGS/kafka-tools.log" 2>&1 ||
    show_log_and_die "$LOGS/kafka-tools.log" "$1: storage format failed"
}

kafka_variant_start() { # BASE_DIR PROPS STDOUT PIDFILE: start a variant broker's JVM; its pid in KAFKA_VARIANT_PID
  : >"$3"
  setsid nohup java -Xms128m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dkafka.logs.dir="$1" -Dlog4j2.configurationFile="$SCRIPT_DIR/kafka/log4j2.xml" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$2" </dev/null >>"$3" 2>&1 &
  KAFKA_VARIANT_PID=$!
  echo "$KAFKA_VARIANT_PID" >"$4"
}
