# Sourced by devstack/stack.sh: variant spark, a Spark standalone cluster started from the
# pyspark distribution installed in the virtualenv (its bin/spark-class and jars; nothing is
# downloaded): one master and two workers, each worker one core and a little memory, so
# executors run in their own JVMs (and their own Python workers) as on a real cluster.
# Everything binds 127.0.0.1 (SPARK_LOCAL_IP, also for the web UIs); no REST submission port.
#
# Ports follow DEVSTACK_SPARK_PORT_BASE (default 17077): master +0, master UI +1,
# worker N (1, 2) at +2N, its UI at +2N+1.
SPARK_PORT_BASE="${DEVSTACK_SPARK_PORT_BASE:-17077}"
SPARK_WORKERS="${DEVSTACK_SPARK_WORKERS:-2}"
SPARK_WORKER_MEMORY="${DEVSTACK_SPARK_WORKER_MEMORY:-1g}"       # per worker: one 512m-1g executor
SPARK_WAIT="${DEVSTACK_SPARK_WAIT:-60}"
SPARK_BASE="$DIR/spark-cluster"
SPARK_MASTER_CLASS=org.apache.spark.deploy.master.Master
SPARK_WORKER_CLASS=org.apache.spark.deploy.worker.Worker

spark_home() { # the installed pyspark's directory (it is a Spark distribution: bin/, jars/)
  local py="${DEVSTACK_PYTHON:-$REPO_ROOT/.venv/bin/python}"
  [ -x "$py" ] || die "spark: $py not found: run 'make install' (or set DEVSTACK_PYTHON to a python with pyspark)"
  "$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null ||
    die "spark: pyspark is not installed for $py (pip install -e '.[spark]')"
}

spark_worker_port() { echo $((SPARK_PORT_BASE + 2 * $1)); }

spark_procs() {
  echo "$RUN/spark-master.pid $SPARK_MASTER_CLASS $SPARK_PORT_BASE"
  local n; for ((n = 1; n <= SPARK_WORKERS; n++)); do
    echo "$RUN/spark-worker-$n.pid $SPARK_WORKER_CLASS $(spark_worker_port "$n")"
  done
}

# The interpreter the venv was made from: the same Python version as the drivers (PySpark
# requires it), without cachesync installed, so the executors run what the driver ships.
spark_base_python() {
  "${DEVSTACK_PYTHON:-$REPO_ROOT/.venv/bin/python}" -c \
    'import os, sys; print(os.path.join(sys.base_prefix, "bin", "python%d.%d" % sys.version_info[:2]))'
}

# The executors' Python: a venv of that interpreter with pyarrow, orjson and hiredis
# (devstack/spark/executor-python.sh, made by spark_up), else the interpreter itself.
SPARK_EXECUTOR_VENV="$DIR/spark/executor-python"
spark_python() {
  if [ -x "$SPARK_EXECUTOR_VENV/bin/python" ] && [ -f "$SPARK_EXECUTOR_VENV/.stamp" ]; then
    echo "$SPARK_EXECUTOR_VENV/bin/python"
  else
    spark_base_python
  fi
}

spark_env() {
  cat <<EOF
DEVSTACK_SPARK_MASTER_URL=spark://127.0.0.1:$SPARK_PORT_BASE
DEVSTACK_SPARK_PYTHON=$(spark_python)
DEVSTACK_SPARK_MASTER_UI=http://127.0.0.1:$((SPARK_PORT_BASE + 1))
DEVSTACK_SPARK_HOME=$(spark_home)
DEVSTACK_SPARK_WORKERS=$SPARK_WORKERS
DEVSTACK_SPARK_WORK_DIR=$SPARK_BASE
EOF
}

spark_start() { # LABEL PORT CLASS ARGS...: spark-class in the background (it execs the JVM)
  local label="$1" port="$2" cls="$3" home; shift 3
  pid_alive "$RUN/$label.pid" "$cls" >/dev/null && return 0
  check_port_free "$port" DEVSTACK_SPARK_PORT_BASE
  home="$(spark_home)"
  log "starting $label on 127.0.0.1:$port"
  SPARK_HOME="$home" SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$LOGS" SPARK_NO_DAEMONIZE=1 \
    SPARK_DAEMON_MEMORY=256m \
    SPARK_MASTER_OPTS="-Dspark.worker.timeout=15 -Dspark.master.rest.enabled=false" \
    SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=3600" \
    setsid nohup "$home/bin/spark-class" "$cls" "$@" </dev/null >>"$LOGS/$label.log" 2>&1 &
  echo $! >"$RUN/$label.pid"
}

# every worker registered with the master (its UI's JSON lists them ALIVE)
spark_workers_alive() {
  local url="http://127.0.0.1:$((SPARK_PORT_BASE + 1))/json/"
  [ "$(python3 -c 'import json, sys, urllib.request
doc = json.load(urllib.request.urlopen(sys.argv[1], timeout=3))
print(sum(w["state"] == "ALIVE" for w in doc["workers"]))' "$url" 2>/dev/null)" = "$SPARK_WORKERS" ]
}

spark_up() {
  local n port
  command -v java >/dev/null || die "java not found (need Java 17+)"
  mkdir -p "$SPARK_BASE"
  "$REPO_ROOT/devstack/spark/executor-python.sh" "$(spark_base_python)" "$SPARK_EXECUTOR_VENV" >/dev/null
  spark_start spark-master "$SPARK_PORT_BASE" "$SPARK_MASTER_CLASS" \
    --host 127.0.0.1 --port "$SPARK_PORT_BASE" --webui-port $((SPARK_PORT_BASE + 1))
  wait_until "$SPARK_WAIT" "spark master" port_open "$SPARK_PORT_BASE" ||
    show_log_and_die "$LOGS/spark-master.log" "spark master does not answer"
  for ((n = 1; n <= SPARK_WORKERS; n++)); do
    port="$(spark_worker_port "$n")"
    mkdir -p "$SPARK_BASE/worker-$n"
    spark_start "spark-worker-$n" "$port" "$SPARK_WORKER_CLASS" \
      --host 127.0.0.1 --port "$port" --webui-port $((port + 1)) --cores 1 \
      --memory "$SPARK_WORKER_MEMORY" --work-dir "$SPARK_BASE/worker-$n" \
      "spark://127.0.0.1:$SPARK_PORT_BASE"
  done
  wait_until "$SPARK_WAIT" "spark: $SPARK_WORKERS workers registered with the master" spark_workers_alive ||
    show_log_and_die "$LOGS/spark-worker-1.log" "spark workers did not register"
  log "spark ready (master spark://127.0.0.1:$SPARK_PORT_BASE, UI http://127.0.0.1:$((SPARK_PORT_BASE + 1)), $SPARK_WORKERS workers)"
}
