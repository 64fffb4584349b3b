"""The consistency monitor's cost and its false positives, under a racing write workload.

`cachesync tail` and `cachesync consume` (child processes) with the monitor checking every
applied event (``monitor.sample_ratio: 1``) up to ``monitor.max_checks_per_s``. Writers
update random rows of an update-mode table (cachesync writes the values) and of a
delete-mode table that readers fill with ``read_through``, at a fixed rate. Every run reports
what the consumer's /metrics say the monitor did: checks per second, extra MySQL reads per
second, samples dropped, and the verdicts. Nothing is stale here (every write goes through
the binlog, every fill through a lease), so every ``stale`` is a false positive.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
import urllib.request

import pymysql
from prometheus_client.parser import text_string_to_metric_families

from bench.common import Sandbox, Worker, log, median, wait_for
from bench.lag import _alive, _checkpoint_stored
from cachesync.client import read_through

NAME = "monitor"
SIZES = {"full": {"minutes": 1.0, "rows": 500, "write_rate": 200, "readers": 2},
         "quick": {"minutes": 0.25, "rows": 200, "write_rate": 100, "readers": 2}}
MONITOR = {"sample_ratio": 1.0, "window_s": 2.0, "max_checks_per_s": 100}
DDL = ("CREATE TABLE items (id INT PRIMARY KEY, price BIGINT NOT NULL, name VARCHAR(40))",
       "CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(40))")
SETTLE_S = 120


def run(stack, quick: bool, runs: int, minutes: float | None = None) -> dict:
    p = dict(SIZES["quick" if quick else "full"])
    if minutes is not None:
        p["minutes"] = minutes
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(*DDL)
        topic = box.new_topic(3)
        cfg = box.write_config({f"{box.db}.items": {"keys": [box.prefix + "item:{id}"],
                                                    "mode": "update"},
                                f"{box.db}.users": {"keys": [box.prefix + "user:{id}"]}},
                               topic=topic, metrics={"listen": "127.0.0.1:0"})
        _add_monitor(cfg)
        tail = box.spawn("tail", cfg)
        name = box.settings(cfg).tailer.name
        wait_for(lambda: _alive(box, tail) and _checkpoint_stored(stack, name), 60,
                 "the tailer's start checkpoint")
        consume = box.spawn("consume", cfg)
        addr = wait_for(lambda: _address(box, consume), 60, "the consumer's metrics address",
                        interval=0.2)
        rows = ",".join(f"({i}, 0, 'i')" for i in range(p["rows"]))
        stack.admin_sql(f"INSERT INTO `{box.db}`.items VALUES {rows}")
        stack.admin_sql(f"INSERT INTO `{box.db}`.users (id, name) "
                        f"SELECT id, 'u' FROM `{box.db}`.items")
        wait_for(lambda: _counts(addr).get("cachesync_consumer_events_applied_total", 0) >= 2 * p["rows"],
                 SETTLE_S, "the rows' inserts applied", interval=0.5)
        results = []
        for i in range(runs):
            results.append(_measure(box, addr, p))
            log(f"monitor: run {i + 1}/{runs}: {results[-1]['checks_per_s']} checks/s, "
                f"{results[-1]['mysql_reads_per_s']} MySQL reads/s, stale {results[-1]['stale']}")
        return {
            "description": "the consistency monitor inside `cachesync consume`, every applied "
                           "event sampled up to the rate cap, under writes and read_through fills",
            "params": {**p, "monitor": MONITOR, "runs": runs},
            "runs": results,
            "median": {k: median([r[k] for r in results]) for k in
                       ("checks_per_s", "mysql_reads_per_s", "events_per_s", "stale",
                        "consistent", "missing", "unsettled", "dropped")},
            "false_positives": sum(r["stale"] for r in results),
        }
    finally:
        box.cleanup()


def _add_monitor(cfg) -> None:
    import yaml
    doc = yaml.safe_load(cfg.read_text())
    doc["monitor"] = MONITOR
    cfg.write_text(yaml.safe_dump(doc))


def _address(box: Sandbox, proc) -> str | None:
    if proc.poll() is not None:
        raise RuntimeError(f"consume exited {proc.returncode}: {box.proc_log(proc)}")
    m = re.search(r"metrics and health on http://(\S+) ", box.proc_log(proc, 100000))
    return m and m.group(1)


_UNLABELLED = ("cachesync_monitor_mysql_reads_total", "cachesync_consumer_events_applied_total",
               "cachesync_monitor_pending", "cachesync_monitor_check_errors_total")


def _counts(addr: str) -> dict:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "cachesync_monitor_checks_total":
                out[s.labels["result"]] = out.get(s.labels["result"], 0) + s.value
            elif s.name == "cachesync_monitor_samples_dropped_total":
                out["dropped"] = out.get("dropped", 0) + s.value
            elif s.name in _UNLABELLED:
                out[s.name] = s.value
    return out


def _measure(box: Sandbox, addr: str, p: dict) -> dict:
    """One timed phase of the workload; the monitor's counters over it, once it settled."""
    before = _counts(addr)
    seconds = p["minutes"] * 60
    work = Workload(box, p["rows"], p["write_rate"], p["readers"], seconds)
    t0 = time.monotonic()
    work.run()
    elapsed = time.monotonic() - t0
    during = _counts(addr)          # the checks done while the workload ran: the rate
    after = wait_for(lambda: (lambda c: c if c.get("cachesync_monitor_pending") == 0 and
                              c.get("cachesync_consumer_events_applied_total", 0) - before.get(
                                  "cachesync_consumer_events_applied_total", 0) >= work.events else None)(
        _counts(addr)), SETTLE_S, "the consumer and the monitor to settle", interval=0.5)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    checked = sum(during.get(r, 0) - before.get(r, 0)
                  for r in ("consistent", "stale", "missing", "unverifiable", "unsettled"))
    reads = during.get("cachesync_monitor_mysql_reads_total", 0) - before.get(
        "cachesync_monitor_mysql_reads_total", 0)
    return {"seconds": round(elapsed, 1), "events": work.events, "fills": work.fills,
            "events_per_s": round(work.events / elapsed, 1),
            "checks_per_s": round(checked / elapsed, 1),
            "mysql_reads_per_s": round(reads / elapsed, 1),
            **{r: int(delta.get(r, 0)) for r in ("consistent", "stale", "missing",
                                                   "unverifiable", "unsettled", "dropped")},
            "check_errors": int(delta.get("cachesync_monitor_check_errors_total", 0))}


