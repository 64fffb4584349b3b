"""Outbox: events/s and commit -> publish latency of the three ways to publish an outbox.

Each path publishes the same outbox table to its own topic through the same
KafkaPublisher, alone (the others stopped), runs alternating in order:

* ``relay``: cachesync's polling relay (lease with FOR UPDATE SKIP LOCKED, marks
  ``published_at`` after the ack), for deployments without binlog access;
* ``naive``: a ``seq > last_id`` poller, the baseline (it skips late commits);
* ``binlog``: the tailer reading the outbox from the binlog (``tailer.outbox_tables``),
  default settings, started from the GTID position before the rows.

* throughput: N rows written up front (transactions of 50); time until Kafka
  acknowledged every row; median of the runs;
* latency: W writers emit for D seconds, 1 transaction in 10 held open a few ms after
  its INSERT so that commits come out of seq order; latency = commit returned ->
  Kafka ack. The naive poller's watermark jumps past rows still uncommitted; those it
  never publishes are counted as ``skipped``.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

from bench.common import (Sandbox, Worker, log, percentile, ratio, summarize, topic_events,
                          wait_for)
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.binlog.preflight import read_server_info
from cachesync.wiring import build_tailer, mysql_params
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.outbox import OutboxRow, emit, ensure_outbox_table, event_kafka_key, to_event
from cachesync.producer_outbox.publish.kafka_publisher import KafkaPublisher
from cachesync.runtime.config import RelaySettings
from cachesync.producer_outbox.outbox_relay.relay import Relay
from cachesync.producer_outbox.outbox_relay.store import OutboxStore
from cachesync.schema.event import PACK_PREFIX, decode_record, encode

NAME = "outbox"
SIZES = {"full": (50_000, 4, 15.0), "quick": (5_000, 4, 5.0)}   # rows, writers, seconds
TXN_ROWS = 50
LATE_COMMIT = (0.1, 0.05)          # share of transactions held open, for up to this many s
OPTIONS = RelaySettings()          # the relay's defaults: poll 0.1 s, burst 500
PATHS = ("relay", "naive", "binlog")
THROUGHPUT_PATHS = (*PATHS, "binlog_unpacked")   # binlog_unpacked: tailer.pack_rows 1
TARGET_EVENTS_PER_S = 10_000       # issue 17, target 4
THROUGHPUT_TIMEOUT_S = 300
_NAIVE = ("SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, cache_keys, "
          "UNIX_TIMESTAMP(created_at), attempts FROM cachesync_outbox WHERE seq > %s "
          "ORDER BY seq LIMIT %s")


def run(stack=None, quick: bool = False, runs: int = 1) -> dict:
    """Every path on a fresh sandbox; ``run(True)`` means quick with the default stack."""
    if isinstance(stack, bool):
        stack, quick = None, stack
    if stack is None:
        from bench.common import Stack
        stack = Stack()
    n, writers, seconds = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    try:
        params = _prepare(box)
        throughput = _throughput(box, params, n, runs)
        latency = _latency(box, params, writers, seconds, runs)
        binlog = throughput["binlog"]["median"]["events_per_s"]
        return {
            "description": "outbox paths on one table and one KafkaPublisher: the relay "
                           "(FOR UPDATE SKIP LOCKED lease), a naive seq > last_id poller, and "
                           "the tailer reading the outbox from the binlog (tailer.outbox_tables, "
                           "default settings); each path alone on the same N rows",
            "params": {"rows": n, "txn_rows": TXN_ROWS, "writers": writers, "seconds": seconds,
                       "late_commit_share": LATE_COMMIT[0], "late_commit_max_s": LATE_COMMIT[1],
                       "poll_interval_s": OPTIONS.poll_interval_s,
                       "burst_limit": OPTIONS.burst_limit, "runs": runs},
            "throughput": throughput, "latency": latency,
            "ratio_relay_to_naive_events_per_s": ratio(throughput["relay"]["median"]["events_per_s"],
                                                       throughput["naive"]["median"]["events_per_s"]),
            "ratio_binlog_to_naive_events_per_s": ratio(binlog,
                                                        throughput["naive"]["median"]["events_per_s"]),
            "target": f">= {TARGET_EVENTS_PER_S} events/s end to end (binlog path)",
            "target_met": binlog is not None and binlog >= TARGET_EVENTS_PER_S,
        }
    finally:
        _revoke(box)
        box.cleanup()


def _prepare(box: Sandbox) -> MySQLParams:
    box.create_schema("CREATE TABLE unused (id BIGINT PRIMARY KEY)")   # the tailer's mapping
    with box.stack.admin(box.db, autocommit=False) as conn:
        ensure_outbox_table(conn)
        with conn.cursor() as cur:
            cur.execute(f"GRANT SELECT, UPDATE, DELETE ON `{box.db}`.cachesync_outbox "
                        "TO cachesync@'127.0.0.1'")
    env = box.stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        password = f.read().strip()
    return MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                       env["CACHESYNC_MYSQL_USER"], password, database=box.db)


def _revoke(box: Sandbox) -> None:
    try:
        box.stack.admin_sql(f"REVOKE SELECT, UPDATE, DELETE ON `{box.db}`.cachesync_outbox "
                            "FROM cachesync@'127.0.0.1'")
    except Exception as e:  # the grant may not exist if setup failed early
        log(f"outbox: revoke skipped: {e}")


class TimedPublisher(KafkaPublisher):
    """Records the wall-clock time of each acknowledgement, by message id (every event's
    of a pack: the record's ``id`` header is only its first event's)."""

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap, client_id="cachesync-bench-outbox")
        self.acked: dict[str, float] = {}

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        def ack():
            now = time.time()
            ids = [e.id for e in decode_record(value)] if value.startswith(PACK_PREFIX) else [msg_id]
            for event_id in ids:
                self.acked.setdefault(event_id, now)
            on_ack()
        super().send(topic, key, value, msg_id, on_ack=ack, on_error=on_error,
                     partition=partition)


class NaivePoller:
    """The baseline: remember the highest seq seen and select ``seq > last``."""

    def __init__(self, params: MySQLParams, publisher: TimedPublisher, topic: str, db: str,
                 last: int):
        self._params, self._pub, self._topic, self._db = params, publisher, topic, db
        self.stop = threading.Event()
        self.last = last

    def run(self) -> None:
        conn = self._params.connect(autocommit=True)
        try:
            while not self.stop.is_set():
                with conn.cursor() as cur:
                    cur.execute(_NAIVE, (self.last, OPTIONS.burst_limit))
                    rows = [OutboxRow(int(r[0]), *r[1:7], float(r[7]), r[8]) for r in cur.fetchall()]
                for row in rows:
                    self._pub.send(self._topic, event_kafka_key(row, self._db),
                                   encode(to_event(row, self._db, "naive")), row.event_id,
                                   on_ack=lambda: None, on_error=lambda e: None)
                    self.last = row.seq
                if len(rows) < OPTIONS.burst_limit:
                    self.stop.wait(OPTIONS.poll_interval_s)
        finally:
            conn.close()


@dataclass
class Running:
    """One outbox path publishing to its own topic, in a worker thread."""

    name: str
    publisher: TimedPublisher
    topic: str
    stop: Callable[[], None]
    worker: Worker
    tailer: object = None

    def acked(self) -> int:
        """Events Kafka acknowledged (a packed record carries several)."""
        return self.tailer.acked if self.tailer is not None else len(self.publisher.acked)

    def close(self) -> None:
        self.stop()
        self.worker.join(30)
        if self.name != "relay":    # the relay closes its own; a tailer closes only what it made
            self.publisher.close()
        self.worker.check()


def _start(box: Sandbox, params: MySQLParams, name: str, since: dict) -> Running:
    """Start path ``name`` after ``since`` (``seq``: the naive watermark, ``gtid``: the
    tailer's checkpoint; the relay selects by state)."""
    pub, topic = TimedPublisher(box.stack.bootstrap), box.new_topic()
    if name == "relay":
        relay = Relay(OutboxStore(params.connect, box.db, "cachesync_outbox"), lambda: pub,
                      OPTIONS, topic, box.db, "bench")
        running = Running(name, pub, topic, relay.stop, Worker(relay.run, name))
    elif name == "naive":
        naive = NaivePoller(params, pub, topic, box.db, since["seq"])
        running = Running(name, pub, topic, naive.stop.set, Worker(naive.run, name))
    else:
        tailer = _binlog_tailer(box, pub, topic, since, 1 if name == "binlog_unpacked" else None)
        running = Running(name, pub, topic, tailer.stop, Worker(tailer.run, name), tailer)
    running.worker.start()
    return running


def _binlog_tailer(box: Sandbox, pub: TimedPublisher, topic: str, since: dict,
                   pack_rows: int | None):
    """The tailer with default settings plus tailer.outbox_tables (and ``pack_rows`` unless
    None), from ``since["gtid"]``."""
    section = {"outbox_tables": f"{box.db}.cachesync_outbox"}
    if pack_rows is not None:
        section["pack_rows"] = pack_rows
    cfg = box.write_config({f"{box.db}.unused": {"keys": [box.prefix + "unused:{id}"]}},
                           topic=topic, tailer=section)
    settings = box.settings(cfg)
    MySQLCheckpointStore(mysql_params(settings).connect, settings.tailer.name).save(
        Checkpoint(since["server"], gtid=since["gtid"]))
    return build_tailer(settings, publisher=pub)


def _position(box: Sandbox) -> dict:
    """Where each path starts to read: the highest seq and the binlog's GTID position now."""
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COALESCE(MAX(seq), 0) FROM cachesync_outbox")
        seq = cur.fetchone()[0]
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
        return {"seq": int(seq), "gtid": gtid, "server": read_server_info(conn).identity}


def _throughput(box, params, n: int, runs: int) -> dict:
    since = _position(box)
    log(f"outbox: writing {n} rows")
    _write_rows(box, n)
    results: dict[str, list] = {name: [] for name in THROUGHPUT_PATHS}
    for i in range(runs):
        for name in (THROUGHPUT_PATHS if i % 2 == 0 else THROUGHPUT_PATHS[::-1]):   # alternate
            _unpublish(box)
            results[name].append(_throughput_run(box, params, name, since, n))
            log(f"outbox: run {i + 1}/{runs} {name}: "
                f"{results[name][-1]['events_per_s']:.0f} events/s")
    out = {name: summarize(rs, ["events_per_s", "elapsed_s"]) for name, rs in results.items()}
    out["note"] = ("each path alone on the same N committed rows, time from its start until "
                   "Kafka acknowledged all N; the relay also marks published_at; the binlog "
                   "path is the tailer with default settings from the GTID before the writes, "
                   "binlog_unpacked the same with pack_rows 1 (one record per event); "
                   "their topics are checked to hold exactly the N event ids")
    return out


def _throughput_run(box, params, name: str, since: dict, n: int) -> dict:
    t0 = time.perf_counter()
    running = _start(box, params, name, since)
    try:
        while running.acked() < n:
            running.worker.check()
            if time.perf_counter() - t0 > THROUGHPUT_TIMEOUT_S:
                raise TimeoutError(f"outbox throughput: {name} acknowledged "
                                   f"{running.acked()}/{n} in {THROUGHPUT_TIMEOUT_S} s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
    finally:
        running.close()
    if running.tailer is not None:
        _, events, ids = topic_events(box.stack.bootstrap, running.topic)
        if (events, len(ids)) != (n, n):
            raise RuntimeError(f"binlog outbox topic holds {events} events ({len(ids)} ids), "
                               f"expected {n}")
    return {"events_per_s": round(n / elapsed, 1), "elapsed_s": round(elapsed, 3)}


def _unpublish(box) -> None:
    """Every row due again, so the relay publishes all of them in each of its runs."""
    box.stack.admin_sql(f"UPDATE `{box.db}`.cachesync_outbox SET published_at = NULL, "
                        "attempts = 0, next_attempt_at = NOW(6)")


def _write_rows(box, n: int) -> None:
    with box.stack.admin(box.db, autocommit=False) as conn:
        for i in range(n):
            emit(conn, "board", i % 100, "bumped", {"i": i}, keys=[f"{box.prefix}board:{i % 100}"])
            if i % TXN_ROWS == TXN_ROWS - 1:
                conn.commit()
        conn.commit()


def _latency(box, params, writers: int, seconds: float, runs: int) -> dict:
    results: dict[str, list] = {name: [] for name in PATHS}
    for i in range(runs):
        for name in (PATHS if i % 2 == 0 else PATHS[::-1]):
            results[name].append(_latency_run(box, params, name, writers, seconds))
            log(f"outbox: latency run {i + 1}/{runs} {name}: p99 {results[name][-1]['p99_ms']} ms")
    fields = ["events", "published", "skipped", "p50_ms", "p99_ms", "max_ms"]
    out = {name: summarize(rs, fields) for name, rs in results.items()}
    out["note"] = ("each path alone under the same workload: commit returned -> Kafka ack; "
                   "the naive poller never publishes rows its watermark passed ('skipped')")
    return out


def _latency_run(box, params, name: str, writers: int, seconds: float) -> dict:
    box.stack.admin_sql(f"UPDATE `{box.db}`.cachesync_outbox SET published_at = NOW(6) "
                        "WHERE published_at IS NULL")   # each phase starts clean
    running = _start(box, params, name, _position(box))
    try:
        _warm_up(box, running)
        committed: dict[str, float] = {}
        stop = threading.Event()
        threads = [Worker(lambda k=k: _emit_loop(box, k, committed, stop), f"writer-{k}")
                   for k in range(writers)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(30)
            t.check()
        acked = running.publisher.acked
        if name != "naive":
            wait_for(lambda: all(i in acked for i in committed), 120, f"{name} to publish all")
        else:
            time.sleep(1.0)       # give the naive poller a chance to catch up
    finally:
        running.close()
    return {"events": len(committed), **_lat(committed, running.publisher.acked)}


def _warm_up(box, running: Running) -> None:
    """One event through the path before the clock starts: its start-up is not latency."""
    with box.stack.admin(box.db, autocommit=False) as conn:
        event_id = emit(conn, "board", "warm-up", "bumped", {}, keys=[f"{box.prefix}warm"])
        conn.commit()
    wait_for(lambda: running.worker.check() or event_id in running.publisher.acked, 120,
             f"{running.name} to publish the warm-up event")


def _emit_loop(box, k: int, committed: dict, stop: threading.Event) -> None:
    rng = random.Random(k)
    with box.stack.admin(box.db, autocommit=False) as conn:
        while not stop.is_set():
            event_id = emit(conn, "board", f"{k}-{rng.randrange(10)}", "bumped", {"k": k},
                            keys=[f"{box.prefix}board:{k}"])
            if rng.random() < LATE_COMMIT[0]:
                time.sleep(rng.uniform(0, LATE_COMMIT[1]))   # commits after later seqs
            conn.commit()
            committed[event_id] = time.time()
            time.sleep(0.002)


def _lat(committed: dict, acked: dict) -> dict:
    ms = [(acked[i] - t) * 1000 for i, t in committed.items() if i in acked]
    return {"published": len(ms), "skipped": len(committed) - len(ms),
            "p50_ms": _r(percentile(ms, 50)), "p99_ms": _r(percentile(ms, 99)),
            "max_ms": _r(max(ms) if ms else None)}


def _r(x):
    return round(x, 2) if x is not None else None


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
