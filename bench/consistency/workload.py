"""One cell of the lab: one strategy under one fault class, on real services.

Writers update rows of MariaDB (each write bumps ``seq`` under the row lock and reads it
back in the same transaction, so the commit order per row is exact) and do their
strategy's cache calls through the fault injector; readers do cache-aside reads of the
same rows (plain, or ``read_through`` for cachesync), filling from the primary or, in the
replica classes, from the replica. Probes measure cachesync's commit -> key-gone lag: the
primary's tailer's (the lag window) and the replica's tailer's (reported beside it).
"""

from __future__ import annotations

import random
import threading
import time

import pymysql

from bench.common import Worker, wait_for
from bench.consistency import measure
from bench.consistency.faults import Faults, Injector, injected
from bench.consistency.strategies import (CACHESYNC_DOUBLE_DELETE_S, DOUBLE_DELETE_S,
                                          PROBE_TABLE, TTL_S, Strategy, decode, key_template)
from cachesync.client import ReplicaCaughtUp, read_through
from cachesync.schema.keys import lease_key

FILL_DELAY_S = 0.005      # app work between reading the row and filling the cache (max, uniform)
REPLICA_WAIT_S = 0.05    # how long a guarded replica reader waits for the replica on a miss
PROBES = 6                # concurrent probe rows: enough samples to find the lag's tail


