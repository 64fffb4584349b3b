"""The Spark engine, replay and audit on the real services: the devstack's Spark standalone
cluster (a master, two one-core workers; executors in their own JVMs, running the workers'
python3 with cachesync shipped as a zip), Kafka, MariaDB, Redis.

One SparkSession (one core of the cluster) is shared by the module: starting one costs
seconds on the 2-core CI machine. The kill/restart and metrics tests submit
`cachesync consume --engine spark` with `cachesync spark-submit` (the other core), since
its driver must be killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka import KafkaProducer

from cachesync.cli import cli
from cachesync.commands.consume_spark import build_spark_engine, dedup_purge
from cachesync.commands.replay import run_replay
from cachesync.schema.keys import DEDUP_PREFIX as REDIS_DEDUP_PREFIX
from cachesync.consumer.applier import Stats
from cachesync.consumer.adapters.mysql_dedup import rows_sql
from cachesync.consumer.replay import parse_bound
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key
from tests.support import add_config_sections, address, scrape, status_json, wait_for
from tests.support.variants import start, use_redis_cluster

pytestmark = pytest.mark.integration
USERS = {"keys": ["user:{id}", "user:email:{email}"]}
ORDERS = {"keys": ["order:{id}"]}
# every app on the two-worker cluster takes one executor, so two apps can run side by side
APP_CONF = {"spark.executor.memory": "512m", "spark.cores.max": "1"}


def cluster_env() -> dict[str, str]:
    """The standalone cluster's facts (started if it is not) and what a driver needs to
    talk to it on loopback."""
    env = start("spark")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"     # the driver binds loopback, like the cluster
    # the executors run the base Python of the venv, which has no cachesync: what they
    # import is what the driver ships
    os.environ["CACHESYNC_SPARK_EXECUTOR_PYTHON"] = env["DEVSTACK_SPARK_PYTHON"]
    return env


@pytest.fixture(scope="module")
def spark(stack):
    from cachesync.consumer.spark.session import spark_session
    env = cluster_env()
    # the session's jars are jar_paths(): those `make install` fetched into the default stack's
    # directory, whichever worker's stack this is (tests/support/stacks.py)
    with spark_session("cachesync-tests", env["DEVSTACK_SPARK_MASTER_URL"],
                       conf=APP_CONF) as session:
        assert session.sparkContext.master == env["DEVSTACK_SPARK_MASTER_URL"]
        yield session


# -- a recorded topic -----------------------------------------------------------------------
class Recorder:
    """Produces binlog-shaped events (as the tailer would) and remembers every key they name."""

    def __init__(self, lab):
        self.lab = lab
        self.producer = KafkaProducer(bootstrap_servers=lab.stack.bootstrap, acks="all",
                                      linger_ms=5)
        self.keys: dict[str, set[str]] = {}      # table -> keys (without the lab prefix)
        self.count = 0
        self.ids: set[str] = set()
        self._txn = 0

    def change(self, table: str, op: str, before, after, *, republish: bool = False,
               partition: int | None = None) -> str:
        """Publish one change (twice with ``republish``); returns its message id."""
        self._txn += 1
        ctx = TxnContext("mariadb:rec", f"0-1-{self._txn}", self._txn, time.time())
        event = row_change(ctx, 0, self.lab.db, table, op, "id", before, after)
        for _ in range(2 if republish else 1):
            self.send(kafka_key(self.lab.db, table, event.pk).encode(), encode(event),
                      event.id.encode(), partition)
        self.ids.add(event.id)
        spec = {"users": USERS, "orders": ORDERS}[table]
        for image in (before, after):
            if image is not None:
                self.keys.setdefault(f"{self.lab.db}.{table}", set()).update(
                    t.format(**image) for t in spec["keys"])
        return event.id

    def send(self, key: bytes, value: bytes, msg_id: bytes | None = None,
             partition: int | None = None) -> None:
        headers = [("id", msg_id)] if msg_id else []
        self.producer.send(self.lab.topic, key=key, value=value, headers=headers,
                           partition=partition)
        self.count += 1

    def flush(self) -> None:
        self.producer.flush(30)

    def all_keys(self) -> set[str]:
        return set().union(*self.keys.values())


def record_history(lab, users: int = 120) -> Recorder:
    """Inserts, email changes, deletes, re-publishes, one poison record, one unmapped table."""
    rec = Recorder(lab)
    for i in range(users):
        row = {"id": i, "email": f"u{i}@x.org", "name": f"user {i}"}
        rec.change("users", "insert", None, row, republish=(i % 10 == 0))
        if i % 3 == 0:
            rec.change("users", "update", row, {**row, "email": f"u{i}.new@x.org"})
        if i % 7 == 0:
            rec.change("users", "delete", row, None)
        rec.change("orders", "insert", None, {"id": 1000 + i, "user_id": i})
    rec.send(b"garbage", b"\xff not json")
    ctx = TxnContext("mariadb:rec", "0-1-999999", 999999, time.time())
    stray = row_change(ctx, 0, lab.db, "unmapped", "insert", "id", None, {"id": 1})
    rec.send(kafka_key(lab.db, "unmapped", stray.pk).encode(), encode(stray), stray.id.encode())
    rec.flush()
    return rec


def cache_everything(lab, keys, extra=("user:untouched:1", "user:untouched:2")) -> None:
    pipe = lab.redis.pipeline(transaction=False)
    for k in [*keys, *extra]:
        pipe.set(lab.prefix + k, b"cached", ex=900)
    pipe.execute()


def redis_state(lab) -> dict[bytes, bytes]:
    return {k: lab.redis.get(k) for k in lab.redis.scan_iter(match=lab.prefix + "*", count=1000)}


def dedup_records(lab, namespace: str) -> set[tuple[str, str]]:
    rows = lab.sql(f"SELECT msg_id, status FROM {rows_sql('cachesync')} WHERE ns = %s",
                   (namespace,))
    return set(rows)


def config_for_group(lab, tables, group: str, name: str, **consumer) -> str:
    """A config for ``group``; the MySQL dedup store unless ``consumer`` names another (the
    tests read its records)."""
    path = lab.write_config(tables, consumer={"dedup_store": "mysql", **consumer}, name=name)
    return add_config_sections(path, kafka={"group_id": group})


def dlq_count(lab) -> int:
    return len(lab.topic_records(lab.dlq))


def run_spark_engine(lab, spark, config_path: str, checkpoint: Path, expected: int, **kw):
    engine = build_spark_engine(lab.settings(config_path), spark, str(checkpoint), **kw)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: engine.stats.consumed >= expected or not thread.is_alive(), 180,
                 what=f"the spark engine to consume {expected} records", interval=0.2)
    finally:
        engine.stop()
        thread.join(60)
    assert not thread.is_alive(), "the spark engine did not stop"
    return engine


# -- consume: python engine vs spark engine --------------------------------------------------
@pytest.mark.parametrize("transfer", ["arrow", "rows"])
def test_python_and_spark_engines_leave_identical_redis_and_dedup_state(lab, spark, transfer):
    """Both ways records reach the executors' Python (Arrow batches, pickled Rows)."""
    rec = record_history(lab)
    tables = {"users": USERS, "orders": ORDERS}

    cache_everything(lab, rec.all_keys())
    py_cfg = config_for_group(lab, tables, f"py-{lab.suffix}", "py.yaml")
    engine = lab.start_engine(py_cfg)
    wait_for(lambda: engine.stats.consumed >= rec.count, 60, what="the python engine")
    lab.stop_engine(engine)
    py_redis, py_stats = redis_state(lab), engine.stats
    py_dedup = dedup_records(lab, f"py-{lab.suffix}")
    assert dlq_count(lab) == 2                      # the garbage record and the unmapped table

    cache_everything(lab, rec.all_keys())
    sp_cfg = config_for_group(lab, tables, f"sp-{lab.suffix}", "sp.yaml", batch_size=100)
    sp = run_spark_engine(lab, spark, sp_cfg, lab.tmp / "ck", rec.count,
                          max_offsets_per_trigger=200, transfer=transfer)
    sp_redis, sp_dedup = redis_state(lab), dedup_records(lab, f"sp-{lab.suffix}")
    assert sp.transfer == transfer

    assert sp.stats.consumed == py_stats.consumed == rec.count
    assert (sp.stats.applied, sp.stats.duplicates, sp.stats.dead_lettered) == \
        (py_stats.applied, py_stats.duplicates, py_stats.dead_lettered) == (len(rec.ids), 12, 2)
    assert sp_redis == py_redis
    assert set(sp_redis) == {(lab.prefix + k).encode() for k in ("user:untouched:1", "user:untouched:2")}
    assert sp_dedup == py_dedup and {status for _, status in sp_dedup} == {"done"}
    assert {msg_id for msg_id, _ in sp_dedup} == rec.ids
    assert dlq_count(lab) == 4
    assert len(sp.batches) >= rec.count // 200


