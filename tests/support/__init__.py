"""Helpers for tests on the real services: isolation, child processes, waiting on conditions."""

from __future__ import annotations

import json
from dataclasses import dataclass
import os
import re
import signal
import urllib.error
import urllib.request
import subprocess
import sys
import threading
import time
import uuid

import yaml
from prometheus_client.parser import text_string_to_metric_families
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from cachesync.runtime import config
from cachesync.consumer.adapters.mysql_dedup import rows_sql
from cachesync.schema.event import ChangeEvent, decode_record, pack_elements
from cachesync.schema.keys import kafka_key
from cachesync.devstack import DevStack
from cachesync.devstack import wait_for as _wait_for
from cachesync.wiring import build_dedup, build_engine

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A wait without its own bound: what a test awaits on the real services (a process start, a
# consumer group join, a pipeline's first batch) takes several times longer on a loaded CI
# host than on a dev box; a wait returns as soon as its condition holds, so a green run
# costs nothing more.
WAIT_S = 60.0


def wait_for(condition, timeout: float = WAIT_S, what: str = "condition",
             interval: float = 0.02):
    """Poll ``condition`` until truthy and return its value; raises TimeoutError naming
    ``what`` (cachesync.devstack.wait_for with the tests' default bound)."""
    return _wait_for(condition, timeout, what, interval)


class Lab:
    """Everything one test needs, isolated by a random suffix."""

    def __init__(self, stack: DevStack, tmp_path, test_name: str):
        self.stack = stack
        self.tmp = tmp_path
        self.suffix = uuid.uuid4().hex[:8]
        self.db = f"t_{self.suffix}"
        self.topic = f"cs.{self.suffix}.changes"
        self.dlq = f"cs.{self.suffix}.dlq"
        self.prefix = f"{self.suffix}:"
        self.redis = stack.redis()
        self._tables_seen = False
        self._config: str | None = None      # the last config written (dedup_rows reads it)
        self._procs: list[subprocess.Popen] = []
        self._threads: list[tuple[threading.Thread, object]] = []
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.db}")
            cur.execute(f"GRANT SELECT ON {self.db}.* TO cachesync@'127.0.0.1'")
        create_topics(stack.bootstrap, {self.topic: 3, self.dlq: 1})

    # -- configuration -------------------------------------------------------------
    def write_config(self, tables: dict, tailer: dict | None = None, consumer: dict | None = None,
                     name: str = "cachesync.yaml", kafka: dict | None = None) -> str:
        doc = {"kafka": {"topic": self.topic, "dead_letter_topic": self.dlq,
                         "group_id": f"g-{self.suffix}", **(kafka or {})},
               # heartbeats off unless a test asks (they add events to exact counts);
               # any free metrics port, so parallel processes never collide
               "tailer": {"name": f"tailer-{self.suffix}", "server_id": 90000 + int(self.suffix[:4], 16),
                          "heartbeat_interval_s": 0, **(tailer or {})},
               "consumer": {"poll_timeout_s": 0.05, **(consumer or {})},
               "metrics": {"listen": "127.0.0.1:0", "probe_interval_s": 0.5},
               "tables": {f"{self.db}.{t}": self._prefixed(spec) for t, spec in tables.items()}}
        path = self.tmp / name
        path.write_text(yaml.safe_dump(doc))
        self._config = str(path)
        return str(path)

    def _prefixed(self, spec: dict) -> dict:
        """A table's spec with this lab's key prefix on its templates and explicit-key patterns."""
        return {**spec, **{field: [self.prefix + k for k in spec[field]]
                           for field in ("keys", "explicit_keys") if field in spec}}

    def settings(self, config_path: str):
        return config.load(config_path, {**os.environ, **self.stack.env})

    # -- processes ------------------------------------------------------------------
    def spawn(self, command: str, config_path: str) -> subprocess.Popen:
        return spawn(self, config_path, command)

    def start_tailer(self, config_path: str) -> subprocess.Popen:
        """Start `cachesync tail` and wait until it stored its start checkpoint."""
        before = self.checkpoint_updated_at()
        proc = self.spawn("tail", config_path)
        wait_for(lambda: self._alive(proc) and self.checkpoint_updated_at() != before,
                 60, what="the tailer's start checkpoint")
        return proc

    def start_engine(self, config_path: str):
        """The python engine in a thread of this process, so the test can read its stats."""
        engine = build_engine(self.settings(config_path))
        thread = threading.Thread(target=engine.run, daemon=True)
        thread.start()
        self._threads.append((thread, engine))
        return engine

    def stop_engine(self, engine) -> None:
        engine.stop()
        for thread, e in self._threads:
            if e is engine:
                thread.join(30)
                engine.close()

    def _alive(self, proc) -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"process exited {proc.returncode}:\n{self.log(proc)[-5000:]}")
        return True

    @staticmethod
    def log(proc) -> str:
        """The child's whole output: a line logged at its start must not have scrolled out
        of what a test searches because a loaded host made it log more (retries, waits)."""
        with open(proc.log_path) as f:
            return f.read()

    @staticmethod
    def kill9(proc) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    # -- state --------------------------------------------------------------------------
    def sql(self, statement: str, params=()):
        with self.stack.admin(self.db) as conn, conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall()

    def checkpoint_updated_at(self):
        rows = self.sql("SELECT updated_at FROM cachesync.cachesync_checkpoint WHERE name = %s",
                        (f"tailer-{self.suffix}",)) if self._state_tables_exist() else ()
        return rows[0][0] if rows else None

    def _state_tables_exist(self) -> bool:
        # Polled inside wait loops; once the tables exist they stay, so ask only until then.
        if not self._tables_seen:
            self._tables_seen = bool(self.sql(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = "
                "'cachesync' AND table_name = 'cachesync_checkpoint'"))
        return self._tables_seen

    def dedup_rows(self, status: str | None = None) -> int:
        """The group's dedup records (``status``: claimed or done) in the dedup store the
        last written config names (``consumer.dedup_store``)."""
        if self._config is None:
            raise AssertionError("dedup_rows: no config written yet")
        settings = self.settings(self._config)
        c = settings.consumer
        if c.dedup_store == "mysql" and c.dedup_mysql_layout == "rows" and not c.dedup_mysql_host:
            query = f"SELECT COUNT(*) FROM {rows_sql('cachesync')} WHERE ns = %s"
            params = [settings.dedup_namespace]
            if status:
                query += " AND status = %s"
                params.append(status)
            return self.sql(query, params)[0][0] if self._state_tables_exist() else 0
        store = build_dedup(settings)
        try:
            counts = store.counts()
        finally:
            store.close()
        return counts[status] if status else sum(counts.values())

    def topic_records(self, topic: str | None = None, timeout_s: float = 10.0,
                      bootstrap: str | None = None, **security) -> list:
        """Every record currently in ``topic`` (default: the change topic), on the devstack's
        broker or on ``bootstrap`` with kafka-python ``security`` options (a secured variant)."""
        topic = topic or self.topic
        consumer = KafkaConsumer(bootstrap_servers=bootstrap or self.stack.bootstrap,
                                 enable_auto_commit=False, group_id=None, **security)
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(partitions)
        out = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(records)
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end")
        consumer.close()
        return out

    def topic_events(self, topic: str | None = None, **options) -> list["Delivered"]:
        """Every event in ``topic`` (default: the change topic), a pack's one by one, in record
        order: what ``topic_records`` gives, per event instead of per record."""
        out = []
        for record in self.topic_records(topic, **options):
            events = decode_record(record.value)
            # a pack's elements split once per record, as the consumer core tells packs apart
            values = pack_elements(record.value) if len(events) > 1 else [record.value]
            out.extend(Delivered(record, e, v) for e, v in zip(events, values))
        return out

    def settled_records(self, engine, timeout_s: float = 60.0) -> list["Delivered"]:
        """The change topic's events (``topic_events``) once ``engine`` has consumed exactly
        what it holds.

        Late re-publishes (a producer killed after its send, before its checkpoint or
        mark) can land after the work looks finished; waiting for the two counts to
        meet gives a snapshot the consumer's stats can be compared with.
        """
        def snapshot():
            events = self.topic_events()
            return events if engine.stats.consumed == len(events) else None
        return wait_for(snapshot, timeout_s, interval=0.5, what="the consumer to read every record")

    def produce_raw(self, value: bytes, key: bytes = b"garbage") -> None:
        producer = KafkaProducer(bootstrap_servers=self.stack.bootstrap, acks="all")
        producer.send(self.topic, key=key, value=value).get(timeout=30)
        producer.close()

    def republish(self) -> int:
        """Send every record of the change topic again, to its partition, with its key,
        value and headers: what a tailer that crashed before its checkpoint re-publishes.
        Returns how many records were sent."""
        records = self.topic_records()
        producer = KafkaProducer(bootstrap_servers=self.stack.bootstrap, acks="all")
        for r in records:
            producer.send(self.topic, key=r.key, value=r.value, headers=r.headers,
                          partition=r.partition)
        producer.flush(30)
        producer.close()
        return len(records)

    def cache(self, *keys: str) -> None:
        for k in keys:
            self.redis.set(self.prefix + k, b"cached", ex=600)

    def cached(self, *keys: str) -> list[str]:
        return [k for k in keys if self.redis.exists(self.prefix + k)]

    def close(self) -> None:
        try:
            for thread, engine in self._threads:
                engine.stop()
                thread.join(30)
                engine.close()
        finally:
            # whatever the engines raised, no child outlives its test: a tailer left running
            # writes its heartbeat into every later test's binlog
            for proc in self._procs:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        with self.stack.admin() as conn, conn.cursor() as cur:
            # the grants on the database's tables (the outbox relay's), while they still
            # exist: a grant left on a dropped table cannot be copied to another account
            cur.execute("SHOW GRANTS FOR cachesync@'127.0.0.1'")
            for table in re.findall(rf" ON `{self.db}`\.(`[^`]+`) TO ",
                                    "\n".join(g for (g,) in cur.fetchall())):
                cur.execute(f"REVOKE ALL PRIVILEGES ON {self.db}.{table} "
                            "FROM cachesync@'127.0.0.1'")
            cur.execute(f"DROP DATABASE IF EXISTS {self.db}")
            # every grant on the database (a test may add REFERENCES, say), not only SELECT
            cur.execute(f"REVOKE ALL PRIVILEGES ON {self.db}.* FROM cachesync@'127.0.0.1'")


