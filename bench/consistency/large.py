"""The large cells: consistency in nines, at >= 10^7 reads and >= 10^5 writes per cell.

For the crash, outside-writes and kill classes, cachesync (delete mode + ``read_through``),
plain cache-aside (update DB, then DEL) and double delete each run one cell with the same
load (``load``): 10^4 rows read with Zipf(0.99) skew by several processes pipelining GETs,
writes at a fixed rate. cachesync's commit -> invalidation is measured for every change:
its mapping renders one more key per row version, a marker the writer sets before its
commit, and the lab records when cachesync unlinks it (Redis keyspace notifications). The
app strategies' is when their own post-commit delete returned (never, after a crash or an
outside write). Every cell reports, per change, the share applied within 100 ms and 1 s in
nines with the percentiles; per read, stale reads and stale reads beyond the lag (cachesync's
longest commit -> invalidation in the class, outside outages) in nines; the keys left stale;
95 % bounds 3/n where nothing failed; its length, rates and load average. In the kill class
(``chaos``) the figures come with and without the outage windows, and every invalidation is
checked to have landed within its outage + 1 s.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time

from bench.common import Sandbox, wait_for
from bench.consistency import measure, series
from bench.consistency.chaos import ChaosInjector
from bench.consistency.cpu import CpuSample, pid_file
from bench.consistency.faults import OUTSIDE_SHARE, P_FAULT, Faults
from bench.consistency.load import (NEVER, READERS_IDLE, READERS_NICE, load_result, read_process,
                                   watch_process, write_process)
from bench.consistency.strategies import BY_NAME
from bench.threads import tree_pids
from cachesync.consumer.core.nines import LagFigures

KILL = Faults("kill", "cachesync's tail and consume killed -9 and restarted, the Kafka broker "
              "stopped and started, in turn during the cell")
CLASSES = (Faults("crash", f"writer dies after commit, before its cache step ({P_FAULT:.0%})",
                  crash_p=P_FAULT),
           Faults("outside_writes", f"{OUTSIDE_SHARE:.0%} of updates by a batch job (no cache "
                  "step)", outside_share=OUTSIDE_SHARE),
           KILL)
STRATEGIES = ("cachesync", "db_then_delete", "double_delete")
TABLES = {"cachesync": "big_cs", "db_then_delete": "big_ca", "double_delete": "big_dd"}
SIZES = {"full": {"rows": 10_000, "writes": 100_000, "reads": 10_000_000, "write_rate": 900,
                  "writer_threads": 8, "readers": 3, "fill_threads": 6, "zipf_s": 0.99,
                  "kill_interval_s": 20.0},
         "quick": {"rows": 1_000, "writes": 3_000, "reads": 300_000, "write_rate": 500,
                   "writer_threads": 4, "readers": 2, "fill_threads": 4, "zipf_s": 0.99,
                   "kill_interval_s": 6.0}}

SETTLE_S = 2.0          # reads go on this long after the last invalidation landed
CATCH_UP_S = 300.0      # how long the lab waits for cachesync to apply every change
READY_JOIN_S = 600.0    # how long the end of a cell waits for the fault injector's last fault
DDL = "CREATE TABLE `{table}` (id INT PRIMARY KEY, v BIGINT NOT NULL, seq BIGINT NOT NULL)"


def scaled(size: dict, factor: float) -> dict:
    """``size`` with ``factor`` times its writes and reads (BENCH_NINES_SCALE: a quick cell
    long enough to show the tail of the lag)."""
    return {**size, "writes": round(size["writes"] * factor),
            "reads": round(size["reads"] * factor)}


def marker_template(prefix: str) -> str:
    return f"{prefix}{TABLES['cachesync']}:m:{{id}}:{{seq}}"


def tables_config(db: str, prefix: str) -> dict:
    """cachesync's mapping: the row's key, and the marker of each row version."""
    table = TABLES["cachesync"]
    return {f"{db}.{table}": {"keys": [f"{prefix}{table}:{{id}}", marker_template(prefix)],
                              "mode": "delete"}}


def create(box: Sandbox, rows: int) -> None:
    box.create_schema(*(DDL.format(table=t) for t in TABLES.values()))
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        for t in TABLES.values():
            cur.executemany(f"INSERT INTO `{t}` VALUES (%s, %s, 0)",
                            [(row, row + 1) for row in range(rows)])


class LargeCell:
    """One strategy under one fault class at full size; ``run()`` returns its figures."""

    def __init__(self, box: Sandbox, pipeline, strategy: str, faults: Faults, size: dict,
                 seed: int):
        self.box, self.pipeline, self.faults, self.size = box, pipeline, faults, size
        self.strategy = BY_NAME[strategy]
        self.table = TABLES[strategy]
        self.seed = seed
        self.tmp = box.tmp / f"{faults.name}-{strategy}"
        self.tmp.mkdir(exist_ok=True)

    def spec(self, first_value: int) -> dict:
        env = self.box.stack.env
        with open(env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
        url = env["CACHESYNC_REDIS_URL"]
        cachesync = self.strategy.cachesync
        return {**self.size, "seed": self.seed, "readers_nice": READERS_NICE,
                "readers_idle": READERS_IDLE,
                "table": self.table, "cachesync": cachesync,
                "template": f"{self.box.prefix}{self.table}:{{id}}",
                "marker": marker_template(self.box.prefix) if cachesync else None,
                "before": self.strategy.before, "after": self.strategy.after,
                "first_value": first_value, "redis_url": url,
                "redis_db": int(url.rsplit("/", 1)[1] or 0) if url.count("/") > 2 else 0,
                "mysql": {"host": env["CACHESYNC_MYSQL_HOST"],
                          "port": int(env["CACHESYNC_MYSQL_PORT"]),
                          "user": env["DEVSTACK_MYSQL_ADMIN_USER"], "password": password,
                          "database": self.box.db, "charset": "utf8mb4"}}

    def _base(self) -> dict[int, tuple[int, int]]:
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, seq, v FROM `{self.table}`")
            return {row: (seq, v) for row, seq, v in cur.fetchall()}

    def _reset(self, base: dict) -> None:
        r = self.box.stack.redis()
        keys = [f"{self.box.prefix}{self.table}:{row}" for row in base]
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i:i + 1000])

    def run(self) -> dict:
        """The cell: load, faults, settle, then the verdicts; raises RuntimeError when a
        process of the lab failed."""
        base = self._base()
        self._reset(base)
        spec = self.spec(max(v for _, v in base.values()) + 1)
        ctx = multiprocessing.get_context("spawn")
        stop_reads, stop_watch, watching = ctx.Event(), ctx.Event(), ctx.Event()
        counts = ctx.Array("q", spec["readers"], lock=False)    # reads made, per reader
        start = ctx.Barrier(spec["readers"] + 2)       # the load starts at once, set up
        paths = {"writes": self.tmp / "writes.pkl", "gone": self.tmp / "gone.pkl",
                 **{f"reads{n}": self.tmp / f"reads{n}.pkl" for n in range(spec["readers"])}}
        watcher = None
        if spec["marker"]:
            watcher = ctx.Process(target=watch_process, args=(spec, watching, stop_watch,
                                                              str(paths["gone"])))
            watcher.start()
            if not watching.wait(60):
                raise RuntimeError("the keyspace watcher did not subscribe within 60 s")
        readers = [ctx.Process(target=read_process, args=(spec, n, start, stop_reads, counts,
                                                          str(paths[f"reads{n}"])))
                   for n in range(spec["readers"])]
        # writes go on until both counts are made: no read is made after the writes stopped
        # but in the settle time
        writer = ctx.Process(target=write_process, args=(spec, self.faults, start, counts,
                                                         str(paths["writes"])))
        for p in readers + [writer]:
            p.start()
        start.wait(120)
        load0, t0 = os.getloadavg(), time.perf_counter()
        chaos = self._chaos() if self.faults is KILL else None
        cpu = CpuSample()
        while writer.is_alive():       # the loaded part of the cell: its CPU, every second
            cpu.update(self._pids(readers, writer, watcher), time.perf_counter())
            writer.join(1.0)
        writes_done = time.perf_counter()
        if chaos is not None:
            chaos.stop.set()
            chaos.join(READY_JOIN_S)
            chaos.check()
            self.pipeline.faults_made += len(chaos.outages)
        written = load_result(paths["writes"])
        if writer.exitcode or written["errors"]:
            raise RuntimeError(f"the writer failed: {writer.exitcode} {written['errors'][:3]}")
        caught_up = self._await_applied(written["changes"]) if watcher else time.perf_counter()
        self._read_on(stop_reads, caught_up)
        t_end = time.perf_counter()
        load1 = os.getloadavg()
        for p in readers:
            p.join(120)
        seen = {"gone": {}, "set": {}, "realtime": None}
        if watcher is not None:
            stop_watch.set()
            watcher.join(60)
            seen = load_result(paths["gone"])
        reads = [load_result(paths[f"reads{n}"]) for n in range(spec["readers"])]
        errors = [e for r in reads for e in r["errors"]]
        if errors or any(p.exitcode for p in readers):
            raise RuntimeError(f"a reader failed: {errors[:3]}")
        left = self._left_stale(spec)
        return {"base": base, "changes": written["changes"], "gone": seen["gone"],
                "marker_set": seen["set"], "watcher_realtime": seen["realtime"], "reads": reads,
                "injected": written["injected"], "left": left,
                "outages": chaos.outages if chaos else [],
                "seconds": t_end - t0, "write_seconds": writes_done - t0, "cpu": cpu.figures(),
                "cpu_timeline": cpu.timeline(),
                "loadavg": {"start": [round(x, 2) for x in load0],
                            "end": [round(x, 2) for x in load1]}}

    def _pids(self, readers, writer, watcher) -> dict[str, list[int]]:
        """The lab's processes by role: the load, the watcher, cachesync, the services."""
        run = os.path.join(self.box.stack.env["DEVSTACK_DIR"], "run")
        services = {name: pid_file(os.path.join(run, f"{name}.pid"))
                    for name in ("mariadb", "redis", "kafka")}
        return {"readers": [p.pid for p in readers], "writer": [writer.pid],
                **({"watcher": [watcher.pid]} if watcher else {}),
                # with their children: the tailer's Kafka producer runs in one of its own
                **{f"cachesync {c}": tree_pids(p.pid) for c, p in self.pipeline.procs.items()},
                **{name: [pid] for name, pid in services.items() if pid}}

    def _chaos(self) -> ChaosInjector:
        chaos = ChaosInjector(self.box, self.pipeline.procs, self.pipeline.configs,
                              self.size["kill_interval_s"], self.pipeline.stack_sh,
                              self.pipeline.probe_topic, first=self.pipeline.faults_made)
        chaos.start()
        return chaos

    def _read_on(self, stop, caught_up: float) -> None:
        """Readers go on until SETTLE_S after the last invalidation landed."""
        wait_for(lambda: time.perf_counter() > caught_up + SETTLE_S, 600, "the settle time",
                 interval=0.1)
        stop.set()

    def _await_applied(self, changes: list) -> float:
        """When cachesync had unlinked every change's marker (all applied)."""
        r = self.box.stack.redis()
        markers = [marker_template(self.box.prefix).format(id=row, seq=seq)
                   for row, seq, *_ in changes]

        def applied():
            for i in range(0, len(markers), 5000):
                if r.exists(*markers[i:i + 5000]):
                    return False
            return True
        wait_for(applied, CATCH_UP_S, "cachesync to apply every change of the cell",
                 interval=0.2)
        return time.perf_counter()

    def _left_stale(self, spec: dict) -> list[int]:
        """Rows whose cached value differs from the row's (they stay until their TTL)."""
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, v FROM `{self.table}`")
            db = dict(cur.fetchall())
        r = self.box.stack.redis()
        rows = sorted(db)
        cached = []
        for i in range(0, len(rows), 1000):
            cached += r.mget([spec["template"].format(id=row) for row in rows[i:i + 1000]])
        return [row for row, value in zip(rows, cached)
                if value is not None and int(value) != db[row]]



