# Sourced by devstack/stack.sh: the Redis variants, each its own redis-server processes with
# a config file under <datadir>/<variant>/ (mode 600: it may hold ACL passwords), no
# persistence, bound to 127.0.0.1, daemonized with pid files in <datadir>/run.
#
#   redis-tls       one server, TLS port only (devstack CA), default user off, ACL users
#                   `devadmin` (everything) and `cachesync` (least privilege, see REDIS_ACL_CACHESYNC)
#   redis-cluster   three masters with a replica each (cluster-enabled), slots spread by
#                   `redis-cli --cluster create --cluster-replicas 1`
#   redis-cluster-tls  the same cluster over TLS only (clients, bus, replication), ACL users
#                   as redis-tls's (cachesync's also reads the slot map)
#   redis-sentinel  a master, one replica and three sentinels watching master name `cachesync`
#   redis-aof       one durable server: append-only file fsynced on every write, noeviction
#                   (what the Redis dedup store is meant to run on; it survives a restart)
# Default ports follow the main Redis port (16379), so stacks with other base ports never collide.
REDIS_TLS_PORT="${DEVSTACK_REDIS_TLS_PORT:-$((REDIS_PORT + 1))}"                          # 16380
REDIS_SENTINEL_MASTER_PORT="${DEVSTACK_REDIS_SENTINEL_MASTER_PORT:-$((REDIS_PORT + 11))}" # 16390, replica 16391
REDIS_SENTINEL_PORT="${DEVSTACK_REDIS_SENTINEL_PORT:-$((REDIS_PORT + 21))}"               # sentinels 16400-16402
REDIS_CLUSTER_PORT="${DEVSTACK_REDIS_CLUSTER_PORT:-$((REDIS_PORT + 31))}"                 # nodes 16410-16415
REDIS_CLUSTER_BUS_PORT="${DEVSTACK_REDIS_CLUSTER_BUS_PORT:-$((REDIS_PORT + 41))}"         # their buses 16420-16425
REDIS_AOF_PORT="${DEVSTACK_REDIS_AOF_PORT:-$((REDIS_PORT + 51))}"                          # 16430
REDIS_CLUSTER_TLS_PORT="${DEVSTACK_REDIS_CLUSTER_TLS_PORT:-$((REDIS_PORT + 61))}"         # nodes 16440-16445
REDIS_CLUSTER_TLS_BUS_PORT="${DEVSTACK_REDIS_CLUSTER_TLS_BUS_PORT:-$((REDIS_PORT + 71))}" # buses 16450-16455
REDIS_SENTINEL_MASTER_NAME=cachesync

# What the consumer (delete and update mode, Redis dedup store and its purge) and read_through
# send, directly or from their Lua scripts, and nothing else; every key, since application
# keys are whatever the templates say (a deployment can narrow `~*` to its key prefixes plus
# `~cachesync:*`). `lint`/`audit` also need +type +ttl; `info`, `config`, `flushall`, `keys`,
# pub/sub and the admin commands stay refused.
REDIS_ACL_CACHESYNC="~* resetchannels -@all +ping +get +mget +set +del +unlink +exists +scan +hgetall +hset +pexpire +time +evalsha +eval +script|load +script|exists +client|setname +wait"

redis_conf() { # LABEL PORT DIR: the lines every devstack redis-server config starts with
  cat <<EOF
bind 127.0.0.1
port $2
daemonize yes
pidfile $RUN/$1.pid
logfile $LOGS/$1.log
dir $3
save ""
appendonly no
EOF
}

redis_start() { # LABEL CONF [ARGS...]: unless its pid file names a live redis-server
  local label="$1" conf="$2"; shift 2
  pid_alive "$RUN/$label.pid" redis-server >/dev/null && return 0
  rm -f "$RUN/$label.pid"
  redis-server "$conf" "$@" </dev/null >>"$LOGS/$label.log" 2>&1 ||
    show_log_and_die "$LOGS/$label.log" "$label: redis-server failed to start"
}

