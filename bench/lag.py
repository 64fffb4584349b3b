"""End-to-end lag: MySQL commit -> Redis key gone, through `cachesync tail` and `cachesync consume`.

Both run as child processes (their own interpreters, as deployed). Writer processes (one
per 2,500 commits/s asked, at nice WRITER_NICE: they stand for application hosts) commit
single-row transactions at a fixed rate (open loop: a writer never waits for the pipeline,
and a late commit does not delay the ones due after it), each on many connections at once
with raw COM_QUERY packets (``bench.commits``): pymysql's cursor cost so much CPU that the
writers, not the pipeline, capped the 2-core host at ~3,000 commits/s. The rows' keys are
cached in Redis before the clock starts. The rate achieved is reported beside the rate
asked (the writers share the host with the pipeline). Redis reports every key DEL or
UNLINK removed (key-event notifications, ``DelEvents``); a key's latency is the time from
the writer's commit returning to that report reaching the harness. A poll of the
outstanding keys every SAFETY_POLL_S catches a key gone without its report (counted as
``seen_by_poll``).

* baseline (measurement floor): same writer, same observer, same running pipeline, but
  the writer UNLINKs the keys itself right after their commits -> what the harness and the
  loaded machine add on their own;
* contender: the key is left to cachesync to delete (each row has two keys, the harness
  watches the first); each key's latency is also split where the tailer sent its row to
  Kafka (``GoneTimes``): the tailer's side and the consumer's side, and the consumer's share.

The soak and failover benchmarks use the same ``Harness`` with its in-thread writer and the
1-ms poll (``notified=False``).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import select
import threading
import time
from queue import Empty

import pymysql

from bench.common import (OVERLAP, EndOffsets, Sandbox, Worker, log, median, percentile, summarize,
                          topic_events, wait_for)
from bench.commits import Committer, query_packet
from bench.consumer import _drop_redis_dedup

NAME = "lag"
# (row changes/s, seconds) per figure, and the floor's seconds; the first rate is the target's
SIZES = {"full": (((1000, 60.0), (5000, 60.0), (10000, 60.0)), 10.0),
         "quick": (((1000, 5.0), (5000, 5.0), (10000, 5.0)), 2.0)}
TARGET_P99_MS = 100.0
# BENCH_LAG_RATES=10000 (or 5000,10000): measure only these rates, each as long as the size's
# first rate
RATES = os.environ.get("BENCH_LAG_RATES", "")
KEYS_PER_ROW = 2             # cache keys per row (issue 17, target 3: 2 keys per row)
# The consumer's dedup store (the config default: redis); BENCH_LAG_DEDUP_STORE=mysql compares.
DEDUP_STORE = os.environ.get("BENCH_LAG_DEDUP_STORE", "redis")
# The consumer's offset commits (config default: async); BENCH_LAG_OFFSET_COMMIT=sync compares.
OFFSET_COMMIT = os.environ.get("BENCH_LAG_OFFSET_COMMIT", "async")
# Transactions per second the writer commits at most; above it rows are grouped into
# multi-row transactions (one Python writer thread keeps up ~250 commits/s on the
# loaded 2-core host with the pipeline running beside it).
MAX_TXN_PER_S = 250
# measure_commits: single-row commits/s one writer process is asked for at most, and the
# connections it commits on (a connection carries one commit at a time: at 2,500/s and a
# commit taking up to ~10 ms on the loaded host, 24 keep every commit of the schedule going)
WRITER_TXN_PER_S = 2500
WRITER_CONNECTIONS = 24
INSERT_SQL = b"INSERT INTO lag (id, v, note) VALUES (%d, %d, 'row %d')"
WRITERS_START_S = 0.2        # from "every writer connected" to the first commit due
# The writer processes stand for application hosts: on this 2-core host, 20-40 of them at
# the default priority take most of the CPU from `tail` and `consume` (which run next to
# MySQL, as deployed). They run at this nice level; 0 measures them sharing the CPU equally.
WRITER_NICE = int(os.environ.get("BENCH_LAG_WRITER_NICE", "10"))
SEND_EVERY_S = 0.005         # how often a writer hands its committed keys to the poller
CONNECT_TIMEOUT_S = 120     # for every writer process to connect
PRECACHE_CHUNK = 2000        # keys cached per pipelined round trip before a measurement
DDL = "CREATE TABLE lag (id BIGINT PRIMARY KEY, v INT NOT NULL, note VARCHAR(64) NOT NULL)"
DRAIN_S = 15.0
POLL_SLEEP_S = 0.0005
SAFETY_POLL_S = 0.05         # the poll beside the notifications (DelEvents)
EARLY_MAX = 1_000_000        # notified keys remembered before their commit is registered
POLL_CHUNK = 5000            # keys per MGET of the poller
BACKLOG_ROUND_S = 0.01       # a poll round this long means a backlog: rest as long as it took


def run(stack, quick: bool, runs: int) -> dict:
    rates, floor_seconds = SIZES["quick" if quick else "full"]
    if RATES:
        rates = tuple((int(rate), rates[0][1]) for rate in RATES.split(","))
    box = Sandbox(stack, NAME)
    settings = None
    try:
        box.create_schema(DDL)
        topic = box.new_topic(3)
        # two keys per row (issue 17, target 3); the poller watches the first
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}",
                                                           box.prefix + "lag:note:{note}"]}},
                               topic=topic, consumer={"dedup_store": DEDUP_STORE,
                                                    "offset_commit": OFFSET_COMMIT,
                                                    "overlap_batches": OVERLAP},
                               metrics={"listen": "127.0.0.1:0"})   # a free port on a shared host
        settings = box.settings(cfg)
        log("lag: starting `cachesync tail` and `cachesync consume`")
        tail = box.spawn("tail", cfg)
        wait_for(lambda: _alive(box, tail) and _checkpoint_stored(stack, settings.tailer.name),
                 60, "the tailer's start checkpoint")
        consume = box.spawn("consume", cfg)
        gone = GoneTimes()
        harness = Harness(box, on_gone=gone.add, notified=True)
        fields = ["p50_ms", "p90_ms", "p99_ms", "max_ms", "achieved_rate", "commit_p50_ms",
                  "poll_interval_p50_ms", "missing"]
        figures = {}
        try:
            warm = harness.warm_up(lambda: _alive(box, tail) and _alive(box, consume))
            log(f"lag: pipeline warm, first key gone after {warm:.2f}s")
            for rate, seconds in rates:
                floor_runs, lag_runs = [], []
                for i in range(runs):
                    for self_delete in ((True, False) if i % 2 == 0 else (False, True)):
                        start = None if self_delete else gone.start(stack.bootstrap, topic)
                        result = harness.measure_commits(
                            rate, floor_seconds if self_delete else seconds, self_delete)
                        if not self_delete:
                            result.update(gone.split(stack.bootstrap, topic, start, box.prefix))
                            result["keys_per_s"] = round(result["achieved_rate"] * KEYS_PER_ROW, 1)
                        _alive(box, tail)
                        _alive(box, consume)
                        (floor_runs if self_delete else lag_runs).append(result)
                        log(f"lag: {rate}/s run {i + 1}/{runs} {result['what']}: p50 "
                            f"{result['p50_ms']} ms, p99 {result['p99_ms']} ms, max "
                            f"{result['max_ms']} ms at {result['achieved_rate']}/s")
                baseline = summarize(floor_runs, fields)
                contender = summarize(lag_runs, fields + SPLIT_FIELDS)
                figures[str(rate)] = {
                    "rate_per_s": rate, "seconds": seconds, "rows_per_txn": 1,
                    "baseline": {"name": "floor: the writer UNLINKs the keys right after its "
                                         "commit", **baseline},
                    "contender": {"name": "cachesync tail -> Kafka -> cachesync consume -> UNLINK",
                                  **contender},
                    "p50_above_floor_ms": _diff(contender["median"]["p50_ms"],
                                                baseline["median"]["p50_ms"]),
                    "p99_above_floor_ms": _diff(contender["median"]["p99_ms"],
                                                baseline["median"]["p99_ms"]),
                    "target_p99_ms": TARGET_P99_MS,
                }
        finally:
            harness.close()
        children = {name: _child_report(box, proc) for name, proc in (("tail", tail),
                                                                        ("consume", consume))}
        return {
            "description": "commit -> key-gone latency through cachesync tail + consume "
                           "(child processes) at fixed row-change rates",
            "params": {"rates": [list(x) for x in rates], "floor_seconds": floor_seconds,
                       "runs": runs, "partitions": 3,
                       "writers": f"one process per {WRITER_TXN_PER_S} commits/s asked, "
                                  f"{WRITER_CONNECTIONS} connections each, single-row "
                                  "autocommit INSERTs as raw COM_QUERY packets, open loop",
                       "writer_nice": WRITER_NICE,
                       "gone": "Redis's key-event notifications of DEL/UNLINK, read as they "
                               f"come; an MGET of the outstanding keys every {SAFETY_POLL_S * 1000:g} ms "
                               "for a key gone without one (seen_by_poll)",
                       "latency_from": "the writer's commit returning (measure_commits: the autocommit INSERT)",
                       "consumer": "config defaults (batch_size, poll_timeout_s)",
                       "keys_per_row": KEYS_PER_ROW,
                       "split": GoneTimes.__doc__.split("\n\n")[0].replace("\n", " "),
                       "dedup_store": DEDUP_STORE, "offset_commit": OFFSET_COMMIT,
                       "overlap_batches": OVERLAP},
            "rates": figures,
            "children": children,
        }
    finally:
        if DEDUP_STORE == "redis" and settings is not None:
            _drop_redis_dedup(box, settings.kafka.group_id)
        box.cleanup()


SPLIT_FIELDS = ["keys_per_s", "tailer_p50_ms", "tailer_p99_ms", "consumer_p50_ms",
                "consumer_p99_ms", "consumer_share"]


class GoneTimes:
    """Splits each key's commit -> gone latency at the moment the tailer sent its row to
    Kafka: the record's CreateTime, which kafka-python stamps at ``send`` (wall clock, ms).

    * tailer side: commit returned -> the tailer's send (binlog read, event built, packed);
    * consumer side: send -> key gone (Kafka's ack and fetch, dedup claim, DEL, poll).

    ``consumer_share`` is the consumer side's part of the mean latency.
    """

    def __init__(self):
        self._gone: dict[str, tuple[float, float]] = {}     # key -> (t_commit, t_gone)
        self._lock = threading.Lock()
        # time.time() - time.perf_counter(): CreateTime (wall) onto the writers' clock
        self._wall_offset = time.time() - time.perf_counter()

    def add(self, key: str, t_commit: float, t_gone: float) -> None:
        with self._lock:
            self._gone[key] = (t_commit, t_gone)

    def start(self, bootstrap: str, topic: str) -> dict:
        """Forget the keys of earlier runs; the topic's end offsets (where this run starts)."""
        with self._lock:
            self._gone.clear()
        offsets = EndOffsets(bootstrap, topic)
        try:
            return offsets.ends()
        finally:
            offsets.close()

    def split(self, bootstrap: str, topic: str, start: dict, prefix: str) -> dict:
        """The two sides' figures for the keys gone since ``start``."""
        sent: dict[str, float] = {}        # key -> first send (a re-publish comes later)

        def on_event(record, event) -> None:
            key = lag_key(prefix, event.pk[0][1])
            t = record.timestamp / 1000.0 - self._wall_offset
            sent[key] = min(t, sent.get(key, t))

        topic_events(bootstrap, topic, start, on_event)
        with self._lock:
            pairs = [(sent[k] - c, g - sent[k]) for k, (c, g) in self._gone.items() if k in sent]
        tailer = [t * 1000 for t, _ in pairs]
        consumer = [c * 1000 for _, c in pairs]
        total = sum(tailer) + sum(consumer)
        return {"split_keys": len(pairs),
                "tailer_p50_ms": _r(percentile(tailer, 50)), "tailer_p99_ms": _r(percentile(tailer, 99)),
                "consumer_p50_ms": _r(percentile(consumer, 50)),
                "consumer_p99_ms": _r(percentile(consumer, 99)),
                "consumer_share": round(sum(consumer) / total, 3) if total > 0 else None}


class DelEvents:
    """Keys Redis reports deleted: its key-event notifications on the ``del`` channel, which
    DEL and UNLINK publish (from a script too) for every key they removed.

    Polling 1,000 outstanding keys every millisecond took a fifth of a core from the host and
    kept Redis busy beside the consumer's deletes; a notification costs Redis one publish
    and the listener one regex match. ``notify-keyspace-events`` gets ``E`` and ``g`` added
    for the run and is put back by ``close``. The subscription is read from the raw socket
    (the messages are matched in whole chunks); only keys under ``prefix`` are returned.
    """

    def __init__(self, client, prefix: str):
        self._client = client
        self._old = client.config_get("notify-keyspace-events")["notify-keyspace-events"]
        client.config_set("notify-keyspace-events", "".join(sorted(set(self._old) | set("Eg"))))
        db = int(client.connection_pool.connection_kwargs.get("db", 0))
        channel = f"__keyevent@{db}__:del".encode()
        self._conn = client.connection_pool.make_connection()
        self._conn.connect()
        self._conn.send_command("SUBSCRIBE", channel)    # its reply is skipped with the rest
        self._sock = self._conn._sock
        self._buf = b""
        self._message = re.compile(rb"\$%d\r\n%s\r\n\$\d+\r\n(%s[^\r\n]*)\r\n" % (
            len(channel), re.escape(channel), re.escape(prefix.encode())))

    def read(self, timeout: float) -> list[str]:
        """The keys reported within ``timeout`` s (empty if none); raises ConnectionError
        when Redis closed the subscription."""
        if not select.select([self._sock], [], [], timeout)[0]:
            return []
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("Redis closed the key-event subscription")
        buf, end, keys = self._buf + chunk, 0, []
        for match in self._message.finditer(buf):
            keys.append(match.group(1).decode())
            end = match.end()
        # keep what may be the start of a message not wholly received
        self._buf = buf[max(end, buf.rfind(b"*", end)):]
        return keys

    def close(self) -> None:
        self._conn.disconnect()
        self._client.config_set("notify-keyspace-events", self._old)


def lag_key(prefix: str, row_id) -> str:
    """The watched cache key of row ``row_id`` (the mapping's first template, ``lag:{id}``)."""
    return f"{prefix}lag:{row_id}"


def _rows_per_txn(rate: float) -> int:
    return max(1, -(-int(rate) // MAX_TXN_PER_S))


class Harness:
    """The writer and poller; keys are tracked as outstanding between commit and gone.

    ``on_gone(key, t_commit, t_gone)``, if given, is called by the poller for every key it
    finds gone (perf_counter times), for benchmarks that need more than the latencies."""

    def __init__(self, box: Sandbox, on_gone=None, notified: bool = False):
        self._box = box
        self._on_gone = on_gone
        self._conn = box.stack.admin(box.db, autocommit=False)
        self._writer_redis = box.stack.redis()
        self._poll_redis = box.stack.redis()
        self._next_id = 1
        self._lock = threading.Lock()
        self._outstanding: dict[str, float] = {}
        self._latencies: list[float] = []
        self._poll_intervals: list[float] = []
        self._seen_by_poll = 0
        # notified keys not outstanding yet: a writer process hands its keys over every
        # SEND_EVERY_S, and a fast delete (the floor's) is reported before that
        self._early: dict[str, float] = {}
        self._stop = threading.Event()
        # notified: Redis reports the deletes (DelEvents) and the poller only checks every
        # SAFETY_POLL_S for a key gone without its report
        self._events = DelEvents(self._poll_redis, box.prefix) if notified else None
        self._poll_sleep_s = SAFETY_POLL_S if notified else POLL_SLEEP_S
        self._workers = [Worker(self._poll_loop, "lag-poller")]
        if self._events is not None:
            self._workers.append(Worker(self._listen_loop, "lag-listener"))
        for worker in self._workers:
            worker.start()

    def reconnect(self, connect) -> None:
        """Write through ``connect()`` from now on (the failover benchmark's new primary)."""
        try:
            self._conn.close()
        except pymysql.err.Error:
            pass                    # the old server is gone, and the connection with it
        self._conn = connect()

    def close(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(10)
        if self._events is not None:
            self._events.close()
        self._conn.close()
        self._writer_redis.close()
        self._poll_redis.close()

    def _write(self, self_delete: bool, rows: int = 1) -> float:
        """Cache the keys, commit the rows in one transaction, register the keys;
        returns the commit duration."""
        ids = range(self._next_id, self._next_id + rows)
        self._next_id += rows
        keys = [lag_key(self._box.prefix, row_id) for row_id in ids]
        pipe = self._writer_redis.pipeline(transaction=False)
        for key in keys:
            pipe.set(key, b"cached", ex=600)
        pipe.execute()
        with self._conn.cursor() as cur:
            cur.executemany("INSERT INTO lag (id, v, note) VALUES (%s, %s, %s)",
                            [(row_id, row_id % 1000, f"row {row_id}") for row_id in ids])
        t_commit_start = time.perf_counter()
        self._conn.commit()
        t_commit = time.perf_counter()
        with self._lock:
            for key in keys:
                self._register(key, t_commit)
        if self_delete:
            self._writer_redis.unlink(*keys)
        return t_commit - t_commit_start

    def _poll_loop(self) -> None:
        last = None
        while not self._stop.is_set():
            with self._lock:
                keys = list(self._outstanding)
            round_start = time.perf_counter()
            if keys:
                # one MGET per POLL_CHUNK keys: a key is gone when it reads as nil (the
                # writers cache b"cached"); a pipelined EXISTS per key cost ~10x the CPU,
                # which the 2-core host took from the pipeline it measures
                pipe = self._poll_redis.pipeline(transaction=False)
                for i in range(0, len(keys), POLL_CHUNK):
                    pipe.mget(keys[i:i + POLL_CHUNK])
                found = [v is not None for values in pipe.execute() for v in values]
                now = time.perf_counter()
                n = self._gone([k for k, present in zip(keys, found) if not present], now)
                with self._lock:
                    self._seen_by_poll += n
                if last is not None:
                    self._poll_intervals.append(now - last)
                last = now
            else:
                last = None
            # Rest as long as the round took: with a backlog of outstanding keys (a stall
            # in the failover benchmark) the rounds get long, and a poller that never
            # rests would starve the writer thread of the GIL and miss its rate.
            round_s = time.perf_counter() - round_start
            time.sleep(round_s if round_s > BACKLOG_ROUND_S else self._poll_sleep_s)

    def _listen_loop(self) -> None:
        while not self._stop.is_set():
            keys = self._events.read(0.05)
            if keys:
                self._gone(keys, time.perf_counter(), early=True)

    def _gone(self, keys: list[str], now: float, early: bool = False) -> int:
        """Record ``keys`` seen gone at ``now`` (those still outstanding); how many were.
        ``early``: keep the others' time for when their commit is registered."""
        n = 0
        with self._lock:
            for k in keys:
                # a measurement that ended meanwhile cleared the keys it gave up on
                t_commit = self._outstanding.pop(k, None)
                if t_commit is not None:
                    n += 1
                    self._record(k, t_commit, now)
                elif early and len(self._early) < EARLY_MAX:
                    self._early[k] = now
        return n

    def _register(self, key: str, t_commit: float) -> None:
        """``key``'s row committed at ``t_commit``: outstanding until seen gone (with the
        lock held)."""
        t_gone = self._early.pop(key, None)
        if t_gone is None:
            self._outstanding[key] = t_commit
        else:
            self._record(key, t_commit, t_gone)

    def _record(self, key: str, t_commit: float, t_gone: float) -> None:
        self._latencies.append(t_gone - t_commit)
        if self._on_gone is not None:
            self._on_gone(key, t_commit, t_gone)

    def _reset(self) -> None:
        """Forget the figures gathered so far (a measurement starts)."""
        with self._lock:
            self._latencies.clear()
            self._seen_by_poll = 0
            self._early.clear()
            self._poll_intervals.clear()

    def check(self) -> None:
        """Raises what the poller or the listener thread raised."""
        for worker in self._workers:
            worker.check()

    def warm_up(self, alive) -> float:
        """Write until the pipeline deletes keys end to end; returns the first latency."""
        t0 = time.perf_counter()
        self._write(False)
        wait_for(lambda: alive() and not self._outstanding, 90, "the first key to be invalidated")
        first = time.perf_counter() - t0
        for _ in range(50):                       # warm connections and batches
            self._write(False)
            time.sleep(0.01)
        wait_for(lambda: not self._outstanding, 30, "the warm-up keys to be invalidated")
        self._reset()
        return first

    def measure(self, rate: float, seconds: float, self_delete: bool,
                stop: threading.Event | None = None) -> dict:
        """Write at ``rate`` for ``seconds`` (or until ``stop`` is set), then wait for the
        keys to go; returns the latency figures."""
        self._reset()
        per_txn = _rows_per_txn(rate)
        txns = int(rate * seconds) // per_txn
        commits = []
        t0 = time.perf_counter()
        for i in range(txns):
            if stop is not None and stop.is_set():
                break
            due = t0 + i * per_txn / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            commits.append(self._write(self_delete, per_txn))
        write_s = time.perf_counter() - t0
        return self._figures(self_delete, len(commits) * per_txn, per_txn, write_s, commits)

    def measure_commits(self, rate: float, seconds: float, self_delete: bool) -> dict:
        """Single-row commits at ``rate`` for ``seconds``, open loop, from enough writer
        processes (WRITER_TXN_PER_S at most each, on WRITER_CONNECTIONS connections) that
        one process's CPU does not cap the rate; returns the latency figures with the
        rate achieved."""
        self._reset()
        writers = max(1, -(-int(rate) // WRITER_TXN_PER_S))
        self._precache(self._next_id, int(rate * seconds) + writers)
        ctx = multiprocessing.get_context("fork")
        queue, start = ctx.Queue(), ctx.Value("d", 0.0)
        go = ctx.Event()
        procs = [ctx.Process(target=_commit_writer, daemon=True,
                             args=(self._box, k, writers, self._next_id, rate, seconds,
                                   self_delete, (go, start), queue)) for k in range(writers)]
        for proc in procs:
            proc.start()
        self._next_id += int(rate * seconds) + writers
        # the clock starts once every writer is connected (forks connect slowly on a busy host)
        self._wait_connected(queue, writers)
        start.value = start_at = time.perf_counter() + WRITERS_START_S
        go.set()
        count, commits, ends = self._collect(queue, writers, start_at + seconds + 30)
        for proc in procs:
            proc.join(10)
        write_s = max(ends) - start_at if ends else seconds
        result = self._figures(self_delete, count, 1, write_s, commits)
        return {**result, "writers": writers, "asked_rate": rate}

    def _precache(self, first_id: int, count: int) -> None:
        """Cache the keys of the rows about to be written, before the clock starts, so that
        a writer's loop is its commit (one Redis round trip less per row, on a 2-core host)."""
        pipe = self._writer_redis.pipeline(transaction=False)
        for row_id in range(first_id, first_id + count):
            pipe.set(lag_key(self._box.prefix, row_id), b"cached", ex=600)
            if len(pipe) >= PRECACHE_CHUNK:
                pipe.execute()
        pipe.execute()

    @staticmethod
    def _wait_connected(queue, writers: int) -> None:
        """Until every writer said it is connected; raises on a writer's error or a timeout."""
        deadline = time.perf_counter() + CONNECT_TIMEOUT_S
        for _ in range(writers):
            try:
                kind, payload = queue.get(timeout=max(0.1, deadline - time.perf_counter()))
            except Empty:
                raise TimeoutError(f"lag: writer processes not connected in "
                                   f"{CONNECT_TIMEOUT_S} s") from None
            if kind == "error":
                raise RuntimeError(f"lag writer failed: {payload}")

    def _collect(self, queue, writers: int, deadline: float) -> tuple[int, list, list]:
        """Register the writers' committed keys as outstanding until every writer is done."""
        count, commits, ends, done = 0, [], [], 0
        while done < writers:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"lag: {writers - done} writer process(es) did not finish")
            try:
                kind, payload = queue.get(timeout=1.0)
            except Empty:
                continue
            if kind == "keys":
                with self._lock:
                    for key, t_commit in payload:
                        self._register(key, t_commit)
            elif kind == "error":
                raise RuntimeError(f"lag writer failed: {payload}")
            else:       # "done": (commits, commit durations, end time)
                count += payload[0]
                commits += payload[1]
                ends.append(payload[2])
                done += 1
        return count, commits, ends

    def _figures(self, self_delete: bool, count: int, per_txn: int, write_s: float,
                 commits: list[float]) -> dict:
        """Wait for the outstanding keys (up to DRAIN_S), then the latency figures."""
        deadline = time.monotonic() + DRAIN_S
        while self._outstanding and time.monotonic() < deadline:
            self.check()
            time.sleep(0.01)
        with self._lock:
            missing = len(self._outstanding)
            self._outstanding.clear()
            lat = [x * 1000 for x in self._latencies]
            intervals = [x * 1000 for x in self._poll_intervals]
            by_poll, self._seen_by_poll = self._seen_by_poll, 0
        self.check()
        return {"what": "floor" if self_delete else "cachesync", "writes": count,
                "rows_per_txn": per_txn,
                "measured": len(lat), "missing": missing,
                "achieved_rate": round(count / write_s, 1),
                "p50_ms": _r(percentile(lat, 50)), "p90_ms": _r(percentile(lat, 90)),
                "p99_ms": _r(percentile(lat, 99)), "max_ms": _r(max(lat) if lat else None),
                "mean_ms": _r(sum(lat) / len(lat) if lat else None),
                "commit_p50_ms": _r(percentile([c * 1000 for c in commits], 50)),
                "poll_interval_p50_ms": _r(median(intervals)),
                "poll_interval_p99_ms": _r(percentile(intervals, 99)),
                "seen_by_poll": by_poll}


def _commit_writer(box: Sandbox, k: int, writers: int, first_id: int, rate: float,
                   seconds: float, self_delete: bool, clock, queue) -> None:
    """One writer process: rows first_id + k, + writers, ... one per transaction, each due at
    start_at + i * writers / rate + k / rate (open loop: a late commit does not push the
    schedule back), on WRITER_CONNECTIONS connections (``bench.commits``: a commit that finds
    them all busy waits for one), until ``seconds`` are over (a writer that fell behind
    commits fewer); committed keys go to ``queue`` every SEND_EVERY_S."""
    try:
        os.nice(WRITER_NICE)
        # autocommit: the INSERT is its own transaction, committed when its OK arrives
        committer = Committer([box.stack.admin(box.db, autocommit=True)
                               for _ in range(WRITER_CONNECTIONS)])
        unlinker = _Unlinker(box.stack.redis()) if self_delete else None
        queue.put(("ready", k))
        go, start = clock                  # the parent starts every writer's clock at once
        go.wait()
        start_at = start.value
        n, end = int(rate * seconds) // writers, start_at + seconds

        def due(i: int) -> float:
            return start_at + (i * writers + k) / rate

        batch, commits, last_send, i = [], [], time.perf_counter(), 0
        while True:
            now = time.perf_counter()
            if now >= end:
                n = min(n, i)          # time is over: what is in flight still counts
            while i < n and committer.idle and due(i) <= now:
                row_id = first_id + i * writers + k
                committer.send(query_packet(INSERT_SQL % (row_id, row_id % 1000, row_id)),
                               row_id)
                i += 1
            if i >= n and not committer.in_flight:
                break
            if i < n and committer.idle:      # until the next commit is due
                timeout = due(i) - time.perf_counter()
            else:
                timeout = 0.05
            done = committer.wait(min(timeout, max(0.0, end - now)) if i < n else timeout)
            for row_id, sent, t_commit in done:   # CLOCK_MONOTONIC: comparable across processes
                commits.append(t_commit - sent)
                batch.append((lag_key(box.prefix, row_id), t_commit))
            if unlinker is not None and done:
                unlinker.unlink([lag_key(box.prefix, row_id) for row_id, _, _ in done])
            if batch and time.perf_counter() - last_send >= SEND_EVERY_S:
                queue.put(("keys", batch))
                batch, last_send = [], time.perf_counter()
        queue.put(("keys", batch))
        if unlinker is not None:
            unlinker.close()
        queue.put(("done", (len(commits), commits, min(time.perf_counter(), end))))
        committer.close()
    except Exception as e:  # reported to the parent, which fails the run
        queue.put(("error", f"writer {k}: {type(e).__name__}: {e}"))


class _Unlinker:
    """The floor's deletes: one UNLINK per batch of commits answered together, sent without
    waiting for its reply (the replies are read as they come, and an error raises)."""

    def __init__(self, client):
        self._conn = client.connection_pool.make_connection()
        self._conn.connect()
        self._pending = 0

    def unlink(self, keys: list[str]) -> None:
        self._conn.send_packed_command(self._conn.pack_command("UNLINK", *keys))
        self._pending += 1
        while self._pending and self._conn.can_read(timeout=0):
            self._conn.read_response()
            self._pending -= 1

    def close(self) -> None:
        while self._pending:
            self._conn.read_response()
            self._pending -= 1
        self._conn.disconnect()


def _alive(box: Sandbox, proc) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"`cachesync {proc.args[3]}` exited {proc.returncode}:\n"
                           f"{box.proc_log(proc)}")
    return True


def _child_report(box: Sandbox, proc) -> dict:
    """Stop a child and report its exit code and any warnings (a restart would show here)."""
    code = box.stop_proc(proc)
    with open(proc.log_path) as f:
        noisy = [line.rstrip() for line in f if " WARNING " in line or " ERROR " in line]
    return {"exit_code": code, "warnings": len(noisy), "first_warnings": noisy[:5]}


def _checkpoint_stored(stack, name: str) -> bool:
    try:
        return bool(stack.admin_sql("SELECT 1 FROM cachesync.cachesync_checkpoint WHERE name = %s",
                                    (name,)))
    except Exception:   # the state table may not exist yet
        return False


def _r(x):
    return None if x is None else round(x, 3)


def _diff(a, b):
    return None if a is None or b is None else round(a - b, 3)