def test_the_devstack_executors_take_micro_batches_as_arrow_batches(spark):
    """The devstack's executor Python has pyarrow (devstack/spark/executor-python.sh), so
    the engine's default (auto) hands records over as Arrow batches."""
    from cachesync.consumer.spark.stream import arrow_transfer
    arrow, why = arrow_transfer(spark)
    assert arrow, why


def test_a_micro_batch_gets_one_task_per_executor_core(spark):
    """The module's session has one executor core; Spark's defaultParallelism never says
    fewer than 2, which made two tasks of every micro-batch, one after the other."""
    from cachesync.consumer.spark.stream import task_slots
    wait_for(lambda: task_slots(spark) == 1, 120, what="the session's one executor core")
    assert spark.sparkContext.defaultParallelism == 2


def test_a_checkpoint_on_local_disk_gets_the_file_system_checkpoint_manager(spark, tmp_path):
    """Spark's default manager forks chmod/readlink processes per checkpoint file on a local
    disk; the engine sets the FileSystem-based one there, and leaves a manager the session
    names, or another file system, alone."""
    from cachesync.consumer.spark.stream import (CHECKPOINT_MANAGER_CONF, LOCAL_CHECKPOINT_MANAGER,
                                                 checkpoint_on_local_disk,
                                                 use_local_checkpoint_manager)
    assert checkpoint_on_local_disk(spark, str(tmp_path))
    assert checkpoint_on_local_disk(spark, f"file://{tmp_path}")
    assert not checkpoint_on_local_disk(spark, "hdfs://127.0.0.1:1/cachesync/checkpoint")
    assert not checkpoint_on_local_disk(spark, "s3a://bucket/cachesync/checkpoint")
    before = spark.conf.get(CHECKPOINT_MANAGER_CONF, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
        assert not use_local_checkpoint_manager(spark, "hdfs://127.0.0.1:1/ck")
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF, None) is None
        assert use_local_checkpoint_manager(spark, str(tmp_path))
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == LOCAL_CHECKPOINT_MANAGER
        spark.conf.set(CHECKPOINT_MANAGER_CONF, "com.example.Manager")
        assert not use_local_checkpoint_manager(spark, str(tmp_path))
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF) == "com.example.Manager"
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
        if before is not None:
            spark.conf.set(CHECKPOINT_MANAGER_CONF, before)