# ---------------------------------------------------------------- redis-tls
redis_tls_procs() { echo "$RUN/redis-tls.pid redis-server $REDIS_TLS_PORT"; }

redis_tls_client_env() { # the devstack CA and client certificate, shared by the TLS variants
  cat <<EOF
DEVSTACK_REDIS_SSL_CA=$TLS_DIR/ca.crt
DEVSTACK_REDIS_SSL_CERT=$TLS_DIR/client.crt
DEVSTACK_REDIS_SSL_KEY=$TLS_DIR/client.key
EOF
}

redis_tls_env() {
  cat <<EOF
DEVSTACK_REDIS_TLS_URL=rediss://127.0.0.1:$REDIS_TLS_PORT/0
DEVSTACK_REDIS_TLS_USER=cachesync
DEVSTACK_REDIS_TLS_PASSWORD_FILE=$SECRETS/redis-cachesync.password
DEVSTACK_REDIS_TLS_ADMIN_USER=devadmin
DEVSTACK_REDIS_TLS_ADMIN_PASSWORD_FILE=$SECRETS/redis-admin.password
EOF
  redis_tls_client_env
}

redis_tls_cli() { # redis-cli args...: as devadmin over TLS (password from the environment, not argv)
  REDISCLI_AUTH="$(cat "$SECRETS/redis-admin.password")" redis-cli --no-auth-warning --tls \
    --cacert "$TLS_DIR/ca.crt" -h 127.0.0.1 -p "$REDIS_TLS_PORT" --user devadmin "$@" </dev/null
}

redis_tls_up() {
  local dir="$DIR/redis-tls" conf="$DIR/redis-tls/redis.conf"
  tls_ensure
  ensure_secret "$SECRETS/redis-admin.password"
  ensure_secret "$SECRETS/redis-cachesync.password"
  if ! pid_alive "$RUN/redis-tls.pid" redis-server >/dev/null; then
    check_port_free "$REDIS_TLS_PORT" DEVSTACK_REDIS_TLS_PORT
    mkdir -p "$dir"
    { redis_conf redis-tls 0 "$dir"
      cat <<EOF
tls-port $REDIS_TLS_PORT
tls-cert-file $TLS_DIR/server.crt
tls-key-file $TLS_DIR/server.key
tls-ca-cert-file $TLS_DIR/ca.crt
tls-auth-clients optional
user default off
user devadmin on >$(cat "$SECRETS/redis-admin.password") ~* &* +@all
user cachesync on >$(cat "$SECRETS/redis-cachesync.password") $REDIS_ACL_CACHESYNC
EOF
    } | write_private "$conf"
    log "starting redis-tls on 127.0.0.1:$REDIS_TLS_PORT (TLS only)"
    redis_start redis-tls "$conf"
  fi
  wait_until "$REDIS_WAIT" redis-tls redis_tls_ping || show_log_and_die "$LOGS/redis-tls.log" "redis-tls does not answer"
  log "redis-tls ready (TLS 127.0.0.1:$REDIS_TLS_PORT, ACL users devadmin, cachesync)"
}

redis_tls_ping() { [ "$(redis_tls_cli ping 2>/dev/null)" = PONG ]; }

# ---------------------------------------------------------------- redis-cluster, redis-cluster-tls
# Three masters, each with one replica (`--cluster-replicas 1`): a master killed makes the
# cluster promote its replica after REDIS_CLUSTER_NODE_TIMEOUT_MS. Node N (0-5) listens on
# <first port> + N and its bus on <first bus port> + N. redis-cluster-tls is the same cluster
# over TLS only (clients, bus and replication; the devstack CA), `default` user off, ACL users
# `devadmin` and `cachesync` (REDIS_ACL_CACHESYNC_CLUSTER). Restarts keep each node's
# nodes.conf: a master that was failed over comes back as its replacement's replica.
REDIS_CLUSTER_NODES=6
REDIS_CLUSTER_NODE_TIMEOUT_MS=3000
# a cluster client also reads the slot map and the commands' key positions (redis-py)
REDIS_ACL_CACHESYNC_CLUSTER="$REDIS_ACL_CACHESYNC +cluster|slots +cluster|shards +command"