def lags(raw: dict) -> list[tuple[float, float]]:
    """Per change, (commit time, applied time or NEVER): cachesync's from the unlinked
    markers, the app strategies' from their own deletes."""
    gone = raw["gone"]
    if gone:
        return [(commit, gone.get((row, seq), NEVER)) for row, seq, _, commit, *_ in raw["changes"]]
    return [(commit, applied) for _, _, _, commit, applied, *_ in raw["changes"]]


def change_figures(pairs: list[tuple[float, float]], end: float) -> dict:
    """The per-change figure; a change never applied counts with its lag at ``end``."""
    figures = LagFigures()
    figures.add([(applied if applied != NEVER else end) - commit for commit, applied in pairs])
    out = figures.figures()
    out["never_applied"] = sum(1 for _, applied in pairs if applied == NEVER)
    return out


def outage_check(pairs: list[tuple[float, float]], outages: list) -> tuple[list, dict]:
    """The changes no outage delayed, and the check that every invalidation landed by its
    deadline (its commit, or the end of the outage that delayed it, + GRACE_S)."""
    spans = [(start, end) for _, start, end in outages]
    due = measure.deadlines([commit for commit, _ in pairs], spans)
    late = [applied - d for (_, applied), (d, _) in zip(pairs, due) if applied > d]
    landed_late = [x for x in late if x != NEVER]
    clear = [p for p, (_, moved) in zip(pairs, due) if not moved]
    return clear, {"changes_delayed_by_an_outage": len(pairs) - len(clear),
                   "landed_by_deadline": len(pairs) - len(late), "missed_deadline": len(late),
                   "never_applied": len(late) - len(landed_late),
                   "worst_miss_ms": round(max(landed_late) * 1000, 1) if landed_late else None,
                   "rule": f"applied within {measure.GRACE_S:g} s of its commit, or of the end "
                           "of the outage that delayed it"}


