"""The large cells' load: reader and writer processes, cheap enough for 10^7 reads a cell.

Readers send MGETs of PIPELINE keys (commands packed once, one reply parsed by hiredis per
round trip: the cheapest way for Redis and the reader to serve a plain read) of rows drawn
from a Zipf distribution; a miss goes to the process's fill threads, which fill as the
strategy does (``read_through`` for cachesync, GET + SELECT + SET for the app strategies)
after up to FILL_DELAY_S of application work. Nothing judges a read here: each read is kept
as (start time, value) and judged afterwards against the writers' commit history
(``measure``), without a database query. Writers update rows (same Zipf) at a fixed rate
and record, per change, its row, seq, value, commit time and, for the app strategies, when
their own post-commit delete returned (never, for a crashed writer or an outside write).

The readers (with their fill threads) stand for application servers, which run on other
hosts than the database and its sidecar: ``spec["readers_nice"]`` (READERS_NICE) lowers their
CPU priority, so that on this one host the bulk of the application's CPU does not take the
CPU of MariaDB, Redis, Kafka and cachesync. It is 19 by default (the lowest priority): the
scheduler weighs each thread, and a reader process is a reader and its fill threads; they
still take what the pipeline leaves idle (0.5-0.7 of the 2 cores at nice 19, 0.6-0.8 at
nice 10). BENCH_NINES_READERS_IDLE=1 (READERS_IDLE) also puts them in SCHED_IDLE, the policy
for "only what nothing else wants": a thread of any other policy that wakes takes the CPU from
them at once (a kill cell run so changed neither its drains nor its tailer restarts). On a
host that other jobs keep busy, niced readers get almost no CPU (4,200 reads/s at nice 10 and
load average 35, so a cell of 10^7 reads would take 40 minutes): BENCH_NINES_READERS_NICE=0
keeps them at the normal priority there, at the cost of the pipeline's CPU. The writer keeps the normal priority: its pace is the
cell's clock (a niced writer stretched a cell far beyond its 10^5 writes). The keyspace
watcher is the lab's clock for cachesync's applies: it runs at a real-time priority
(``as_clock``), since on a host loaded to 15-20 runnable processes per core it waited for a
CPU for up to 0.28 s and timed the unlinks that much late.

Times are ``time.perf_counter()``: CLOCK_MONOTONIC, one clock for every process of the host.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import os
import pickle
import queue
import random
import signal
import threading
import time
from array import array
from pathlib import Path

import pymysql
import redis

from bench.consistency.faults import Faults, Injector, injected
from bench.consistency.strategies import DOUBLE_DELETE_S, TTL_S
from bench.consistency.workload import FILL_DELAY_S
from cachesync.client import read_through

PIPELINE = 200            # keys per MGET (one round trip)
# the readers' niceness (BENCH_NINES_READERS_NICE; see the module)
READERS_NICE = int(os.environ.get("BENCH_NINES_READERS_NICE", "19"))
# the readers in SCHED_IDLE (BENCH_NINES_READERS_IDLE=1; see the module)
READERS_IDLE = os.environ.get("BENCH_NINES_READERS_IDLE", "0") == "1"
FILL_QUEUE = 256          # misses waiting for a fill thread (the reader waits beyond)
NEVER = float("inf")      # an invalidation that never came
WATCHER_PRIORITY = 1      # the keyspace watcher's SCHED_FIFO priority (the lowest)
PACE_MARGIN = 1.1         # readers' pace above the reads the writes' length needs


def zipf_weights(rows: int, s: float) -> list[float]:
    """Cumulative weights of ranks 0..rows-1 under Zipf(s): rank 0 is the hottest row."""
    return list(itertools.accumulate(1.0 / (rank + 1) ** s for rank in range(rows)))


def _key(spec: dict, row: int) -> str:
    return spec["template"].format(id=row)


def _mysql(spec: dict, autocommit: bool):
    return pymysql.connect(**spec["mysql"], autocommit=autocommit)


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGTERM this process when the lab's process ends: a lab interrupted mid-cell must not
    leave readers loading the host (and the next run's cells) until someone kills them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):      # not Linux: the stop events alone end them
        pass


def as_application(spec: dict) -> None:
    """Lower a reader's CPU priority by ``spec["readers_nice"]``, and with
    ``spec["readers_idle"]`` put it in SCHED_IDLE (see the module); threads it starts after
    this inherit both."""
    if spec["readers_nice"]:
        os.nice(spec["readers_nice"])
    if spec["readers_idle"]:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


# -- readers ---------------------------------------------------------------------------
def read_process(spec: dict, n: int, start, stop, counts, out: str) -> None:
    """Read until ``stop``, keeping ``counts[n]`` at the reads made so far (hits; fills
    are added at the end); writes ``(times, values)`` arrays (hits and fills) to ``out``."""
    die_with_parent()
    as_application(spec)
    rng = random.Random(spec["seed"] * 1000 + n)
    rows = range(spec["rows"])
    weights = zipf_weights(spec["rows"], spec["zipf_s"])
    keys = [_key(spec, row).encode() for row in rows]
    packed = [b"$%d\r\n%s\r\n" % (len(k), k) for k in keys]
    mget = b"*%d\r\n$4\r\nMGET\r\n" % (PIPELINE + 1)
    misses: queue.Queue = queue.Queue(FILL_QUEUE)
    fills = [_Filler(spec, misses, rng.random()) for _ in range(spec["fill_threads"])]
    for f in fills:
        f.start()
    client = redis.Redis.from_url(spec["redis_url"])
    conn = client.connection_pool.get_connection("GET")
    times, values = array("d"), array("q")
    # paced so that the reads and the writes take about as long: a cell whose reads ran far
    # ahead of its writes would judge more reads than it has the memory for
    per_s = spec["reads"] * spec["write_rate"] / spec["writes"] / spec["readers"] * PACE_MARGIN
    start.wait(120)
    began = time.perf_counter()
    while not stop.is_set():
        ahead = began + len(times) / per_s - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        batch = rng.choices(rows, cum_weights=weights, k=PIPELINE)
        t0 = time.perf_counter()
        conn.send_packed_command([mget + b"".join([packed[i] for i in batch])],
                                check_health=False)
        for row, value in zip(batch, conn.read_response()):
            if value is None:
                misses.put(row)
            else:
                times.append(t0)
                values.append(int(value))
        counts[n] = len(times)
    for f in fills:
        misses.put(None)
    for f in fills:
        f.join(60)
        times.extend(f.times)
        values.extend(f.values)
    with open(out, "wb") as fh:
        pickle.dump({"times": times, "values": values, "fills": sum(f.fills for f in fills),
                     "errors": [e for f in fills for e in f.errors]}, fh)


class _Filler(threading.Thread):
    """Fills missed keys as the strategy's reader does; records each as a read."""

    def __init__(self, spec: dict, misses: queue.Queue, seed: float):
        super().__init__(daemon=True)
        self.spec, self.misses, self.rng = spec, misses, random.Random(seed)
        self.times, self.values = array("d"), array("q")
        self.fills, self.errors = 0, []

    def run(self) -> None:
        r = redis.Redis.from_url(self.spec["redis_url"])
        conn = _mysql(self.spec, autocommit=True)
        sql = f"SELECT v FROM `{self.spec['table']}` WHERE id = %s"
        while (row := self.misses.get()) is not None:
            def load(row=row):
                self.fills += 1
                with conn.cursor() as cur:
                    cur.execute(sql, (row,))
                    (v,), = cur.fetchall()
                time.sleep(self.rng.uniform(0, FILL_DELAY_S))
                return str(v)
            try:
                t0 = time.perf_counter()
                value = self._read(r, _key(self.spec, row), load)
                self.times.append(t0)
                self.values.append(int(value))
            except Exception as e:  # noqa: BLE001 - reported with the cell, fails the lab
                self.errors.append(f"{type(e).__name__}: {e}")

    def _read(self, r, key: str, load):
        if self.spec["cachesync"]:
            return read_through(r, key, load, ttl_s=TTL_S)
        value = r.get(key)
        if value is None:
            value = load()
            r.set(key, value, ex=TTL_S)
        return value