def test_arrow_batches_hold_one_chunk_of_the_consumer_unless_the_session_sizes_them(spark):
    """A task's worker starts on its first chunk once the JVM has converted one Arrow batch:
    the engine sizes them to consumer.batch_size, and leaves a size the session set alone."""
    from cachesync.consumer.spark.stream import ARROW_BATCH_CONF, size_arrow_batches
    before = spark.conf.get(ARROW_BATCH_CONF, None)
    try:
        spark.conf.unset(ARROW_BATCH_CONF)
        assert size_arrow_batches(spark, 2000)
        assert spark.conf.get(ARROW_BATCH_CONF) == "2000"
        spark.conf.set(ARROW_BATCH_CONF, "5000")
        assert not size_arrow_batches(spark, 2000)
        assert spark.conf.get(ARROW_BATCH_CONF) == "5000"
    finally:
        spark.conf.unset(ARROW_BATCH_CONF)
        if before is not None:
            spark.conf.set(ARROW_BATCH_CONF, before)


def redis_dedup_records(lab, namespace: str) -> dict[str, bytes]:
    """message id -> record (the key is ``<prefix>{<slot tag>}<id>``)."""
    prefix = f"{REDIS_DEDUP_PREFIX}{namespace}:"
    return {k.decode()[len(prefix):].split("}", 1)[1]: lab.redis.get(k)
            for k in lab.redis.scan_iter(match=prefix + "*", count=1000)}