class Workload:
    """Writers at ``write_rate`` row changes/s in total (half ``items``, half ``users``) over
    ``rows`` rows, and ``readers`` filling ``users`` with ``read_through``, for ``seconds``
    (also the integration test's workload). ``box`` has ``stack``, ``db`` and ``prefix``."""

    def __init__(self, box, rows: int, write_rate: float, readers: int, seconds: float):
        self._box, self._rows, self._rate = box, rows, write_rate
        self._until = time.monotonic() + seconds
        self.events = self.fills = 0
        self._lock = threading.Lock()
        self._workers = [Worker(self._write, "monitor-writer")]
        self._workers += [Worker(lambda i=i: self._read(random.Random(i)), f"monitor-reader-{i}")
                          for i in range(readers)]

    def run(self) -> None:
        for w in self._workers:
            w.start()
        for w in self._workers:
            w.join()
            w.check()

    def _write(self) -> None:
        rnd, interval = random.Random(7), 1.0 / self._rate
        with self._box.stack.admin(self._box.db) as conn, conn.cursor() as cur:
            due = time.monotonic()
            while time.monotonic() < self._until:     # a slow host writes fewer, not longer
                row = rnd.randrange(self._rows)
                if rnd.random() < 0.5:
                    cur.execute("UPDATE items SET price = price + 1 WHERE id = %s", (row,))
                else:
                    cur.execute("UPDATE users SET name = %s WHERE id = %s",
                                (f"n{rnd.random():.6f}", row))
                self.events += 1
                due += interval
                time.sleep(max(0.0, due - time.monotonic()))

    def _read(self, rnd: random.Random) -> None:
        box, client = self._box, self._box.stack.redis()
        with box.stack.admin(box.db) as conn:
            def load(uid):
                with conn.cursor(pymysql.cursors.DictCursor) as cur:
                    cur.execute("SELECT id, name FROM users WHERE id = %s", (uid,))
                    return json.dumps(cur.fetchone())
            while time.monotonic() < self._until:
                uid = rnd.randrange(self._rows)
                read_through(client, f"{box.prefix}user:{uid}", lambda: load(uid), ttl_s=600)
                with self._lock:
                    self.fills += 1
                time.sleep(0.01)
        client.close()