# -- writers ---------------------------------------------------------------------------
def write_process(spec: dict, faults: Faults, start, read_counts, out: str) -> None:
    """Update rows at ``spec["write_rate"]`` until ``spec["writes"]`` updates are made and the
    readers made ``spec["reads"]`` reads (``read_counts``); writes the changes
    ``[row, seq, value, commit_t, applied_t]`` and the injected faults to ``out``."""
    die_with_parent()
    start.wait(120)
    state = _Writes(spec, lambda: sum(read_counts) >= spec["reads"])
    later = threading.Thread(target=state.delete_later, daemon=True)
    later.start()
    threads = [threading.Thread(target=state.write_loop, args=(w, faults), daemon=True)
               for w in range(spec["writer_threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state.done.set()
    later.join(60)
    with open(out, "wb") as fh:
        pickle.dump({"changes": state.changes, "injected": state.injected(),
                     "errors": state.errors}, fh)


class _Writes:
    """What the writer threads share: the value counter, the pace, the changes made."""

    def __init__(self, spec: dict, reads_made):
        self.spec, self.reads_made = spec, reads_made
        self.lock = threading.Lock()
        self.values = itertools.count(spec["first_value"])
        self.made = 0
        self.changes: list[list] = []
        self.injectors: list[Injector] = []
        self.errors: list[str] = []
        self.due: list[tuple[float, int, list]] = []   # delayed deletes: (when, n, change)
        self.due_lock = threading.Condition()
        self.done = threading.Event()
        self.t0 = time.perf_counter()
        self.weights = zipf_weights(spec["rows"], spec["zipf_s"])

    def _take(self) -> int | None:
        """The next write's value, paced to the rate; None when every write is made."""
        with self.lock:
            if self.made >= self.spec["writes"] and self.reads_made():
                return None
            self.made += 1
            at = self.t0 + self.made / self.spec["write_rate"]
            value = next(self.values)
        pause = at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        return value

    def write_loop(self, w: int, faults: Faults) -> None:
        rng = random.Random(self.spec["seed"] * 7919 + w)
        inj = Injector(faults, rng)
        with self.lock:
            self.injectors.append(inj)
        r = redis.Redis.from_url(self.spec["redis_url"])
        conn = _mysql(self.spec, autocommit=False)
        rows = range(self.spec["rows"])
        try:
            while (value := self._take()) is not None:
                row = rng.choices(rows, cum_weights=self.weights)[0]
                self._write(conn, r, inj, row, value)
        except Exception as e:  # noqa: BLE001 - reported with the cell, fails the lab
            self.errors.append(f"{type(e).__name__}: {e}")

    def _write(self, conn, r, inj: Injector, row: int, value: int) -> None:
        key, spec = _key(self.spec, row), self.spec
        app = not inj.outside()            # an outside write makes no cache call at all
        if app and "del" in spec["before"]:
            inj.cache_call(r.delete, key)
        with conn.cursor() as cur:
            cur.execute(f"UPDATE `{spec['table']}` SET v = %s, seq = seq + 1 WHERE id = %s",
                        (value, row))
            cur.execute(f"SELECT seq FROM `{spec['table']}` WHERE id = %s", (row,))
            (seq,), = cur.fetchall()
        if spec.get("marker"):             # the lab's own instrument: cachesync unlinks it
            r.set(spec["marker"].format(id=row, seq=seq), b"1", ex=TTL_S)
        change = [row, seq, value, time.perf_counter(), NEVER]   # committed from here on
        conn.commit()
        change.append(time.perf_counter())         # when COMMIT returned
        with self.lock:
            self.changes.append(change)
        if not app or inj.crashed():       # a crashed writer never sends what comes after
            return
        if "del" in spec["after"]:
            inj.cache_call(r.delete, key)
            change[4] = time.perf_counter()
        if "del_later" in spec["after"]:
            with self.due_lock:
                heapq.heappush(self.due, (time.perf_counter() + DOUBLE_DELETE_S, id(change),
                                          change, inj))
                self.due_lock.notify()

    def delete_later(self) -> None:
        """The double delete's second DEL, DOUBLE_DELETE_S after the commit, for every write."""
        r = redis.Redis.from_url(self.spec["redis_url"])
        while True:
            with self.due_lock:
                while not self.due and not self.done.is_set():
                    self.due_lock.wait(0.05)
                if not self.due:
                    return
                when, _, change, inj = self.due[0]
                wait = when - time.perf_counter()
                if wait > 0:
                    self.due_lock.wait(wait)
                    continue
                heapq.heappop(self.due)
            inj.cache_call(r.delete, _key(self.spec, change[0]))
            change[4] = time.perf_counter()

    def injected(self) -> dict:
        return injected(self.injectors)


# -- cachesync's applies, seen from Redis ------------------------------------------------
def watch_process(spec: dict, ready, stop, out: str) -> None:
    """Record when cachesync unlinked each change's marker key (keyspace notifications):
    ``{"gone": {(row, seq): time}, "set": {(row, seq): time}}`` to ``out``, "set" being when
    the watcher saw the writer set the marker (its ``expire`` event), just before the commit:
    how late the watcher itself hears; "realtime": whether it ran at SCHED_FIFO
    (``as_clock``). Sets ``ready`` once subscribed."""
    die_with_parent()
    realtime = as_clock()
    r = redis.Redis.from_url(spec["redis_url"])
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    channel = f"__keyspace@{spec['redis_db']}__:"
    pattern = channel + spec["marker"].format(id="*", seq="*")
    pubsub.psubscribe(pattern)
    pubsub.get_message(timeout=5.0)          # the subscription's confirmation
    ready.set()
    seen: dict[bytes, dict[tuple[int, int], float]] = {b"del": {}, b"expire": {}}
    cut = len(channel) + len(spec["marker"].split("{id}")[0])
    while not stop.is_set():
        message = pubsub.get_message(timeout=0.2)
        if message is None or message["data"] not in seen:
            continue
        at = time.perf_counter()
        row, seq = message["channel"][cut:].split(b":")
        seen[message["data"]].setdefault((int(row), int(seq)), at)
    with open(out, "wb") as fh:
        pickle.dump({"gone": seen[b"del"], "set": seen[b"expire"], "realtime": realtime}, fh)


def as_clock() -> bool:
    """Give the keyspace watcher, the lab's clock for cachesync's applies, a real-time
    priority (SCHED_FIFO 1), so that it reads each notification when it arrives instead of
    when a host the load keeps busy gives it a turn; True if the host allowed it (root or
    CAP_SYS_NICE; BENCH_NINES_WATCHER_REALTIME=0 leaves it at the normal priority, to
    compare). It only wakes for notifications and uses a few % of a core, so it cannot take
    the CPU from the processes it watches."""
    if os.environ.get("BENCH_NINES_WATCHER_REALTIME", "1") == "0":
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(WATCHER_PRIORITY))
        return True
    except PermissionError:
        return False


def load_result(path: str | Path) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh)
