"""Memory soak: RSS of `cachesync tail` and `cachesync consume` under sustained load.

Not part of a plain ``python -m bench`` (it is time-bounded but long): run it with
``python -m bench --only soak [--minutes M]`` (default 10 minutes, 1 with --quick).

Both run as child processes, as deployed. After a warm-up, the lag harness writes
WRITE_RATE row changes/s for M minutes (single window of keys, as bench/lag.py);
every SAMPLE_S the children's VmRSS is read from /proc, and that of their own child
processes (``tail``'s publisher process) as ``<name>.children``. Growth is measured from
the RSS after the first minute (imports, connections and buffers are in place by then)
to the RSS at the end; the target is <= 10 %.

Then one transaction of BIG_TXN_ROWS inserts is committed and the harness waits
until every one of its keys is gone from Redis; VmHWM (peak RSS) during it, minus
the RSS before it, is what a large transaction costs each process.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bench.common import Sandbox, Worker, log, percentile, wait_for
from bench.lag import Harness, _alive, _checkpoint_stored, _child_report
from bench.threads import descendants

NAME = "soak"
DEFAULT_MINUTES = {"full": 10.0, "quick": 1.0}
WRITE_RATE = 1000
WINDOW_S = 30.0                  # one lag measurement per window
SAMPLE_S = 5.0
SETTLE_S = 60.0                  # RSS growth is measured from here
BIG_TXN_ROWS = 200_000
BIG_INSERT_CHUNK = 5000
BIG_WAIT_S = 600
TARGET_GROWTH = 0.10
DDL = "CREATE TABLE lag (id BIGINT PRIMARY KEY, v INT NOT NULL, note VARCHAR(64) NOT NULL)"


def run(stack, quick: bool, runs: int, minutes: float | None = None) -> dict:
    minutes = minutes or DEFAULT_MINUTES["quick" if quick else "full"]
    big_rows = BIG_TXN_ROWS // 10 if quick else BIG_TXN_ROWS
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(DDL)
        topic = box.new_topic(3)
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}"]}}, topic=topic,
                               metrics={"listen": "127.0.0.1:0"})   # a free port on a shared host
        settings = box.settings(cfg)
        tail = box.spawn("tail", cfg)
        wait_for(lambda: _alive(box, tail) and _checkpoint_stored(stack, settings.tailer.name),
                 60, "the tailer's start checkpoint")
        consume = box.spawn("consume", cfg)
        procs = {"tail": tail, "consume": consume}
        harness = Harness(box)
        sampler = Sampler(procs)
        try:
            harness.warm_up(lambda: _alive(box, tail) and _alive(box, consume))
            sampler.start()
            windows = _sustain(harness, box, procs, minutes)
            sustained_until = time.monotonic()     # growth is measured up to here
            steady = sampler.snapshot()
            big = _big_transaction(box, procs, sampler, harness, big_rows)
        finally:
            sampler.stop()
            harness.close()
        children = {name: _child_report(box, proc) for name, proc in procs.items()}
        growth = {name: _growth(series, sampler.t0, sustained_until)
                  for name, series in sampler.series.items() if series}
        return {
            "description": "RSS of the tail and consume child processes over a sustained "
                           f"{WRITE_RATE} row changes/s, then one {big_rows}-row transaction",
            "params": {"minutes": minutes, "rate_per_s": WRITE_RATE, "window_s": WINDOW_S,
                       "sample_s": SAMPLE_S, "settle_s": SETTLE_S, "big_txn_rows": big_rows,
                       "target_growth": TARGET_GROWTH,
                       "sustained_s": round(sustained_until - sampler.t0, 1)},
            "rss_growth": growth,
            "met": all(g["growth"] is not None and g["growth"] <= TARGET_GROWTH
                       for g in growth.values()),
            "steady_rss_mb": steady,
            "lag_windows": windows,
            "big_transaction": big,
            "rss_series_mb": {name: [[round(t - sampler.t0, 1), mb] for t, mb in series]
                              for name, series in sampler.series.items()},
            "children": children,
        }
    finally:
        box.cleanup()


def _sustain(harness: Harness, box: Sandbox, procs: dict, minutes: float) -> list[dict]:
    out, deadline = [], time.monotonic() + minutes * 60
    while time.monotonic() < deadline - 1:
        seconds = min(WINDOW_S, deadline - time.monotonic())
        result = harness.measure(WRITE_RATE, seconds, False)
        for proc in procs.values():
            _alive(box, proc)
        out.append({k: result[k] for k in ("writes", "achieved_rate", "p50_ms", "p99_ms",
                                           "max_ms", "missing")})
        log(f"soak: window {len(out)}: p99 {result['p99_ms']} ms at {result['achieved_rate']}/s")
    return out


def _big_transaction(box: Sandbox, procs: dict, sampler: "Sampler", harness: Harness,
                     rows: int) -> dict:
    """Commit ``rows`` inserts in one transaction; wait until all their keys are gone."""
    first = 10_000_000
    ids = range(first, first + rows)
    keys = [f"{box.prefix}lag:{i}" for i in ids]
    r = box.stack.redis()
    conn = box.stack.admin(box.db, autocommit=False)
    try:
        for i in range(0, rows, BIG_INSERT_CHUNK):
            pipe = r.pipeline(transaction=False)
            for key in keys[i:i + BIG_INSERT_CHUNK]:
                pipe.set(key, b"cached", ex=3600)
            pipe.execute()
        before = {name: _status(proc.pid)["VmRSS"] for name, proc in procs.items()}
        hwm_before = {name: _status(proc.pid)["VmHWM"] for name, proc in procs.items()}
        with conn.cursor() as cur:
            for i in range(0, rows, BIG_INSERT_CHUNK):
                cur.executemany("INSERT INTO lag (id, v, note) VALUES (%s, %s, %s)",
                                [(j, j % 1000, f"big {j}") for j in ids[i:i + BIG_INSERT_CHUNK]])
        t0 = time.perf_counter()
        conn.commit()
        log(f"soak: committed one {rows}-row transaction")

        def left() -> int:
            for proc in procs.values():
                _alive(box, proc)
            count = 0
            for i in range(0, rows, BIG_INSERT_CHUNK):
                pipe = r.pipeline(transaction=False)
                for key in keys[i:i + BIG_INSERT_CHUNK]:
                    pipe.exists(key)
                count += sum(pipe.execute())
            return count
        wait_for(lambda: left() == 0, BIG_WAIT_S, f"the {rows} keys of one transaction to go",
                 interval=1.0)
        elapsed = time.perf_counter() - t0
        after = {name: _status(proc.pid) for name, proc in procs.items()}
    finally:
        conn.close()
        r.close()
    return {"rows": rows, "applied_s": round(elapsed, 2),
            "rows_per_s": round(rows / elapsed, 1),
            "rss_before_mb": before, "vmhwm_before_mb": hwm_before,
            "vmhwm_after_mb": {n: s["VmHWM"] for n, s in after.items()},
            "rss_after_mb": {n: s["VmRSS"] for n, s in after.items()},
            "peak_above_before_mb": {n: round(after[n]["VmHWM"] - before[n], 1) for n in procs}}


class Sampler:
    """Reads the children's VmRSS every SAMPLE_S on a thread."""

    def __init__(self, procs: dict):
        self._procs = procs
        self.series: dict[str, list[tuple[float, float]]] = {
            key: [] for name in procs for key in (name, f"{name}.children")}
        self._stop = threading.Event()
        self._worker = Worker(self._loop, "rss-sampler")
        self.t0 = time.monotonic()

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._worker.start()

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(SAMPLE_S):
                return

    def _sample(self) -> None:
        now = time.monotonic()
        for name, proc in self._procs.items():
            if proc.poll() is None:
                self.series[name].append((now, _status(proc.pid)["VmRSS"]))
                children = descendants(proc.pid)
                if children:
                    rss = sum(_status(pid).get("VmRSS", 0.0) for pid in children)
                    self.series[f"{name}.children"].append((now, round(rss, 1)))

    def snapshot(self) -> dict:
        return {name: s[-1][1] for name, s in self.series.items() if s}

    def stop(self) -> None:
        self._stop.set()
        if self._worker.is_alive():
            self._worker.join(10)


def _growth(series: list[tuple[float, float]], t0: float, until: float) -> dict:
    """RSS growth over the sustained load: after SETTLE_S, before the big transaction."""
    settled = [mb for t, mb in series if t - t0 >= SETTLE_S and t <= until]
    if len(settled) < 2:
        return {"from_mb": None, "to_mb": None, "growth": None,
                "note": "run shorter than the settle time plus one sample"}
    # the median of the first and last minute's samples: one sample is GC noise
    per_min = max(1, int(60 / SAMPLE_S))
    start = percentile(settled[:per_min], 50)
    end = percentile(settled[-per_min:], 50)
    return {"from_mb": round(start, 1), "to_mb": round(end, 1),
            "growth": round((end - start) / start, 4), "samples": len(settled)}


def _status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MB (none of a process that exited meanwhile)."""
    out = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            name, value = line.split(":", 1)
            out[name] = round(int(value.split()[0]) / 1024, 1)
    return out