def test_spark_with_the_redis_dedup_store_claims_confirms_and_purges_in_redis(lab, spark):
    rec = record_history(lab, users=30)
    ns = f"rd-{lab.suffix}"
    cfg = config_for_group(lab, {"users": USERS, "orders": ORDERS}, ns, "rd.yaml",
                           dedup_store="redis", batch_size=50)
    sp = run_spark_engine(lab, spark, cfg, lab.tmp / "rd-ck", rec.count)
    assert sp.stats.applied == len(rec.ids) and sp.stats.duplicates == 3
    done = redis_dedup_records(lab, ns)
    assert set(done) == rec.ids and all(v.startswith(b"d ") for v in done.values())
    assert dedup_records(lab, ns) == set()                     # nothing claimed in MySQL

    returncode, doc = status_json(lab, cfg)                    # status reads the same store
    assert doc["errors"] == {} and returncode == 0
    assert doc["dedup"] == {"namespace": ns, "claimed": 0, "done": len(rec.ids),
                            "total": len(rec.ids)}

    purge_cfg = add_config_sections(cfg, consumer={"dedup_retention_s": 0,
                                                   "purge_interval_s": 0.05})
    stats = Stats()
    with dedup_purge(lab.settings(purge_cfg), stats):          # what the Spark driver runs
        wait_for(lambda: not redis_dedup_records(lab, ns), 60, what="the driver's purge in Redis")
    assert stats.purged == len(rec.ids)