cluster_is_tls() { [ "$1" = redis-cluster-tls ]; }

cluster_port() { # VARIANT N: node N's client port
  if cluster_is_tls "$1"; then echo $((REDIS_CLUSTER_TLS_PORT + $2)); else echo $((REDIS_CLUSTER_PORT + $2)); fi
}

cluster_bus_port() { # VARIANT N
  if cluster_is_tls "$1"; then echo $((REDIS_CLUSTER_TLS_BUS_PORT + $2)); else echo $((REDIS_CLUSTER_BUS_PORT + $2)); fi
}

cluster_ports() { local n; for ((n = 0; n < REDIS_CLUSTER_NODES; n++)); do cluster_port "$1" "$n"; done; }

cluster_procs() { local p; for p in $(cluster_ports "$1"); do echo "$RUN/$1-$p.pid redis-server $p"; done; }

cluster_cli() { # VARIANT PORT redis-cli-args...: as devadmin over TLS for the TLS variant
  local v="$1" p="$2"; shift 2
  if cluster_is_tls "$v"; then
    REDISCLI_AUTH="$(cat "$SECRETS/redis-admin.password")" redis-cli --no-auth-warning --tls \
      --cacert "$TLS_DIR/ca.crt" --user devadmin -h 127.0.0.1 -p "$p" "$@" </dev/null
  else
    redis-cli -h 127.0.0.1 -p "$p" "$@" </dev/null
  fi
}

cluster_field() { # VARIANT PORT SECTION FIELD: a field of `CLUSTER INFO` (cluster) or `INFO <section>`
  local out
  if [ "$3" = cluster ]; then out="$(cluster_cli "$1" "$2" cluster info 2>/dev/null)"
  else out="$(cluster_cli "$1" "$2" info "$3" 2>/dev/null)"; fi
  tr -d '\r' <<<"$out" | sed -n "s/^$4://p"
}

# every node says cluster_state:ok and knows every other, and every master has a replica in sync
cluster_ready() { # VARIANT
  local p masters=0 synced=0
  for p in $(cluster_ports "$1"); do
    [ "$(cluster_field "$1" "$p" cluster cluster_state)" = ok ] || return 1
    [ "$(cluster_field "$1" "$p" cluster cluster_known_nodes)" = "$REDIS_CLUSTER_NODES" ] || return 1
    case "$(cluster_field "$1" "$p" replication role)" in
      master) masters=$((masters + 1)) ;;
      slave) [ "$(cluster_field "$1" "$p" replication master_link_status)" = up ] && synced=$((synced + 1)) ;;
    esac
    # and every node lists every other in CLUSTER SLOTS, which clients read: a replica is left
    # out until the gossip has carried its replication offset
    [ "$(cluster_cli "$1" "$p" cluster slots 2>/dev/null | tr -d '\r' |
         grep -cxF -f <(cluster_ports "$1" | tr ' ' '\n'))" = "$REDIS_CLUSTER_NODES" ] || return 1
  done
  [ "$masters" = $((REDIS_CLUSTER_NODES / 2)) ] && [ "$synced" = $((REDIS_CLUSTER_NODES / 2)) ]
}