def create_topics(bootstrap: str, partitions: dict[str, int], **client) -> None:
    """Create ``{topic: partitions}`` (replication 1) unless they exist; ``client`` are extra
    KafkaAdminClient options (security)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client)
    try:
        try:
            admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
        except TopicAlreadyExistsError:
            pass
        # the broker acknowledges the creation before its metadata shows the topic with a
        # leader per partition (KRaft): a test reading the topic at once would find none
        admin.wait_for_topics(list(partitions), timeout_ms=60_000)
    finally:
        admin.close()


class UsersWriter(threading.Thread):
    """Commits ``rows_per_txn`` new ``users`` rows per transaction until ``stop()``.

    ``committed`` holds the ids of every committed row, in commit order.
    """

    def __init__(self, lab: Lab, rows_per_txn: int):
        super().__init__(daemon=True)
        self._lab, self._n = lab, rows_per_txn
        self._stop_writing = threading.Event()
        self.committed: list[int] = []

    def run(self) -> None:
        n = self._n
        with self._lab.stack.admin(self._lab.db, autocommit=False) as conn:
            i = 0
            while not self._stop_writing.is_set():
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO users VALUES (%s, %s, 'w')",
                                    [(i * n + j, f"{i}-{j}@x") for j in range(n)])
                conn.commit()
                self.committed.extend(range(i * n, i * n + n))
                i += 1

    def stop(self) -> None:
        self._stop_writing.set()
        self.join()


# -- outbox helpers (appended for tests/integration/test_outbox.py) -----------------------
def wait_keys_gone(lab: Lab, ids, template: str = "user:{}", timeout_s: float = 120) -> None:
    """Wait until none of the lab's keys ``template.format(id)`` exists (every committed row's
    key invalidated); asserts that there is something to wait for."""
    ids = list(ids)
    assert ids, "no committed row to check"

    def left():
        pipe = lab.redis.pipeline(transaction=False)
        for i in ids:
            pipe.exists(lab.prefix + template.format(i))
        return [i for i, found in zip(ids, pipe.execute()) if found]
    wait_for(lambda: not left(), timeout_s, interval=0.5, what="every committed row's key invalidated")


def add_config_sections(config_path: str, **sections) -> str:
    """Merge extra sections (e.g. ``relay={...}``) into a config file written by Lab."""
    with open(config_path) as f:
        doc = yaml.safe_load(f)
    for name, values in sections.items():
        doc[name] = {**doc.get(name, {}), **values}
    with open(config_path, "w") as f:
        yaml.safe_dump(doc, f)
    return config_path


def prepare_outbox(lab: Lab) -> None:
    """Create the outbox table in the lab's database and grant the relay its least privilege."""
    from cachesync.producer_outbox.outbox import ensure_outbox_table
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        ensure_outbox_table(conn)
        with conn.cursor() as cur:
            cur.execute(f"GRANT SELECT, UPDATE, DELETE ON {lab.db}.cachesync_outbox "
                        "TO cachesync@'127.0.0.1'")


