"""Outbox relay: events/s and emit->publish latency, next to a naive ``seq > last_id`` poller.

Both publish the same outbox table to their own topic through the same KafkaPublisher:

* throughput: N rows written up front; time until every row is Kafka-acknowledged
  (the relay also marks them published; the naive poller only keeps its watermark);
* latency: W writers emit for D seconds, 1 transaction in 10 held open a few ms after
  its INSERT so that commits come out of seq order; latency = commit returned ->
  Kafka ack. The naive poller's watermark jumps past rows still uncommitted; those it
  never publishes are counted as ``skipped``.
"""

from __future__ import annotations

import random
import threading
import time

from bench.common import Sandbox, Worker, log, percentile, ratio, wait_for
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.producer_outbox.outbox import OutboxRow, emit, ensure_outbox_table, event_kafka_key, to_event
from cachesync.producer_outbox.publisher import KafkaPublisher
from cachesync.config import RelaySettings
from cachesync.producer_outbox.relay import Relay
from cachesync.producer_outbox.relay_store import OutboxStore
from cachesync.schema.event import encode

NAME = "outbox"
SIZES = {"full": (50_000, 4, 15.0), "quick": (5_000, 4, 5.0)}   # rows, writers, seconds
TXN_ROWS = 50
LATE_COMMIT = (0.1, 0.05)          # share of transactions held open, for up to this many s
OPTIONS = RelaySettings()          # the relay's defaults: poll 0.1 s, burst 500
_NAIVE = ("SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, cache_keys, "
          "UNIX_TIMESTAMP(created_at), attempts FROM cachesync_outbox WHERE seq > %s "
          "ORDER BY seq LIMIT %s")


def run(stack=None, quick: bool = False, runs: int = 1) -> dict:
    """Both benchmarks on a fresh sandbox; ``run(True)`` means quick with the default stack."""
    if isinstance(stack, bool):
        stack, quick = None, stack
    if stack is None:
        from bench.common import Stack
        stack = Stack()
    n, writers, seconds = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    try:
        params = _prepare(box)
        throughput = _throughput(box, params, n)
        latency = _latency(box, params, writers, seconds)
        return {
            "description": "outbox relay (FOR UPDATE SKIP LOCKED lease) vs naive seq > last_id "
                           "poller, same table, same KafkaPublisher, measured in one run",
            "params": {"rows": n, "txn_rows": TXN_ROWS, "writers": writers, "seconds": seconds,
                       "late_commit_share": LATE_COMMIT[0], "late_commit_max_s": LATE_COMMIT[1],
                       "poll_interval_s": OPTIONS.poll_interval_s,
                       "burst_limit": OPTIONS.burst_limit},
            "throughput": throughput, "latency": latency,
            "ratio_relay_to_naive_events_per_s": ratio(throughput["relay_events_per_s"],
                                                       throughput["naive_events_per_s"]),
        }
    finally:
        _revoke(box)
        box.cleanup()


def _prepare(box: Sandbox) -> MySQLParams:
    box.create_schema()
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
    """Records the wall-clock time of each acknowledgement, by message id."""

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap, client_id="cachesync-bench-outbox")
        self.acked: dict[str, float] = {}

    def send(self, topic, key, value, msg_id, on_ack, on_error):
        def ack():
            self.acked.setdefault(msg_id, time.time())
            on_ack()
        super().send(topic, key, value, msg_id, on_ack=ack, on_error=on_error)


class NaivePoller:
    """The baseline: remember the highest seq seen and select ``seq > last``."""

    def __init__(self, params: MySQLParams, publisher: TimedPublisher, topic: str, db: str):
        self._params, self._pub, self._topic, self._db = params, publisher, topic, db
        self.stop = threading.Event()
        self.last = 0

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


def _start(box, params, label):
    """A relay and a naive poller, each with its own topic and timed publisher."""
    bootstrap = box.stack.bootstrap
    relay_pub, naive_pub = TimedPublisher(bootstrap), TimedPublisher(bootstrap)
    relay = Relay(OutboxStore(params.connect, box.db, "cachesync_outbox"), lambda: relay_pub,
                  OPTIONS, box.new_topic(), box.db, "bench")
    naive = NaivePoller(params, naive_pub, box.new_topic(), box.db)
    workers = [Worker(relay.run, f"{label}-relay"), Worker(naive.run, f"{label}-naive")]
    return relay, naive, relay_pub, naive_pub, workers


def _throughput(box, params, n: int) -> dict:
    log(f"outbox: writing {n} rows")
    _write_rows(box, n)
    relay, naive, relay_pub, naive_pub, workers = _start(box, params, "throughput")
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    done = {}
    while len(done) < 2:
        for name, pub in (("relay", relay_pub), ("naive", naive_pub)):
            if name not in done and len(pub.acked) >= n:
                done[name] = time.perf_counter() - t0
        if time.perf_counter() - t0 > 120:
            raise TimeoutError("outbox throughput: not every row acknowledged in 120 s")
        for w in workers:
            w.check()
        time.sleep(0.01)
    relay.stop()
    naive.stop.set()
    for w in workers:
        w.join(30)
    log(f"outbox: relay {n / done['relay']:.0f} ev/s, naive {n / done['naive']:.0f} ev/s")
    return {"relay_events_per_s": round(n / done["relay"], 1), "relay_elapsed_s": round(done["relay"], 3),
            "naive_events_per_s": round(n / done["naive"], 1), "naive_elapsed_s": round(done["naive"], 3),
            "note": "both run at once on the same rows; the relay also marks published_at"}


def _write_rows(box, n: int) -> None:
    with box.stack.admin(box.db, autocommit=False) as conn:
        for i in range(n):
            emit(conn, "board", i % 100, "bumped", {"i": i}, keys=[f"{box.prefix}board:{i % 100}"])
            if i % TXN_ROWS == TXN_ROWS - 1:
                conn.commit()
        conn.commit()


def _latency(box, params, writers: int, seconds: float) -> dict:
    box.stack.admin_sql(f"UPDATE `{box.db}`.cachesync_outbox SET published_at = NOW(6) "
                        "WHERE published_at IS NULL")   # the latency phase starts clean
    relay, naive, relay_pub, naive_pub, workers = _start(box, params, "latency")
    (naive.last,), = box.stack.admin_sql(f"SELECT COALESCE(MAX(seq), 0) FROM `{box.db}`.cachesync_outbox")
    for w in workers:
        w.start()
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
    wait_for(lambda: all(i in relay_pub.acked for i in committed), 120, "the relay to publish all")
    time.sleep(1.0)               # give the naive poller the same chance to catch up
    relay.stop()
    naive.stop.set()
    for w in workers:
        w.join(30)
    return {"events": len(committed),
            "relay": _lat(committed, relay_pub.acked), "naive": _lat(committed, naive_pub.acked)}


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