cluster_conf() { # VARIANT N DIR: node N's redis.conf
  local v="$1" p bus; p="$(cluster_port "$1" "$2")"; bus="$(cluster_bus_port "$1" "$2")"
  if cluster_is_tls "$v"; then
    redis_conf "$v-$p" 0 "$3"
    cat <<EOF
tls-port $p
tls-cluster yes
tls-replication yes
tls-cert-file $TLS_DIR/server.crt
tls-key-file $TLS_DIR/server.key
tls-ca-cert-file $TLS_DIR/ca.crt
tls-auth-clients optional
user default off
user devadmin on >$(cat "$SECRETS/redis-admin.password") ~* &* +@all
user cachesync on >$(cat "$SECRETS/redis-cachesync.password") $REDIS_ACL_CACHESYNC_CLUSTER
masteruser devadmin
masterauth $(cat "$SECRETS/redis-admin.password")
EOF
  else
    redis_conf "$v-$p" "$p" "$3"
  fi
  printf '%s\n' "cluster-enabled yes" "cluster-config-file nodes.conf" \
    "cluster-node-timeout $REDIS_CLUSTER_NODE_TIMEOUT_MS" "cluster-port $bus"
}

cluster_up() { # VARIANT
  local v="$1" n p dir first nodes=() alone=()
  first="$(cluster_port "$v" 0)"
  if cluster_is_tls "$v"; then
    tls_ensure
    ensure_secret "$SECRETS/redis-admin.password"
    ensure_secret "$SECRETS/redis-cachesync.password"
  fi
  for ((n = 0; n < REDIS_CLUSTER_NODES; n++)); do
    p="$(cluster_port "$v" "$n")"; dir="$DIR/$v/$p"; nodes+=("127.0.0.1:$p")
    if ! pid_alive "$RUN/$v-$p.pid" redis-server >/dev/null; then
      check_port_free "$p" "DEVSTACK_$(tr a-z- A-Z_ <<<"$v")_PORT"
      check_port_free "$(cluster_bus_port "$v" "$n")" "DEVSTACK_$(tr a-z- A-Z_ <<<"$v")_BUS_PORT"
      mkdir -p "$dir"
      cluster_conf "$v" "$n" "$dir" | write_private "$dir/redis.conf"
      log "starting $v node 127.0.0.1:$p (bus $(cluster_bus_port "$v" "$n"))"
      redis_start "$v-$p" "$dir/redis.conf"
    fi
    wait_until "$REDIS_WAIT" "$v node $p" cluster_cli "$v" "$p" ping ||
      show_log_and_die "$LOGS/$v-$p.log" "$v node $p does not answer"
  done
  # a fresh set of nodes knows no slots; nodes restarted from their nodes.conf find each other
  if [ "$(cluster_field "$v" "$first" cluster cluster_slots_assigned)" = 0 ]; then
    log "creating the cluster: redis-cli --cluster create ${nodes[*]} --cluster-replicas 1 --cluster-yes"
    cluster_cli "$v" "$first" --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
      >"$LOGS/$v-create.log" 2>&1 || show_log_and_die "$LOGS/$v-create.log" "$v: create failed"
  else
    # nodes new to an existing cluster (one made with fewer nodes): each becomes the replica
    # of a master that has none
    for p in $(cluster_ports "$v"); do
      if [ "$(cluster_field "$v" "$p" cluster cluster_known_nodes)" = 1 ] &&
         [ "$(cluster_field "$v" "$p" cluster cluster_slots_assigned)" = 0 ]; then alone+=("$p"); fi
    done
    for p in "${alone[@]}"; do
      log "$v: adding node 127.0.0.1:$p as a replica"
      cluster_cli "$v" "$first" --cluster add-node "127.0.0.1:$p" "127.0.0.1:$first" --cluster-slave \
        >>"$LOGS/$v-create.log" 2>&1 || show_log_and_die "$LOGS/$v-create.log" "$v: add-node $p failed"
    done
  fi
  wait_until 90 "$v: every node ok, every master's replica in sync" cluster_ready "$v" ||
    show_log_and_die "$LOGS/$v-$first.log" "$v: cluster_state is not ok or a replica is not in sync"
  log "$v ready (3 masters with a replica each, from 127.0.0.1:$first)"
}

cluster_env() { # VARIANT PREFIX SCHEME
  local nodes=() p; for p in $(cluster_ports "$1"); do nodes+=("127.0.0.1:$p"); done
  local IFS=,
  echo "$2_NODES=${nodes[*]}"
  echo "$2_URL=$3://127.0.0.1:$(cluster_port "$1" 0)/0"
}

