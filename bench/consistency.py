"""The consistency lab: one racing workload against six cache-update strategies.

Writers update a few hot rows of MariaDB; readers do cache-aside reads of the same
rows against Redis (GET; on a miss read the row, then fill the cache). Each strategy
is what the application's writers do about the cache (from the seeds):

* ``db_then_cache``   UPDATE + COMMIT, then SET the new value
* ``cache_then_db``   SET the new value, then UPDATE + COMMIT
* ``delete_then_db``  DEL, then UPDATE + COMMIT
* ``db_then_delete``  UPDATE + COMMIT, then DEL (plain cache-aside)
* ``double_delete``   DEL, UPDATE + COMMIT, DEL again after a delay
* ``cachesync``       UPDATE + COMMIT only; `cachesync tail` + `consume` invalidate from the
                      binlog, and readers fill with ``cachesync.client.read_through``

A read is **stale** when the value it returned had been superseded by a commit more
than the lag window before the read started; the window is the slowest commit ->
invalidation that cachesync's probes (six rows, continuously, under the same workload)
measured in the same run, so cachesync is not blamed for its propagation delay and
the others get the same allowance. A stale read still counted for cachesync is an
invalidation slower than every probe saw: the lag's unsampled tail. ``stale_keys_after``
counts cached values that still differ from the database once writes stopped and the
window passed: those stay wrong until their TTL.

Per row the commit order is exact: every write bumps ``seq`` under the row lock and
reads it back in the same transaction.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path

from bench.common import ROOT, Sandbox, Worker, log, median, percentile
from cachesync.client import read_through

NAME = "consistency"
STRATEGIES = ("db_then_cache", "cache_then_db", "delete_then_db", "db_then_delete",
              "double_delete", "cachesync")
SIZES = {"full": {"seconds": 12.0, "rows": 32, "writers": 2, "readers": 4, "write_rate": 120},
         "quick": {"seconds": 4.0, "rows": 32, "writers": 2, "readers": 4, "write_rate": 120}}
DDL = "CREATE TABLE acct (id INT PRIMARY KEY, v BIGINT NOT NULL, seq BIGINT NOT NULL)"
FILL_DELAY_S = 0.005      # app work between reading the row and filling the cache (max, uniform)
DOUBLE_DELETE_S = 0.05
TTL_S = 600
PROBES = 6                # concurrent probe rows: enough samples to find the lag's tail


def run(stack, quick: bool, runs: int) -> dict:
    p = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(DDL)
        topic = box.new_topic(3)
        cfg = box.write_config({f"{box.db}.acct": {"keys": [box.prefix + "acct:{id}"]},
                                f"{box.db}.probe": {"keys": [box.prefix + "probe:{id}"]}},
                               topic=topic)
        stack.admin_sql(f"CREATE TABLE `{box.db}`.probe (id INT PRIMARY KEY, n BIGINT NOT NULL)")
        results: dict[str, list[dict]] = {s: [] for s in STRATEGIES}
        windows = []
        for i in range(runs):
            # cachesync first: its probe measures the lag window the others are judged by
            lab = Lab(box, p)
            tail = box.spawn("tail", cfg)
            consume = box.spawn("consume", cfg)
            try:
                lab.warm_up()
                result = lab.measure("cachesync", p, window=None)
                window = result["lag_window_s"]
                windows.append(window)
                log(f"consistency: run {i + 1}/{runs}: lag window (the slowest of "
                    f"{result['probes']} probes under the workload) {window * 1000:.1f} ms")
                results["cachesync"].append(result)
            finally:
                box.stop_proc(tail)
                box.stop_proc(consume)
            for strategy in STRATEGIES[:-1]:
                results[strategy].append(Lab(box, p).measure(strategy, p, window))
            for s in STRATEGIES:
                r = results[s][-1]
                log(f"consistency: {s:>15}: {r['stale_reads']}/{r['reads']} stale reads "
                    f"({r['stale_fraction']:.4%}), {r['stale_keys_after']} stale keys after")
        table = {s: {"stale_fraction": median([r["stale_fraction"] for r in results[s]]),
                     "stale_keys_after": median([r["stale_keys_after"] for r in results[s]]),
                     "stale_from_db_load": median([r["stale_from_db_load"] for r in results[s]]),
                     "reads": median([r["reads"] for r in results[s]]),
                     "writes": median([r["writes"] for r in results[s]])}
                 for s in STRATEGIES}
        plot = _plot(table)
        return {
            "description": "fraction of cache-aside reads older than the committed value beyond "
                           "the measured lag window, per cache-update strategy, same workload",
            "params": {**p, "fill_delay_max_ms": FILL_DELAY_S * 1000,
                       "double_delete_ms": DOUBLE_DELETE_S * 1000, "runs": runs},
            "lag_window_ms": {"median": round(median(windows) * 1000, 2),
                              "runs": [round(w * 1000, 2) for w in windows]},
            "median": table,
            "baseline": {"name": "db_then_delete (plain cache-aside)", **table["db_then_delete"]},
            "contender": {"name": "cachesync (binlog invalidation + read_through)",
                          **table["cachesync"]},
            "runs": results,
            "plot": plot,
        }
    finally:
        box.cleanup()


class Lab:
    """One strategy's run: writers, readers, the commit history and the verdicts."""

    def __init__(self, box: Sandbox, p: dict):
        self.box, self.p = box, p
        self.redis = box.stack.redis()
        self.key = lambda row: f"{box.prefix}acct:{row}"
        self.values = itertools.count(1)
        self.lock = threading.Lock()
        self.commits: dict[int, dict[int, float]] = {}     # row -> seq -> commit time
        self.value_seq: dict[int, tuple[int, int]] = {}    # value -> (row, seq)

    # -- the workload --------------------------------------------------------------------
    def measure(self, strategy: str, p: dict, window: float | None) -> dict:
        """Run the workload; ``window=None`` probes cachesync's lag meanwhile and uses its p99."""
        self._reset()
        stop = threading.Event()
        probe_lags: list[float] = []
        reads: list[tuple[float, int]] = []                # (read start, value returned)
        writers = [Worker(lambda w=w: self._write_loop(strategy, stop, w), f"writer-{w}")
                   for w in range(p["writers"])]
        readers = [Worker(lambda: self._read_loop(strategy, stop, reads), f"reader-{r}")
                   for r in range(p["readers"])]
        if window is None:
            readers += [Worker(lambda i=i: self._probe_loop(stop, probe_lags, i), f"probe-{i}")
                        for i in range(PROBES)]
        for t in writers + readers:
            t.start()
        time.sleep(p["seconds"])                           # the measured interval itself
        stop.set()
        for t in writers + readers:
            t.join(60)
            t.check()
        if window is None:
            window = max(probe_lags)
        time.sleep(window + DOUBLE_DELETE_S + FILL_DELAY_S)  # let in-flight work settle
        stale_reads = [(t, v, loaded) for t, v, loaded in reads
                       if self._superseded_before(v, t - window)]
        stale = len(stale_reads)
        ages = [t - self._next_commit(v) for t, v, _ in stale_reads]
        return {"strategy": strategy, "reads": len(reads), "stale_reads": stale,
                "stale_from_db_load": sum(1 for *_, loaded in stale_reads if loaded),
                "stale_age_ms": {"p50": _ms(percentile(ages, 50)), "max": _ms(max(ages, default=None))},
                "lag_window_s": window, "probes": len(probe_lags) or None,
                "probe_lag_ms": {"p50": _ms(percentile(probe_lags, 50)),
                                 "p99": _ms(percentile(probe_lags, 99))} if probe_lags else None,
                "stale_fraction": stale / len(reads) if reads else None,
                "writes": sum(len(v) for v in self.commits.values()) - self.p["rows"],
                "stale_keys_after": self._stale_keys()}

    def _reset(self) -> None:
        rows = self.p["rows"]
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM acct")
            for row in range(rows):
                value = next(self.values)
                cur.execute("INSERT INTO acct VALUES (%s, %s, 0)", (row, value))
                self.commits[row] = {0: 0.0}
                self.value_seq[value] = (row, 0)
        self.redis.delete(*(self.key(r) for r in range(rows)))

    def _write_loop(self, strategy: str, stop: threading.Event, w: int) -> None:
        rng = random.Random(w)
        pause = self.p["writers"] / self.p["write_rate"]
        with self.box.stack.admin(self.box.db, autocommit=False) as conn:
            r = self.box.stack.redis()
            while not stop.is_set():
                row = rng.randrange(self.p["rows"])
                with self.lock:
                    value = next(self.values)
                key = self.key(row)
                if strategy == "cache_then_db":
                    r.set(key, value, ex=TTL_S)
                elif strategy in ("delete_then_db", "double_delete"):
                    r.delete(key)
                self._commit(conn, row, value)
                if strategy == "db_then_cache":
                    r.set(key, value, ex=TTL_S)
                elif strategy == "db_then_delete":
                    r.delete(key)
                elif strategy == "double_delete":
                    threading.Timer(DOUBLE_DELETE_S, r.delete, (key,)).start()
                time.sleep(rng.uniform(0, 2 * pause))

    def _commit(self, conn, row: int, value: int) -> None:
        with conn.cursor() as cur:
            cur.execute("UPDATE acct SET v = %s, seq = seq + 1 WHERE id = %s", (value, row))
            cur.execute("SELECT seq FROM acct WHERE id = %s", (row,))
            (seq,), = cur.fetchall()
        conn.commit()
        now = time.perf_counter()
        with self.lock:
            self.commits[row][seq] = now
            self.value_seq[value] = (row, seq)

    def _read_loop(self, strategy: str, stop: threading.Event, out: list) -> None:
        rng = random.Random()
        with self.box.stack.admin(self.box.db) as conn:
            r = self.box.stack.redis()

            def load(row):
                with conn.cursor() as cur:
                    cur.execute("SELECT v FROM acct WHERE id = %s", (row,))
                    (v,), = cur.fetchall()
                time.sleep(rng.uniform(0, FILL_DELAY_S))
                return str(v)
            while not stop.is_set():
                row = rng.randrange(self.p["rows"])
                loaded = []
                t0 = time.perf_counter()
                if strategy == "cachesync":
                    value = read_through(r, self.key(row),
                                         lambda: loaded.append(1) or load(row), ttl_s=TTL_S)
                else:
                    value = r.get(self.key(row))
                    if value is None:
                        value = load(row)
                        loaded.append(1)
                        r.set(self.key(row), value, ex=TTL_S)
                out.append((t0, int(value), bool(loaded)))

    # -- verdicts ------------------------------------------------------------------------
    def _superseded_before(self, value: int, deadline: float) -> bool:
        with self.lock:
            where = self.value_seq.get(value)
            if where is None:
                return False                 # not committed yet (cache_then_db): not "old"
            row, seq = where
            nxt = self.commits[row].get(seq + 1)
        return nxt is not None and nxt < deadline

    def _next_commit(self, value: int) -> float:
        with self.lock:
            row, seq = self.value_seq[value]
            return self.commits[row][seq + 1]

    def _stale_keys(self) -> int:
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, v FROM acct")
            db = dict(cur.fetchall())
        cached = self.redis.mget([self.key(r) for r in sorted(db)])
        return sum(1 for r, c in zip(sorted(db), cached) if c is not None and int(c) != db[r])

    # -- the lag window ------------------------------------------------------------------
    def warm_up(self) -> None:
        """Until one probe goes through: the tailer may still be connecting when the first
        update commits (it starts at the then-current position), so a probe that does
        not arrive within 2 s is repeated, for up to 90 s."""
        give_up = time.perf_counter() + 90
        with self.box.stack.admin(self.box.db) as conn:
            while self._probe(conn, 2.0) is None:
                if time.perf_counter() > give_up:
                    raise RuntimeError("cachesync never invalidated the probe key in 90 s")

    def _probe_loop(self, stop: threading.Event, lags: list, row: int) -> None:
        """cachesync's commit -> key-gone lag, measured while the workload runs."""
        with self.box.stack.admin(self.box.db) as conn:
            while not stop.is_set():
                lag = self._probe(conn, 30.0, row)
                if lag is None:
                    raise RuntimeError("a probe was not invalidated within 30 s")
                lags.append(lag)
                time.sleep(0.01)

    def _probe(self, conn, timeout: float, row: int = 0) -> float | None:
        probe = f"{self.box.prefix}probe:{row}"
        self.redis.set(probe, b"x", ex=TTL_S)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO probe VALUES (%s, 0) ON DUPLICATE KEY UPDATE n = n + 1",
                        (row,))
        t0 = time.perf_counter()
        while self.redis.exists(probe):
            if time.perf_counter() - t0 > timeout:
                return None
            time.sleep(0.0005)
        return time.perf_counter() - t0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _plot(table: dict) -> str | None:
    """bench/results/consistency.png: stale-read fraction and stale keys left, per strategy."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("consistency: matplotlib missing (pip install -e '.[bench]'); no plot written")
        return None
    names = list(table)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    stale = [100 * (table[n]["stale_fraction"] or 0) for n in names]
    left = [table[n]["stale_keys_after"] for n in names]
    a.bar(names, stale, color="#c0504d")
    a.set_yscale("symlog", linthresh=0.001)       # 0.004 % and 6 % on one readable axis
    a.set_ylabel("stale reads beyond the lag window (%, symlog)")
    b.bar(names, left, color="#4f81bd")
    b.set_ylabel("stale keys left after writes stop")
    for ax, values, fmt in ((a, stale, "{:.3g}%"), (b, left, "{:g}")):
        ax.tick_params(axis="x", rotation=35)
        for x, v in enumerate(values):
            ax.annotate(fmt.format(v), (x, v), ha="center", va="bottom", fontsize=8)
    fig.suptitle("cachesync consistency lab: same racing workload, six strategies")
    fig.tight_layout()
    out = Path(ROOT) / "bench" / "results" / "consistency.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return str(out.relative_to(ROOT))
