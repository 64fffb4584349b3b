"""A TRUNCATE end to end: how long until the table's keys are gone, and what it does to the
lag of another table's changes meanwhile.

``cachesync tail`` and the python engine on a fresh topic (3 partitions, so 3 copies of the
table-level event); ``table_keys`` keys of ``items`` cached among ``other_keys`` keys of no
table; a writer commits rows of ``others`` at ``rate`` per second, each carrying its
commit time (``ts_us``), and the engine's batch hook records each one's commit -> apply
lag. After ``BASE_S`` seconds, ``TRUNCATE items``. Per mode, medians over the runs: the
time from the TRUNCATE's commit until every ``items`` key is gone, the other table's lag
p50/p99 before it and p99 from the TRUNCATE until its keys are gone, and that p99 over the
one before. Modes: ``beside`` (the default: consumer.table_jobs, one scan per event beside
the row stream) and ``inline`` (baseline, same run: the scan in the batch, once per copy).
``python -m bench --only table_pipeline [--quick]``.
"""

from __future__ import annotations

import threading
import time

from bench.common import Sandbox, Worker, log, percentile, ratio, summarize, wait_for
from cachesync.consumer.adapters.kafka_source import KafkaSource
from cachesync.consumer.engine import PythonEngine
from cachesync.kafka_security import client_security
from cachesync.wiring import (build_cache, build_dead_letters, build_dedup, build_table_jobs,
                              kafka_group, mappings)

NAME = "table_pipeline"
# (items keys cached, other keys, others commits/s)
SIZES = {"full": (200_000, 2_000_000, 200), "quick": (20_000, 200_000, 100)}
BASE_S = 3.0            # lag measured before the TRUNCATE
FILL_CHUNK = 10_000
MODES = ("beside", "inline")
FIELDS = ["gone_s", "base_p50_ms", "base_p99_ms", "during_p99_ms", "during_p99_over_base"]


def run(stack, quick: bool, runs: int) -> dict:
    table_keys, other_keys, rate = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        box.create_schema("CREATE TABLE items (id INT PRIMARY KEY)",
                          "CREATE TABLE others (id INT AUTO_INCREMENT PRIMARY KEY, "
                          "ts_us BIGINT NOT NULL)")
        _fill(r, box.prefix + "bulk:", other_keys)
        sides: dict[str, list[dict]] = {m: [] for m in MODES}
        for i in range(runs):
            for mode in (MODES if i % 2 == 0 else tuple(reversed(MODES))):
                _fill(r, box.prefix + "item:", table_keys)
                result = one_run(box, mode, table_keys, rate)
                sides[mode].append(result)
                log(f"{NAME}: run {i + 1}/{runs} {mode}: keys gone {result['gone_s']:.2f}s after "
                    f"the TRUNCATE; others' p99 {result['base_p99_ms']:.0f} ms before, "
                    f"{result['during_p99_ms']:.0f} ms during")
        out = {"params": {"table_keys": table_keys, "other_keys": other_keys,
                          "others_commits_per_s": rate, "partitions": 3, "runs": runs}}
        for mode in MODES:
            out[mode] = summarize(sides[mode], FIELDS)
        out["gone_s_beside_over_inline"] = ratio(out["beside"]["median"]["gone_s"],
                                                 out["inline"]["median"]["gone_s"])
        return out
    finally:
        r.close()
        box.cleanup()