redis_cluster_procs() { cluster_procs redis-cluster; }
redis_cluster_env() { cluster_env redis-cluster DEVSTACK_REDIS_CLUSTER redis; }
redis_cluster_up() { cluster_up redis-cluster; }

redis_cluster_tls_procs() { cluster_procs redis-cluster-tls; }
redis_cluster_tls_up() { cluster_up redis-cluster-tls; }
redis_cluster_tls_env() {
  cluster_env redis-cluster-tls DEVSTACK_REDIS_CLUSTER_TLS rediss
  cat <<EOF
DEVSTACK_REDIS_CLUSTER_TLS_USER=cachesync
DEVSTACK_REDIS_CLUSTER_TLS_PASSWORD_FILE=$SECRETS/redis-cachesync.password
DEVSTACK_REDIS_CLUSTER_TLS_ADMIN_USER=devadmin
DEVSTACK_REDIS_CLUSTER_TLS_ADMIN_PASSWORD_FILE=$SECRETS/redis-admin.password
EOF
  redis_tls_client_env
}

# ---------------------------------------------------------------- redis-sentinel
redis_sentinel_ports() { echo "$REDIS_SENTINEL_PORT" $((REDIS_SENTINEL_PORT + 1)) $((REDIS_SENTINEL_PORT + 2)); }

redis_sentinel_procs() {
  echo "$RUN/redis-sentinel-master.pid redis-server $REDIS_SENTINEL_MASTER_PORT"
  echo "$RUN/redis-sentinel-replica.pid redis-server $((REDIS_SENTINEL_MASTER_PORT + 1))"
  local p; for p in $(redis_sentinel_ports); do echo "$RUN/redis-sentinel-$p.pid redis-server $p"; done
}

redis_sentinel_env() {
  local s=() p; for p in $(redis_sentinel_ports); do s+=("127.0.0.1:$p"); done
  local IFS=,
  echo "DEVSTACK_REDIS_SENTINELS=${s[*]}"
  echo "DEVSTACK_REDIS_SENTINEL_MASTER_NAME=$REDIS_SENTINEL_MASTER_NAME"
}

sentinel_field() { # SENTINEL-PORT FIELD: a field of `SENTINEL MASTER cachesync`
  redis-cli -h 127.0.0.1 -p "$1" sentinel master "$REDIS_SENTINEL_MASTER_NAME" </dev/null 2>/dev/null |
    tr -d '\r' | grep -A1 -x "$2" | tail -n 1
}

# each sentinel knows the master, its replica and the two other sentinels, and the replica
# (whichever server that is after a failover) is in sync
redis_sentinel_ready() {
  local p master replica
  for p in $(redis_sentinel_ports); do
    [ "$(sentinel_field "$p" num-slaves)" -ge 1 ] 2>/dev/null || return 1
    [ "$(sentinel_field "$p" num-other-sentinels)" = 2 ] || return 1
  done
  master="$(sentinel_field "$REDIS_SENTINEL_PORT" port)"
  replica=$((REDIS_SENTINEL_MASTER_PORT + 1))
  [ "$master" = "$replica" ] && replica="$REDIS_SENTINEL_MASTER_PORT"
  redis-cli -h 127.0.0.1 -p "$replica" info replication </dev/null 2>/dev/null |
    grep -q '^master_link_status:up'
}