def stack_command(*args: str) -> None:
    """Run devstack/stack.sh (e.g. ``"down", "kafka"``) with this process's environment."""
    script = os.path.join(REPO, "devstack", "stack.sh")
    done = subprocess.run([script, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=600)      # above devstack's own waits (a JVM's start)
    if done.returncode != 0:    # say why: its own lines (the reason), then the log it showed
        said = [line for line in done.stderr.splitlines() if line.startswith("devstack:")]
        raise AssertionError(f"devstack/stack.sh {' '.join(args)} exited {done.returncode}: "
                             + "\n".join(said[-10:]) + f"\n-----\n{done.stderr[-2000:]}")


def group_lag(lab: Lab) -> int:
    """Records of the change topic past the lab's group's committed offsets."""
    from cachesync.probes import KafkaOffsets
    offsets = KafkaOffsets(lab.stack.bootstrap)
    try:
        return sum(offsets.consumer_lag(f"g-{lab.suffix}", lab.topic).values())
    finally:
        offsets.close()


def status_json(lab: Lab, config_path: str, env: dict | None = None) -> tuple[int, dict]:
    """``cachesync status --json`` as a child process: (exit code, document)."""
    out = subprocess.run([sys.executable, "-m", "cachesync", "status", "--json", "--config",
                          config_path], env={**os.environ, **lab.stack.env, **(env or {})},
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def address(lab, proc) -> str:
    """The host:port the child logged for its metrics server."""
    def find():
        lab._alive(proc)
        m = re.search(r"metrics and health on http://(\S+) ", lab.log(proc))
        return m and m.group(1)
    return wait_for(find, 60, interval=0.1, what="the metrics server's address")


def scrape(addr: str) -> dict[tuple[str, tuple], float]:
    """Every sample as {(name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def cli(lab, *args):
    return subprocess.run([sys.executable, "-m", "cachesync", *args], capture_output=True,
                          text=True, env={**os.environ, **lab.stack.env}, timeout=120)


def spawn(lab, cfg, *args, env=None):
    """`cachesync <args> --config cfg` as a child process, output in the lab's tmp dir."""
    log = open(lab.tmp / f"{'-'.join(args)}-{len(lab._procs)}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cachesync", *args, "--config", cfg],
                            env={**os.environ, **lab.stack.env, **(env or {})}, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proc.log_path = log.name
    lab._procs.append(proc)     # lab.close() terminates what is still running
    return proc


def start(lab, cfg, *args, env=None):
    """Spawn (``env`` added to the environment) and wait until its tailer stored the start
    checkpoint."""
    before = lab.checkpoint_updated_at()
    proc = spawn(lab, cfg, *args, env=env)
    wait_for(lambda: lab._alive(proc) and lab.checkpoint_updated_at() != before, 60,
             what=f"`cachesync {' '.join(args)}` to store its start checkpoint")
    return proc


def endpoints(lab, proc, count: int) -> list[str]:
    """The metrics endpoints the process logged (the lab's config asks for port 0)."""
    def found():
        urls = re.findall(r"metrics and health on (http://\S+) ", lab.log(proc))
        return urls if len(urls) == count else None
    return wait_for(found, 60, what=f"{count} metrics endpoint(s) in the log")


def status_of(addr: str, path: str) -> int:
    """The HTTP status of ``http://<addr><path>`` (an error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def metrics_showing(urls: list[str], lines: list[str], timeout_s: float = 30) -> str:
    """The endpoints' /metrics text (joined) once it holds every one of ``lines``.

    Counters move after what a test can see elsewhere (a dedup record is confirmed before
    its batch is counted; the lag sample is taken after the offsets' commit; a tailer counts
    a row after its send returns, which may be after the consumer applied it), so a test
    awaits the counts themselves. On a timeout, names the lines still missing."""
    last = [""]

    def showing():
        last[0] = "\n".join(http_get(url + "/metrics") for url in urls)
        return last[0] if all(line in last[0] for line in lines) else None
    try:
        return wait_for(showing, timeout_s, interval=0.2, what=f"/metrics showing {lines}")
    except TimeoutError as e:
        missing = [line for line in lines if line not in last[0]]
        raise AssertionError(f"{e}; missing {missing} in:\n{last[0][-3000:]}") from None


@dataclass(frozen=True)
class Delivered:
    """One event of a topic as if it had been sent alone (packs unpacked): the record's
    partition and offset, the event's own ``id`` header, Kafka key and bytes."""

    record: object          # the ConsumerRecord that carried it
    event: ChangeEvent
    value: bytes

    @property
    def partition(self) -> int:
        return self.record.partition

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [("id", self.event.id.encode("ascii"))]

    @property
    def key(self) -> bytes:
        return kafka_key(self.event.db, self.event.table, self.event.pk).encode("utf-8")