# -- consume: kill -9 mid-stream, restart from the checkpoint -----------------------------------
def spawn_spark_consumer(lab, config_path: str, checkpoint: Path, log_name: str,
                         max_offsets: int = 60, conf: dict | None = None):
    """`cachesync spark-submit -- consume --engine spark ...` on the standalone cluster."""
    env = cluster_env()
    log = open(lab.tmp / log_name, "w")
    confs = [a for k, v in {**APP_CONF, "spark.ui.enabled": "false", **(conf or {})}.items()
             for a in ("--conf", f"{k}={v}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachesync", "spark-submit", "--master",
         env["DEVSTACK_SPARK_MASTER_URL"], *confs, "--", "consume", "--engine", "spark",
         "--config", config_path, "--checkpoint-location", str(checkpoint),
         "--max-offsets-per-trigger", str(max_offsets)],
        env={**os.environ, **lab.stack.env}, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    proc.log_path = log.name
    return proc


def spark_driver(proc) -> int:
    """The pid of the Python driver spark-submit started (its JVM's child running spark_main.py)."""
    def find():
        for pid in _descendants(proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spark_main.py" in cmdline and b"python" in cmdline.split(b"\0")[0]:
                return pid
        return None
    return wait_for(find, 120, interval=0.2, what="the Python driver of spark-submit")


EXECUTOR = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executors_of(app_ids=None) -> list[tuple[int, str, str]]:
    """(pid, app id, worker url) of the executor JVMs on this machine (of ``app_ids`` only)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if EXECUTOR in args:
            app = args[args.index(b"--app-id") + 1].decode()
            if app_ids is None or app in app_ids:
                found.append((int(entry.name), app, args[args.index(b"--worker-url") + 1].decode()))
    return found


def running_apps(env: dict[str, str], finished: bool = False) -> set[str]:
    """Ids of the applications the standalone master runs now (and has run, ``finished``)."""
    import urllib.request
    doc = json.load(urllib.request.urlopen(env["DEVSTACK_SPARK_MASTER_UI"] + "/json/", timeout=30))
    return {a["id"] for a in doc["activeapps"] + (doc["completedapps"] if finished else [])}


def wait_app_gone(env: dict[str, str], keep: set[str]) -> None:
    """After a driver's kill: the master dropped its application and its executors are gone
    (an executor could otherwise still be applying a task when the test counts). Only this
    devstack's master's applications count: another cluster on the machine (a second
    checkout's devstack) runs executors of its own."""
    def gone():
        if running_apps(env) - keep:
            return False
        ours = running_apps(env, finished=True) - keep
        return not executors_of(ours)
    # the master drops the application when the driver's connection closes; its executor
    # JVMs then stop, which on a loaded 2-core host took more than a minute once
    wait_for(gone, 180, interval=0.2, what="the killed driver's application and executors to end")


def stop_gracefully(proc, timeout_s: float = 90) -> int:
    """SIGTERM to the Python driver (it lets the running micro-batch finish, stops its query,
    exits, and spark-submit with it); the whole group killed if that does not happen."""
    try:
        os.kill(spark_driver(proc), signal.SIGTERM)
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (parents read from /proc/<pid>/stat)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        children = [p for p, parent in parents.items() if parent == current]
        found += children
        todo += children
    return found


def done_count(lab, ns: str) -> int:
    return lab.sql(f"SELECT COUNT(*) FROM {rows_sql('cachesync')} WHERE ns = %s AND "
                   "status = 'done'", (ns,))[0][0]


def forget_last_commit(checkpoint: Path) -> int:
    """Make the checkpoint look like a crash after the sink wrote batch N, before Spark
    committed it: drop commits/N (and an offsets file of a batch that never committed)."""
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    offsets = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    last = commits[-1]
    doomed = [("offsets", b) for b in offsets if b > last] + [("commits", last)]
    for log_dir, batch in doomed:
        (checkpoint / log_dir / str(batch)).unlink()
        (checkpoint / log_dir / f".{batch}.crc").unlink(missing_ok=True)   # Hadoop's checksum
    return last


def test_spark_consume_serves_the_consumer_metrics_with_kafka_lag_from_its_checkpoint(lab, spark):
    rec = Recorder(lab)
    for i in range(40):
        rec.change("users", "insert", None, {"id": i, "email": f"m{i}@x.org", "name": "n"})
    rec.flush()
    cfg = config_for_group(lab, {"users": USERS}, f"m-{lab.suffix}", "metrics.yaml")
    proc = spawn_spark_consumer(lab, cfg, lab.tmp / "m-ck", "spark-m.log")
    try:
        addr = address(lab, proc)

        def caught_up():
            m = scrape(addr)
            lag = {k: v for (name, k), v in m.items()
                   if name == "cachesync_consumer_kafka_lag_messages"}
            # a batch's counts move one by one (consumed last) and its lag samples after
            # them: await each count asserted below
            done = (m.get(("cachesync_consumer_events_applied_total", ())) == 40
                    and m.get(("cachesync_events_consumed_total", ())) == 40
                    and m.get(("cachesync_consumer_commit_to_apply_seconds_count",
                               (("kind", "binlog"),))) == 40)
            return (m, lag) if done and len(lag) == 3 and sum(lag.values()) == 0 else None
        m, lag = wait_for(caught_up, 300, interval=0.5, what="metrics showing 40 applied, no lag")
    finally:
        stop_gracefully(proc)
    assert m[("cachesync_events_consumed_total", ())] == 40
    assert m[("cachesync_consumer_commit_to_apply_seconds_count", (("kind", "binlog"),))] == 40
    assert set(lag) == {(("partition", str(p)),) for p in range(3)}
    assert proc.returncode == 0, lab.log(proc)


BATCH_LINE = re.compile(r"spark batch (\d+): (\d+) consumed, (\d+) applied, (\d+) duplicates")


def test_spark_consumer_killed_mid_stream_resumes_from_its_checkpoint(lab, spark):
    rec = Recorder(lab)
    for i in range(1500):
        rec.change("users", "insert", None, {"id": i, "email": f"k{i}@x.org", "name": "n"})
    rec.flush()
    cache_everything(lab, rec.all_keys(), extra=())
    ns = f"kill-{lab.suffix}"
    cfg = config_for_group(lab, {"users": USERS}, ns, "kill.yaml", batch_size=150, claim_lease_s=2)
    checkpoint = lab.tmp / "kill-ck"

    env = cluster_env()
    apps_before = running_apps(env)
    first = spawn_spark_consumer(lab, cfg, checkpoint, "spark-1.log")
    try:
        wait_for(lambda: done_count(lab, ns) >= 300 or first.poll() is not None, 300,
                 what="the first spark consumer to apply 300 events", interval=0.1)
        assert first.poll() is None, Path(first.log_path).read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    wait_app_gone(env, apps_before)
    # A confirm the killed process had already sent still commits on the server after the
    # kill: count only once no statement of the cachesync account is running any more.
    wait_for(lambda: lab.sql("SELECT COUNT(*) FROM information_schema.processlist WHERE "
                             "user = 'cachesync' AND command NOT IN ('Sleep', 'Binlog Dump', "
                             "'Binlog Dump GTID')")[0][0] == 0, 60,
             what="the killed consumer's in-flight statements to finish", interval=0.1)
    at_kill = done_count(lab, ns)
    assert 300 <= at_kill < 1500, "the kill was not mid-stream"
    rerun = forget_last_commit(checkpoint)

    second = spawn_spark_consumer(lab, cfg, checkpoint, "spark-2.log")
    try:
        wait_for(lambda: done_count(lab, ns) == 1500 or second.poll() is not None, 300,
                 what="the restarted spark consumer to finish", interval=0.2)
        assert second.poll() is None, Path(second.log_path).read_text()[-3000:]
        wait_for(lambda: len(BATCH_LINE.findall(Path(second.log_path).read_text())) > 0, 60,
                 what="a batch line in the restarted consumer's log")
        assert stop_gracefully(second) == 0, Path(second.log_path).read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)

    batches = [tuple(map(int, m)) for m in BATCH_LINE.findall(Path(second.log_path).read_text())]
    batch_id, consumed, applied, duplicates = batches[0]
    assert batch_id == rerun                    # the uncommitted batch ran again, same batchId
    assert consumed > 0 and duplicates == consumed and applied == 0
    assert sum(b[2] for b in batches) == 1500 - at_kill    # every id applied exactly once
    assert done_count(lab, ns) == 1500 == len(rec.ids)
    assert lab.sql(f"SELECT COUNT(*) FROM {rows_sql('cachesync')} WHERE ns = %s AND "
                   "status <> 'done'", (ns,))[0][0] == 0
    assert lab.cached(*rec.all_keys()) == []    # nothing lost


# -- replay ----------------------------------------------------------------------------------------
def test_replay_dry_run_counts_match_what_the_replay_then_deletes(lab, spark):
    rec = record_history(lab, users=60)
    cfg = lab.write_config({"users": USERS, "orders": ORDERS})
    settings = lab.settings(cfg)
    mappings = settings.tables
    everything = (parse_bound("earliest"), parse_bound("latest"))
    cache_everything(lab, rec.all_keys())
    before = redis_state(lab)

    dry = run_replay(settings, mappings, "spark", *everything, dry_run=True, spark=spark,
                     show_progress=False)
    assert redis_state(lab) == before               # a dry run touches nothing
    py_dry = run_replay(settings, mappings, "python", *everything, dry_run=True,
                        show_progress=False)
    expected = {t: len(keys) for t, keys in rec.keys.items()}
    assert {t: n["keys"] for t, n in dry.tables.items()} == expected
    assert dry.tables == py_dry.tables and dry.records == py_dry.records == rec.count
    assert dry.poison == 2 and dry.keys_existed == 0

    users = f"{lab.db}.users"
    only_users = run_replay(settings, mappings, "spark", *everything, tables=(users,),
                            spark=spark, show_progress=False)
    assert only_users.tables == {users: dry.tables[users]}
    assert lab.cached(*rec.keys[users]) == [] and \
        len(lab.cached(*rec.keys[f"{lab.db}.orders"])) == expected[f"{lab.db}.orders"]

    cache_everything(lab, rec.all_keys())
    real = run_replay(settings, mappings, "spark", *everything, spark=spark, rate=20_000,
                      show_progress=False)
    assert real.tables == dry.tables
    assert real.keys_existed == sum(expected.values()) == len(rec.all_keys())
    assert set(redis_state(lab)) == {(lab.prefix + k).encode()
                                     for k in ("user:untouched:1", "user:untouched:2")}
    again = run_replay(settings, mappings, "spark", *everything, spark=spark, show_progress=False)
    assert again.tables == real.tables and again.keys_existed == 0   # idempotent

    result = CliRunner().invoke(cli, ["replay", "--config", cfg, "--dry-run", "--from", "0",
                                      "--to", "latest"], env=lab.stack.env)
    assert result.exit_code == 0, result.output
    assert '"dry_run": true' in result.stdout


# -- audit -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("redis_variant", ["redis", "redis-cluster"])
def test_audit_finds_exactly_the_planted_stale_keys_and_repair_removes_them(lab, spark, monkeypatch,
                                                                          redis_variant):
    if redis_variant == "redis-cluster":      # keys on three masters: SCAN each, MGET per node
        use_redis_cluster(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(64), name VARCHAR(64), "
            "score DECIMAL(8,2))")
    rows = [(i, f"a{i}@x.org", f"name {i}", f"{i}.50") for i in range(1, 201)]
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO users VALUES (%s, %s, %s, %s)", rows)
    cfg = lab.write_config({"users": USERS})
    table = f"{lab.db}.users"

    def value(i, name=None):
        return ('{"id": %d, "email": "a%d@x.org", "name": "%s", "score": "%d.50"}'
                % (i, i, name or f"name {i}", i)).encode()
    pipe = lab.redis.pipeline(transaction=False)
    for i, email, _, _ in rows:
        if i not in (5, 6):                                   # planted: 2 rows not cached
            pipe.set(f"{lab.prefix}user:{i}", value(i), ex=900)
        pipe.set(f"{lab.prefix}user:email:{email}", value(i), ex=900)
    stale = {f"{lab.prefix}user:{i}" for i in (10, 20, 30)} | {f"{lab.prefix}user:email:a40@x.org"}
    for key in stale:
        pipe.set(key, value(int(re.search(r"\d+", key.rsplit(":", 1)[1]).group()), "old name"))
    pipe.set(f"{lab.prefix}user:999", value(999), ex=900)      # planted: a deleted row's key
    pipe.set(f"{lab.prefix}user:7", b"opaque-binary", ex=900)  # planted: not checkable
    pipe.execute()

    runner = CliRunner()
    result = runner.invoke(cli, ["audit", "--config", cfg, "--table", table, "--partitions", "3"],
                           env=lab.stack.env)
    assert result.exit_code == 4, result.output               # 5/399 cached entries are wrong
    assert f"audit {table} (rows): done, 200 of 200 in" in result.stderr   # no terminal: lines
    report = json.loads(result.stdout)
    assert set(report["stale_keys"]) == stale
    assert report["extra_keys"] == [f"{lab.prefix}user:999"]
    assert (report["rows"], report["stale"], report["missing"], report["extra"],
            report["unverified"], report["consistent"]) == (200, 4, 2, 1, 1, 400 - 4 - 2 - 1)
    assert report["staleness_ratio"] == round(5 / (393 + 4 + 1 + 1), 6)
    assert lab.cached(*(k[len(lab.prefix):] for k in stale)) != []   # nothing touched

    result = runner.invoke(cli, ["audit", "--config", cfg, "--table", table, "--repair"],
                           env=lab.stack.env)
    assert json.loads(result.stdout)["repaired"] == 5, result.output
    assert not any(lab.redis.exists(k) for k in [*stale, f"{lab.prefix}user:999"])
    assert lab.redis.exists(f"{lab.prefix}user:11") and lab.redis.exists(f"{lab.prefix}user:7")

    result = runner.invoke(cli, ["audit", "--config", cfg, "--table", table, "--sample", "50"],
                           env=lab.stack.env)
    assert result.exit_code == 0, result.output
    sampled = json.loads(result.stdout)
    assert sampled["stale"] == 0 and sampled["extra"] is None and sampled["rows"] == 50


def test_one_scan_for_every_partition_copy_of_a_truncate_each_in_its_own_task(lab, spark):
    """The tailer publishes a TRUNCATE to each of the 3 partitions; with one task per
    partition, the first task's copy scans and the other two reuse its scan (the job store)."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(64) NOT NULL)")
    cfg = lab.write_config({"users": USERS}, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    cache_everything(lab, [*(f"user:{i}" for i in range(200)),
                           *(f"user:email:u{i}@x.org" for i in range(100))], extra=("order:1",))
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: len(lab.topic_records()) == 3, 60, what="the TRUNCATE on every partition")
    engine = run_spark_engine(lab, spark, cfg, lab.tmp / "ts-ck", 3, per_slot=False)
    s = engine.stats
    assert (s.consumed, s.table_invalidations) == (3, 3)
    assert (s.table_scans, s.table_scans_reused, s.table_keys_deleted) == (1, 2, 300)
    assert set(redis_state(lab)) == {f"{lab.prefix}order:1".encode()}


def test_spark_engine_runs_the_delayed_second_delete(lab, spark):
    rec = Recorder(lab)
    rec.change("users", "update", {"id": 1, "email": "d@x.org"}, {"id": 1, "email": "d2@x.org"})
    rec.flush()
    cfg = lab.write_config({"users": {**USERS, "double_delete": 1.5}})
    refilled = []

    def refill(report):                  # a reader refills the old row right after the delete
        lab.cache("user:1")
        refilled.append(lab.cached("user:1"))
    engine = run_spark_engine(lab, spark, cfg, lab.tmp / "dd-ck", 1, on_batch=refill)
    assert engine.stats.applied == 1 and refilled == [["user:1"]]
    wait_for(lambda: lab.cached("user:1") == [], 60, what="the delayed second delete")


def test_a_second_delete_survives_the_loss_of_the_executor_that_applied_the_first(lab, spark):
    """The executor dies after its task applied and confirmed a double-delete event, before
    the task returned: the retry finds the event done (a duplicate), still hands its plan to
    the driver, and the driver's second delete removes what a reader wrote back meanwhile."""
    rec = Recorder(lab)
    first = rec.change("users", "update", {"id": 1, "email": "d@x.org"},
                       {"id": 1, "email": "d2@x.org"}, partition=0)
    for i in range(400):      # the same task's further work: one dedup round trip each
        rec.change("orders", "insert", None, {"id": 5000 + i, "user_id": 1}, partition=0)
    rec.flush()
    lab.cache("user:1")
    group = f"g-ddloss-{lab.suffix}"
    cfg = config_for_group(lab, {"users": {**USERS, "double_delete": 1.0}, "orders": ORDERS},
                           group, "ddloss.yaml", batch_size=1)
    engine = build_spark_engine(lab.settings(cfg), spark, str(lab.tmp / "ddloss-ck"))
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: (first, "done") in dedup_records(lab, group), 180, interval=0.05,
                 what="the double-delete event applied and confirmed by its task")
        assert not engine.batches, "the task returned before its executor could be killed"
        app = spark.sparkContext.applicationId
        for pid, _, _ in executors_of({app}):
            os.kill(pid, signal.SIGKILL)
        lab.cache("user:1")                 # a reader writes the old row back
        wait_for(lambda: engine.stats.consumed >= rec.count or not thread.is_alive(), 240,
                 interval=0.2, what="the batch retried on a new executor")
        assert engine.stats.consumed == rec.count and engine.stats.duplicates >= 1
        wait_for(lambda: lab.cached("user:1") == [], 60, what="the driver's second delete")
    finally:
        engine.stop()
        thread.join(60)


# -- snapshot ----------------------------------------------------------------------------------------
def test_spark_snapshot_with_changes_while_it_reads_ends_with_exactly_the_rows_of_mysql(lab, spark):
    from cachesync.commands.snapshot import run_snapshot
    from tests.integration.test_snapshot import USERS as UPDATE_USERS, db_state, redis_state, \
        users_pipeline
    rows = 400
    cfg, engine = users_pipeline(lab, UPDATE_USERS, rows)
    settings = lab.settings(cfg)

    dry = run_snapshot(settings, engine_kind="spark", dry_run=True, partitions=3, spark=spark,
                       show_progress=False).tables[f"{lab.db}.users"]
    assert (dry.rows, dry.keys, dry.written) == (rows, 2 * rows, 0) and redis_state(lab) == {}

    changes = {"n": 0}

    def churn():                      # updates and deletes while the splits are read
        while not stop.is_set() and changes["n"] < 120:
            i = changes["n"]
            if i % 3 == 0:
                lab.sql("DELETE FROM users WHERE id = %s", (i * 3,))
            else:
                lab.sql("UPDATE users SET name = %s WHERE id = %s", (f"changed {i}", i * 3))
            changes["n"] += 1
    stop = threading.Event()
    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        report = run_snapshot(settings, engine_kind="spark", partitions=3, rate=300, spark=spark,
                              show_progress=False)
    finally:
        stop.set()
        writer.join(30)
    summary = report.tables[f"{lab.db}.users"]
    assert changes["n"] > 0 and summary.written > 0
    assert summary.written + summary.refused == summary.keys == 2 * summary.rows
    wait_for(lambda: engine.stats.applied >= changes["n"], 120, what="the consumer applying the churn")
    wait_for(lambda: redis_state(lab) == db_state(lab), 60, interval=0.5,
             what="Redis holding exactly MySQL's rows")


def test_spark_prefill_of_a_delete_mode_table_with_changes_while_it_reads_leaves_nothing_stale(
        lab, spark):
    from cachesync.commands.snapshot import run_snapshot
    from tests.integration.test_snapshot import PREFILL, db_state, redis_state, users_pipeline
    rows = 400
    cfg, engine = users_pipeline(lab, PREFILL, rows)
    changes, stop = {"n": 0}, threading.Event()

    def churn():                      # updates, email moves and deletes while the splits fill
        while not stop.is_set() and changes["n"] < 120:
            i = changes["n"]
            statement = ("DELETE FROM users WHERE id = %s" if i % 3 == 0 else
                         "UPDATE users SET email = CONCAT('moved', id, '@x') WHERE id = %s"
                         if i % 3 == 1 else "UPDATE users SET name = 'changed' WHERE id = %s")
            lab.sql(statement, (i * 3,))
            changes["n"] += 1
    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        report = run_snapshot(lab.settings(cfg), engine_kind="spark", partitions=3, rate=300,
                              chunk=50, spark=spark, show_progress=False)
    finally:
        stop.set()
        writer.join(30)
    summary = report.tables[f"{lab.db}.users"]
    assert changes["n"] > 0 and 0 < summary.rows <= rows and summary.written > 0   # deletes
    assert summary.written + summary.refused + summary.kept == summary.keys == 2 * summary.rows
    wait_for(lambda: engine.stats.applied >= changes["n"], 120, what="the consumer applying the churn")
    cached, expected = redis_state(lab), db_state(lab)
    assert cached and all(expected.get(key) == value for key, value in cached.items())