def one_run(box: Sandbox, mode: str, table_keys: int, rate: float) -> dict:
    topic = box.new_topic(3)
    cfg = box.write_config({f"{box.db}.items": {"keys": [box.prefix + "item:{id}"]},
                            # ts_us in the key: the events carry only the key columns
                            f"{box.db}.others": {"keys": [box.prefix + "other:{id}:{ts_us}"]}},
                           topic=topic, tailer={"heartbeat_interval_s": 0},
                           consumer={"dedup_store": "redis"})
    lags: list[tuple[float, float]] = []      # (commit time, lag s) of each others row

    def on_batch(result):
        for ep in result.applied:
            if ep.event.table == "others" and ep.event.after:
                committed = ep.event.after["ts_us"] / 1e6
                lags.append((committed, result.applied_at - committed))
    tailer = box.spawn("tail", cfg)
    engine = _engine(box.settings(cfg), mode, on_batch)
    worker, writer = Worker(engine.run, "engine"), _Writer(box, rate)
    try:
        wait_for(lambda: box.stack.admin_sql(
            "SELECT 1 FROM cachesync.cachesync_checkpoint WHERE name = %s",
            (box.settings(cfg).tailer.name,)), 60, "the tailer's start checkpoint")
        worker.start()
        writer.start()
        # warmed up once the rows flow (the group joined, the first batches applied)
        wait_for(lambda: worker.check() or len(lags) >= rate, 120, "the other table flowing")
        started = time.time()
        time.sleep(BASE_S)          # the baseline window: lag under the steady writer alone
        truncated = time.time()
        box.stack.admin_sql(f"TRUNCATE TABLE `{box.db}`.items")
        wait_for(lambda: worker.check() or engine.stats.table_keys_deleted >= table_keys, 600,
                 "the items keys gone", interval=0.01)
        gone = time.time()
        # every row committed until then applied (an inline scan holds them up): a row still
        # waiting when the run stopped would be missing from the lag figures
        wait_for(lambda: worker.check() or sum(1 for c, _ in lags if c <= gone)
                 >= writer.committed_until(gone), 600, "the rows committed during the scan applied",
                 interval=0.05)
    finally:
        writer.stop()
        engine.stop()
        if worker.is_alive():
            worker.join(60)
        engine.close()
        box.stop_proc(tailer)
    worker.check()
    base = [lag for c, lag in lags if started <= c < truncated]
    during = [lag for c, lag in lags if truncated <= c <= gone] or [gone - truncated]
    b99, d99 = percentile(base, 99), percentile(during, 99)
    return {"mode": mode, "gone_s": gone - truncated, "base_p50_ms": 1000 * percentile(base, 50),
            "base_p99_ms": 1000 * b99, "during_p99_ms": 1000 * d99,
            "during_p99_over_base": d99 / b99, "others_applied": len(lags),
            "during_samples": len(during), "during_max_ms": 1000 * max(during),
            "table_scans": engine.stats.table_scans}


def _engine(settings, mode: str, on_batch) -> PythonEngine:
    """The engine as build_engine makes it (``beside``), or without the table scans beside
    the rows (``inline``: each copy scanned in its batch)."""
    k = settings.kafka
    source = KafkaSource(k.bootstrap_servers, k.topic, k.group_id, group=kafka_group(settings),
                         security=client_security(k))
    return PythonEngine(source, build_dedup(settings), build_cache(settings),
                        build_dead_letters(settings), mappings(settings),
                        options=settings.consumer, on_batch=on_batch,
                        table_jobs=build_table_jobs(settings) if mode == "beside" else None)


class _Writer(threading.Thread):
    """Inserts ``others`` rows at ``rate`` per second, each with its commit time."""

    def __init__(self, box: Sandbox, rate: float):
        super().__init__(daemon=True)
        self._box, self._interval = box, 1.0 / rate
        self._stopped = threading.Event()
        self._times: list[float] = []       # ts_us of every row written, in seconds

    def committed_until(self, moment: float) -> int:
        """Rows whose commit time (``ts_us``) is at or before ``moment``."""
        return sum(1 for t in list(self._times) if t <= moment)

    def run(self) -> None:
        with self._box.stack.admin(self._box.db) as conn, conn.cursor() as cur:
            due = time.monotonic()
            while not self._stopped.is_set():
                ts_us = int(time.time() * 1e6)
                cur.execute("INSERT INTO others (ts_us) VALUES (%s)", (ts_us,))
                self._times.append(ts_us / 1e6)
                due += self._interval
                self._stopped.wait(max(0.0, due - time.monotonic()))

    def stop(self) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(10)


def _fill(r, prefix: str, n: int) -> None:
    for start in range(0, n, FILL_CHUNK):
        pipe = r.pipeline(transaction=False)
        pipe.mset({f"{prefix}{i}": b"v" for i in range(start, min(n, start + FILL_CHUNK))})
        pipe.execute()