class Databases:
    """Connections to the primary and, for replica readers, the devstack's replica.

    Kept open across cells, one per role and thread (``pooled``): connecting costs ~150 ms
    on the loaded machine, and the cells run one after another.
    """

    def __init__(self, stack, db: str):
        self.stack, self.db = stack, db
        self._pool: dict[tuple, pymysql.connections.Connection] = {}

    def primary(self, autocommit: bool = True):
        return self.stack.admin(self.db, autocommit=autocommit)

    def replica(self):
        """Raises KeyError naming the setting when the replica variant is not up."""
        env = self.stack.env
        with open(env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
        return pymysql.connect(host=env["DEVSTACK_MYSQL_REPLICA_HOST"],
                               port=int(env["DEVSTACK_MYSQL_REPLICA_PORT"]),
                               user=env["DEVSTACK_MYSQL_ADMIN_USER"], password=password,
                               database=self.db, autocommit=True, charset="utf8mb4")

    def pooled(self, role: str, n: int):
        """The open connection of thread ``n`` in ``role`` ("writer", "reader", "replica",
        "probe"); writers' do not autocommit."""
        conn = self._pool.get((role, n))
        if conn is None:
            conn = (self.replica() if role == "replica"
                    else self.primary(autocommit=role != "writer"))
            self._pool[(role, n)] = conn
        return conn

    def close(self) -> None:
        for conn in self._pool.values():
            conn.close()
        self._pool.clear()


class Cell:
    """A strategy's run under a fault class: the workload, then the raw observations."""

    def __init__(self, dbs: Databases, prefix: str, strategy: Strategy, faults: Faults,
                 shape: dict, values, seed: int):
        self.dbs, self.strategy, self.faults, self.p = dbs, strategy, faults, shape
        self.values, self.seed = values, seed
        self.template = key_template(prefix, strategy.table)
        self.probe_templates = {tr: key_template(prefix, t) for tr, t in PROBE_TABLE.items()}
        self.redis = dbs.stack.redis()
        self.history = measure.History()
        self.reads: list[tuple[float, int, bool]] = []
        self.probe_lags: list[float] = []
        self.tail_replica_lags: list[float] = []
        self.replica_lags: list[float] = []
        self.injectors: list[Injector] = []
        self.lock = threading.Lock()
        self.ready: threading.Barrier | None = None

    def key(self, row: int) -> str:
        return self.template.format(id=row)

    # -- the run ----------------------------------------------------------------------
    def run(self, probes: bool, window: float | None) -> dict:
        """Reset, run the workload, stop the writes, keep reading while in-flight work
        settles (``window``: the slowest lag seen so far), then check the keys left.
        Returns the injected faults, the keys left stale and the interval's length."""
        self._reset()
        writes_stop, reads_stop = threading.Event(), threading.Event()
        writers, readers = self._threads(writes_stop, reads_stop, probes)
        # every thread connects first: the interval measures the workload, not connecting
        self.ready = threading.Barrier(len(writers) + len(readers) + 1, timeout=60)
        for t in writers + readers:
            t.start()
        try:
            self.ready.wait()
            t0 = time.perf_counter()
            time.sleep(self.p["seconds"])                 # the measured interval itself
            writes_stop.set()
            _join(writers)
            lags = self.probe_lags + ([window] if window is not None else [])
            time.sleep(self.settle_s(max(lags, default=1.0)))  # readers go on reading
        finally:
            writes_stop.set()
            reads_stop.set()
            _join(writers + readers)
        return {"injected": self._injected(), "left": self.left_stale(),
                "seconds": time.perf_counter() - t0}

    def _threads(self, writes_stop: threading.Event, reads_stop: threading.Event,
                 probes: bool) -> tuple[list[Worker], list[Worker]]:
        """(writers and probes, readers)."""
        writers = [Worker(lambda w=w: self._write_loop(writes_stop, w), f"writer-{w}")
                   for w in range(self.p["writers"])]
        if probes:
            writers += [Worker(lambda i=i: self._probe_loop(writes_stop, i), f"probe-{i}")
                        for i in range(PROBES)]
            writers.append(Worker(lambda: self._probe_loop(writes_stop, 0, tail_replica=True),
                                  "probe-tail-replica"))
        if self.faults.replica_reads:
            writers.append(Worker(lambda: self._replica_loop(writes_stop), "replica-probe"))
        readers = [Worker(lambda r=r: self._read_loop(reads_stop, r), f"reader-{r}")
                   for r in range(self.p["readers"])]
        return writers, readers

    def _injected(self) -> dict:
        return injected(self.injectors)

    def _reset(self) -> None:
        """Empty the rows' keys and leases; the rows' current state is the base history
        (rows are never re-inserted: update mode's version fence must keep growing)."""
        with self.dbs.pooled("admin", 0).cursor() as cur:
            cur.execute(f"SELECT id, v, seq FROM `{self.strategy.table}` WHERE id < %s",
                        (self.p["rows"],))
            rows = cur.fetchall()
        for row, v, seq in rows:
            self.history.base(row, seq, v)
        keys = [self.key(r) for r, _, _ in rows]
        self.redis.delete(*keys, *(lease_key(k) for k in keys))
        if self.faults.replica_reads:
            self._await_replica(dict((r, seq) for r, _, seq in rows))

    def _await_replica(self, seqs: dict[int, int]) -> None:
        """Start from a replica that caught up: the lag measured is the workload's own."""
        conn = self.dbs.pooled("replica", -1)

        def caught_up():
            with conn.cursor() as cur:
                cur.execute(f"SELECT id, seq FROM `{self.strategy.table}` WHERE id < %s",
                            (self.p["rows"],))
                return dict(cur.fetchall()) == seqs
        wait_for(caught_up, 60, "the replica to catch up with the primary")

    # -- writers ----------------------------------------------------------------------
    def _write_loop(self, stop: threading.Event, w: int) -> None:
        rng = random.Random(self.seed * 1000 + w)
        inj = Injector(self.faults, rng)
        with self.lock:
            self.injectors.append(inj)
        pause = self.p["writers"] / self.p["write_rate"]
        r = self.dbs.stack.redis()
        conn = self.dbs.pooled("writer", w)
        self.ready.wait()
        while not stop.is_set():
            self._write(conn, r, inj, rng.randrange(self.p["rows"]))
            time.sleep(rng.uniform(0, 2 * pause))

    def _write(self, conn, r, inj: Injector, row: int) -> None:
        """One update and the strategy's cache calls around it, under the injected faults."""
        with self.lock:
            value = next(self.values)
        key = self.key(row)
        app = not inj.outside()            # an outside write makes no cache call at all
        if app:
            self._cache_steps(self.strategy.before, r, inj, key, value)
        self._commit(conn, row, value)
        if app and not inj.crashed():      # a crashed writer never sends what comes after
            self._cache_steps(self.strategy.after, r, inj, key, value)

    @staticmethod
    def _cache_steps(steps, r, inj: Injector, key: str, value: int) -> None:
        for step in steps:
            if step == "set":
                inj.cache_call(r.set, key, value, TTL_S)
            elif step == "del":
                inj.cache_call(r.delete, key)
            elif step == "del_later":
                threading.Timer(DOUBLE_DELETE_S, inj.cache_call, (r.delete, key)).start()

    def _commit(self, conn, row: int, value: int) -> None:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE `{self.strategy.table}` SET v = %s, seq = seq + 1 WHERE id = %s",
                        (value, row))
            cur.execute(f"SELECT seq FROM `{self.strategy.table}` WHERE id = %s", (row,))
            (seq,), = cur.fetchall()
        conn.commit()
        self.history.commit(row, seq, value, time.perf_counter())

    # -- readers ----------------------------------------------------------------------
    def _read_loop(self, stop: threading.Event, n: int) -> None:
        rng = random.Random(self.seed * 1000 + 500 + n)
        conn = self.dbs.pooled("replica" if self.faults.replica_reads else "reader", n)
        fresh = None
        if self.faults.replica_reads and self.strategy.replica_guard:
            fresh = ReplicaCaughtUp(self.dbs.pooled("reader", n), conn, wait_s=REPLICA_WAIT_S)
        r = self.dbs.stack.redis()
        self.ready.wait()
        while not stop.is_set():
            row = rng.randrange(self.p["rows"])
            loaded: list[int] = []

            def load(row=row):
                loaded.append(1)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT v FROM `{self.strategy.table}` WHERE id = %s", (row,))
                    (v,), = cur.fetchall()
                time.sleep(rng.uniform(0, FILL_DELAY_S))
                return str(v)
            t0 = time.perf_counter()
            value = self._read(r, self.key(row), load, fresh)
            self.reads.append((t0, decode(value), bool(loaded)))

    def _read(self, r, key: str, load, fresh) -> bytes | str:
        if self.strategy.cachesync:
            return read_through(r, key, load, ttl_s=TTL_S, fresh=fresh)
        value = r.get(key)
        if value is None:
            value = load()
            r.set(key, value, ex=TTL_S)
        return value

    # -- after the writes stop ----------------------------------------------------------
    def settle_s(self, window: float) -> float:
        """How long in-flight work may still change the cache once writes stopped."""
        # the same for every strategy: their readers read for as long
        later = max(CACHESYNC_DOUBLE_DELETE_S, DOUBLE_DELETE_S)
        return window + later + FILL_DELAY_S + 0.1

    def left_stale(self) -> list[float | None]:
        """Per key whose cached value differs from the primary's row: how long ago that
        value was superseded (it stays until its TTL)."""
        with self.dbs.pooled("admin", 0).cursor() as cur:
            cur.execute(f"SELECT id, v FROM `{self.strategy.table}` WHERE id < %s",
                        (self.p["rows"],))
            db = dict(cur.fetchall())
        rows = sorted(db)
        now = time.perf_counter()
        out = []
        for row, cached in zip(rows, self.redis.mget([self.key(r) for r in rows])):
            if cached is not None and decode(cached) != db[row]:
                at = self.history.superseded_at(decode(cached))
                out.append(None if at is None else now - at)
        return out

    # -- cachesync's lag ------------------------------------------------------------------
    def _probe_loop(self, stop: threading.Event, row: int, tail_replica: bool = False) -> None:
        """cachesync's commit -> key-gone lag, measured while the workload runs: through the
        primary's tailer, or (``tail_replica``) the replica's, which includes the replica's lag."""
        conn = self.dbs.pooled("probe-tr" if tail_replica else "probe", row)
        r = self.dbs.stack.redis()
        key = self.probe_templates[tail_replica].format(id=row)
        into = self.tail_replica_lags if tail_replica else self.probe_lags
        self.ready.wait()
        while not stop.is_set():
            lag = probe(r, conn, key, row, 30.0, PROBE_TABLE[tail_replica])
            if lag is None:
                raise RuntimeError(f"a probe ({key}) was not invalidated within 30 s")
            into.append(lag)
            time.sleep(0.01)


    def _replica_loop(self, stop: threading.Event) -> None:
        """The replica's own lag under the workload: commit on the primary -> row visible
        on the replica, every 50 ms (a row of the probe table cachesync does not watch)."""
        primary, replica = self.dbs.pooled("probe", -1), self.dbs.pooled("replica", -2)
        self.ready.wait()
        while not stop.is_set():
            self.replica_lags.append(replica_lag(primary, replica, 30.0))
            time.sleep(0.05)