redis_sentinel_up() {
  local m="$REDIS_SENTINEL_MASTER_PORT" r=$((REDIS_SENTINEL_MASTER_PORT + 1)) base="$DIR/redis-sentinel" p
  if variant_active redis-sentinel && [ "$(variant_status redis-sentinel | awk '{print $2}')" != running ]; then
    # after a partial crash the roles and the sentinels' views are unknown: start over
    log "redis-sentinel is only partly running; restarting it"
    variant_down redis-sentinel
  fi
  if ! pid_alive "$RUN/redis-sentinel-master.pid" redis-server >/dev/null; then
    for p in "$m" "$r" $(redis_sentinel_ports); do check_port_free "$p" DEVSTACK_REDIS_SENTINEL_MASTER_PORT/DEVSTACK_REDIS_SENTINEL_PORT; done
    # fresh configs each start: sentinels rewrite theirs, and a failover moves the master
    rm -rf "$base"; mkdir -p "$base/master" "$base/replica"
    redis_conf redis-sentinel-master "$m" "$base/master" | write_private "$base/master/redis.conf"
    { redis_conf redis-sentinel-replica "$r" "$base/replica"; echo "replicaof 127.0.0.1 $m"; } |
      write_private "$base/replica/redis.conf"
    log "starting redis-sentinel: master 127.0.0.1:$m, replica $r, sentinels $(redis_sentinel_ports)"
    redis_start redis-sentinel-master "$base/master/redis.conf"
    redis_start redis-sentinel-replica "$base/replica/redis.conf"
    for p in $(redis_sentinel_ports); do
      mkdir -p "$base/sentinel-$p"
      { redis_conf "redis-sentinel-$p" "$p" "$base/sentinel-$p"
        printf '%s\n' "sentinel monitor $REDIS_SENTINEL_MASTER_NAME 127.0.0.1 $m 2" \
          "sentinel down-after-milliseconds $REDIS_SENTINEL_MASTER_NAME 2000" \
          "sentinel failover-timeout $REDIS_SENTINEL_MASTER_NAME 10000" \
          "sentinel parallel-syncs $REDIS_SENTINEL_MASTER_NAME 1"
      } | grep -v '^save\|^appendonly' | write_private "$base/sentinel-$p/sentinel.conf"
      redis_start "redis-sentinel-$p" "$base/sentinel-$p/sentinel.conf" --sentinel
    done
  fi
  wait_until 60 "redis-sentinel (sentinels see the master, its replica and each other)" redis_sentinel_ready ||
    show_log_and_die "$LOGS/redis-sentinel-$REDIS_SENTINEL_PORT.log" "redis-sentinel is not ready"
  log "redis-sentinel ready (master name $REDIS_SENTINEL_MASTER_NAME; fail over with: redis-cli -p $REDIS_SENTINEL_PORT SENTINEL FAILOVER $REDIS_SENTINEL_MASTER_NAME)"
}

# ---------------------------------------------------------------- redis-aof
# A durable Redis: every write is in the append-only file before the reply (appendfsync
# always) and nothing is evicted (maxmemory-policy noeviction: a full server refuses writes
# instead of forgetting dedup records). Its data survives `down` and `up`.
redis_aof_procs() { echo "$RUN/redis-aof.pid redis-server $REDIS_AOF_PORT"; }

redis_aof_env() { echo "DEVSTACK_REDIS_AOF_URL=redis://127.0.0.1:$REDIS_AOF_PORT/0"; }

redis_aof_up() {
  local dir="$DIR/redis-aof"
  if ! pid_alive "$RUN/redis-aof.pid" redis-server >/dev/null; then
    check_port_free "$REDIS_AOF_PORT" DEVSTACK_REDIS_AOF_PORT
    mkdir -p "$dir"
    { redis_conf redis-aof "$REDIS_AOF_PORT" "$dir" | grep -v '^appendonly'
      printf '%s\n' "appendonly yes" "appendfsync always" "maxmemory-policy noeviction"
    } | write_private "$dir/redis.conf"
    log "starting redis-aof on 127.0.0.1:$REDIS_AOF_PORT (appendfsync always, noeviction)"
    redis_start redis-aof "$dir/redis.conf"
  fi
  wait_until 20 "redis-aof" redis_aof_ping || show_log_and_die "$LOGS/redis-aof.log" "redis-aof is not ready"
}

redis_aof_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_AOF_PORT" ping </dev/null 2>/dev/null)" = PONG ]; }