def last_delayed(pairs: list[tuple[float, float]], outages: list) -> list[float | None]:
    """Per outage, when the last change it delayed (committed from GRACE_S before the
    kill until the outage ended) was applied; None if none was."""
    out = []
    for _, start, end in outages:
        delayed = [applied for commit, applied in pairs
                   if start - measure.GRACE_S <= commit <= end and applied != NEVER]
        out.append(max(delayed) if delayed else None)
    return out


def read_skips(pairs: list[tuple[float, float]], outages: list) -> list[tuple[float, float]]:
    """Per outage, the reads it may have made stale: from the kill until the last change
    it delayed was applied (at least its end + GRACE_S)."""
    return [(start, max(end + measure.GRACE_S, last or end))
            for (_, start, end), last in zip(outages, last_delayed(pairs, outages))]


def verdict(raw: dict, window: float, t_end: float) -> dict:
    """One cell's figures (``window``: the class's lag, cachesync's longest outside outages)."""
    pairs = lags(raw)
    times = itertools.chain.from_iterable(r["times"] for r in raw["reads"])
    values = itertools.chain.from_iterable(r["values"] for r in raw["reads"])
    superseded = measure.supersessions(raw["base"], [(row, seq, value, commit)
                                                     for row, seq, value, commit, *_
                                                     in raw["changes"]])
    outages = raw["outages"]
    skips = read_skips(pairs, outages) if outages else []
    counts = measure.stale_read_counts(times, values, superseded, window, skips)
    fills = sum(r["fills"] for r in raw["reads"])
    n_reads = counts["reads"] + counts["skipped"]
    out = {"writes": len(pairs), "reads": n_reads, "rows": len(raw["base"]),
           "seconds": round(raw["seconds"], 1),
           "reads_per_s": round(n_reads / raw["seconds"]),
           "writes_per_s": round(len(pairs) / raw["write_seconds"], 1),
           "fills": fills, "miss_rate": round(fills / n_reads, 5) if n_reads else None,
           "loadavg": raw["loadavg"], "cpu": raw["cpu"], "injected": raw["injected"],
           "lag_window_ms": round(window * 1000, 1),
           "per_change": change_figures(pairs, t_end),
           "stale_keys_after": len(raw["left"])}
    if raw["gone"]:                    # cachesync's cell: the lab's own share of its lags
        out["instrument"] = series.instrument(raw)
    out["stale_beyond_lag_reads"] = beyond_lag_reads(raw, counts["beyond_lag_examples"])
    if not outages:
        out["per_read"] = measure.read_figure(counts)
        return out
    all_counts = {"reads": n_reads, "stale": counts["stale"] + counts["stale_in_skip"],
                  "stale_beyond_lag": counts["stale_beyond_lag"]
                  + counts["stale_beyond_lag_in_skip"]}
    clear, check = outage_check(pairs, outages)
    out["per_read"] = measure.read_figure(all_counts)
    out["outside_outages"] = {"per_change": change_figures(clear, t_end),
                              "per_read": measure.read_figure(counts),
                              "read_windows_excluded_s": round(sum(b - a for a, b in
                                                                   measure.merged(skips)), 1)}
    # how long after each outage ended its backlog took: the recovery the deadline bounds
    out["outages"] = [{"what": what, "seconds": round(end - start, 1),
                       "last_delayed_applied_after_end_s":
                           round(last - end, 2) if last is not None else None}
                      for (what, start, end), last in zip(outages, last_delayed(pairs, outages))]
    out["deadline_check"] = check
    return out


def beyond_lag_reads(raw: dict, examples: list) -> list[dict]:
    """The reads kept as stale beyond the lag (outside outages), by the row and seq whose value
    they returned, on the series' clock (seconds since the cell's first commit)."""
    if not examples:
        return []
    written = {value: (row, seq) for row, seq, value, *_ in raw["changes"]}
    written.update({value: (row, seq) for row, (seq, value) in raw["base"].items()})
    t0 = min(commit for _, _, _, commit, *_ in raw["changes"])
    return [{"read": round(t - t0, 4), "row_seq": written.get(value),
             "superseded": round(at - t0, 4)} for t, value, at in examples]


def class_window(raw: dict) -> float:
    """cachesync's longest commit -> invalidation of the cell, outside outages."""
    pairs = lags(raw)
    if raw["outages"]:
        pairs, _ = outage_check(pairs, raw["outages"])
    landed = [applied - commit for commit, applied in pairs if applied != NEVER]
    if not landed:
        raise RuntimeError("no cachesync invalidation was observed: no lag to judge by")
    return max(landed)