def replica_lag(primary, replica, timeout: float) -> float:
    """Seconds from a commit on the primary until the replica shows it; raises TimeoutError."""
    with primary.cursor() as cur:
        cur.execute("INSERT INTO replica_probe VALUES (1, 0) ON DUPLICATE KEY UPDATE n = n + 1")
        cur.execute("SELECT n FROM replica_probe WHERE id = 1")
        (n,), = cur.fetchall()
    t0 = time.perf_counter()
    while True:
        with replica.cursor() as cur:
            cur.execute("SELECT n FROM replica_probe WHERE id = 1")
            row = cur.fetchone()
        if row is not None and row[0] >= n:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"the replica did not apply a commit within {timeout}s")
        time.sleep(0.0005)


def _join(threads: list[Worker]) -> None:
    """Join, then raise the first thread's error (a failed thread fails the lab)."""
    for t in threads:
        t.join(60)
    for t in threads:
        t.check()


def probe(redis, conn, key: str, row: int, timeout: float,
          table: str = PROBE_TABLE[False]) -> float | None:
    """Cache ``key``, update its probe row in ``table``, and time until cachesync deleted
    the key; None after ``timeout``."""
    redis.set(key, b"x", ex=TTL_S)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{table}` VALUES (%s, 0) ON DUPLICATE KEY UPDATE n = n + 1",
                    (row,))
    t0 = time.perf_counter()
    while redis.exists(key):
        if time.perf_counter() - t0 > timeout:
            return None
        time.sleep(0.0005)
    return time.perf_counter() - t0
