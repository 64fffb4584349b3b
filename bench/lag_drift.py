"""Commit -> invalidation lag at 10,000 commits/s asked over a long run, per dedup choice:
does the lag drift as the dedup records pile up?

For each choice, in a world of its own (table, topic, group): `cachesync tail` and
`cachesync consume` as child processes, the lag benchmark's writers and observer
(``bench.lag.Harness``), a floor run (the writer deletes its own keys), then SEGMENTS
consecutive segments of the run's minutes at RATE commits/s; figures per segment, and the
last segment's over the first. Between segments the writers are re-spawned and the next
keys cached (seconds during which nothing is written: the pipeline may catch up there).

The MySQL choices start with PREFILL done records already in the consumer's namespace
(written straight into the table with ``sql_log_bin = 0``), so the table is past the
devstack's 256 MB buffer pool from the first segment: the rows layout's ~200 B per record
x 2,000,000 is about twice the pool. Choices (``BENCH_DRIFT_CHOICES``, comma-separated;
default ``redis``): ``redis`` (the default store; its records are in Redis memory, not
prefilled), ``mysql`` (rows layout), ``mysql_compact``; an entry may say its own length and
repetitions as ``name:minutes:runs`` (``redis:30:1,mysql:3:3``), else ``--minutes`` and
``--runs`` apply. ``BENCH_DRIFT_RATE`` asks another commit rate than 10,000/s (one the host
sustains shows the store's own drift apart from a pipeline that falls behind). Each segment
also records the host's load, the children's CPU share and Redis's key count and memory, to
tell a store that slows down from a host that does. ``python -m bench --only lag_drift [--quick] [--minutes M] [--runs N]``.
"""

from __future__ import annotations

import os
import time

from bench.common import Sandbox, log, median, ratio, wait_for
from bench.lag import DDL, KEYS_PER_ROW, Harness, _alive, _checkpoint_stored
from bench.consumer import _drop_redis_dedup

NAME = "lag_drift"
RATE = int(os.environ.get("BENCH_DRIFT_RATE", "10000"))
SEGMENTS = 6
FLOOR_S = 10.0
PREFILL = {"full": 2_000_000, "quick": 100_000}
PREFILL_CHUNK = 250_000
CHOICES = {"redis": {"dedup_store": "redis"},
           "mysql": {"dedup_store": "mysql"},
           "mysql_compact": {"dedup_store": "mysql", "dedup_mysql_layout": "compact"}}
COMPACT_TABLES = ("cachesync_dedup_compact", "cachesync_dedup_compact_done")
FIELDS = ("p50_ms", "p99_ms", "achieved_rate", "missing")
# any free port for the children's /metrics: runs of several choices at once do not collide
METRICS_LISTEN = "127.0.0.1:0"


def run(stack, quick: bool, runs: int, minutes: float | None = None) -> dict:
    minutes = minutes or (1.0 if quick else 30.0)
    plan = _plan(os.environ.get("BENCH_DRIFT_CHOICES", "redis"), minutes, runs)
    prefill = PREFILL["quick" if quick else "full"]
    out = {"params": {"rate_per_s": RATE, "plan": {c: {"minutes": m, "runs": n}
                                                   for c, m, n in plan},
                      "segments": SEGMENTS, "keys_per_row": KEYS_PER_ROW,
                      "prefill_mysql_records": prefill, "floor_s": FLOOR_S}}
    for choice, minutes, runs in plan:
        results = []
        for i in range(runs):
            results.append(one_run(stack, choice, minutes * 60 / SEGMENTS, prefill))
            log(f"{NAME}: {choice} run {i + 1}/{runs}: first segment p99 "
                f"{results[-1]['segments'][0]['p99_ms']} ms, last "
                f"{results[-1]['segments'][-1]['p99_ms']} ms")
        out[choice] = {"runs": results, "median": {
            f"{which}_{f}": median([r[f"{which}_{f}"] for r in results])
            for which in ("first", "last", "all") for f in FIELDS}}
        m = out[choice]["median"]
        m["last_over_first_p50"] = ratio(m["last_p50_ms"], m["first_p50_ms"])
        m["last_over_first_p99"] = ratio(m["last_p99_ms"], m["first_p99_ms"])
    return out


def _plan(spec: str, minutes: float, runs: int) -> list[tuple[str, float, int]]:
    """``name[:minutes[:runs]]`` entries, comma-separated; raises ValueError."""
    plan = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        name, *rest = entry.split(":")
        if name not in CHOICES:
            raise ValueError(f"BENCH_DRIFT_CHOICES: unknown {name!r}; known: {list(CHOICES)}")
        plan.append((name, float(rest[0]) if rest else minutes,
                     int(rest[1]) if len(rest) > 1 else runs))
    return plan


def one_run(stack, choice: str, segment_s: float, prefill: int) -> dict:
    box = Sandbox(stack, NAME)
    settings = None
    compact = CHOICES[choice].get("dedup_mysql_layout") == "compact"
    try:
        box.create_schema(DDL)
        if compact:         # the compact layout drops and adds its windows
            stack.admin_sql("GRANT ALTER, DROP ON cachesync.* TO cachesync@'127.0.0.1'")
        topic = box.new_topic(3)
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}",
                                                           box.prefix + "lag:note:{note}"]}},
                               topic=topic, consumer=CHOICES[choice],
                               metrics={"listen": METRICS_LISTEN})
        settings = box.settings(cfg)
        ns = settings.dedup_namespace
        prefilled = _prefill(stack, choice, ns, prefill) if choice != "redis" else 0
        tail = box.spawn("tail", cfg)
        wait_for(lambda: _alive(box, tail) and _checkpoint_stored(stack, settings.tailer.name),
                 60, "the tailer's start checkpoint")
        consume = box.spawn("consume", cfg)
        harness = Harness(box, notified=True)
        try:
            harness.warm_up(lambda: _alive(box, tail) and _alive(box, consume))
            floor = harness.measure_commits(RATE, FLOOR_S, True)
            segments = []
            for k in range(SEGMENTS):
                before = _host_sample(box, tail, consume)
                segments.append({**harness.measure_commits(RATE, segment_s, False),
                                 **_host_delta(before, _host_sample(box, tail, consume))})
                _alive(box, tail)
                _alive(box, consume)
                log(f"{NAME}: {choice} segment {k + 1}/{SEGMENTS}: p50 "
                    f"{segments[-1]['p50_ms']} ms, p99 {segments[-1]['p99_ms']} ms at "
                    f"{segments[-1]['achieved_rate']}/s")
        finally:
            harness.close()
        result = {"choice": choice, "segment_s": segment_s, "prefilled": prefilled,
                  "floor": floor, "segments": segments}
        for which, seg in (("first", segments[0]), ("last", segments[-1])):
            result.update({f"{which}_{f}": seg[f] for f in FIELDS})
        result.update({f"all_{f}": median([s[f] for s in segments]) for f in FIELDS})
        result["keys_per_s"] = round(median([s["achieved_rate"] for s in segments])
                                     * KEYS_PER_ROW, 1)
        return result
    finally:
        for proc in box.procs:  # a consumer still applying would deadlock with the deletes
            box.stop_proc(proc)
        if settings is not None:
            try:
                _forget(box, choice, settings.dedup_namespace)
            except Exception as e:      # the run's figures are kept; the records stay
                log(f"{NAME}: {choice}: its dedup records were not removed "
                    f"({type(e).__name__}: {e})")
        if compact:
            stack.admin_sql("REVOKE ALTER, DROP ON cachesync.* FROM cachesync@'127.0.0.1'")
        box.cleanup()


def _host_sample(box: Sandbox, *procs) -> dict:
    """What ``_host_delta`` compares: clock, the children's CPU ticks, Redis's size."""
    ticks = []
    for proc in procs:
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks.append(int(fields[11]) + int(fields[12]))         # utime + stime
    with box.stack.redis() as r:
        info, keys = r.info(), r.dbsize()
    return {"t": time.monotonic(), "ticks": ticks, "load": os.getloadavg()[0],
            "keys": keys, "used_memory": info["used_memory"],
            "evicted": info.get("evicted_keys", 0), "expired": info.get("expired_keys", 0)}


def _host_delta(a: dict, b: dict) -> dict:
    """Per segment: the tailer's and consumer's share of one core, the 1-minute load at its
    end, and Redis's keys and memory at its end with the keys expired or evicted during it."""
    hz, wall = os.sysconf("SC_CLK_TCK"), b["t"] - a["t"]
    tail_cpu, consume_cpu = ((y - x) / hz / wall for x, y in zip(a["ticks"], b["ticks"]))
    return {"tail_cpu": round(tail_cpu, 3), "consume_cpu": round(consume_cpu, 3),
            "loadavg_1m": round(b["load"], 2), "redis_keys": b["keys"],
            "redis_used_mb": round(b["used_memory"] / 2**20, 1),
            "redis_expired": b["expired"] - a["expired"],
            "redis_evicted": b["evicted"] - a["evicted"]}


def _prefill(stack, choice: str, ns: str, count: int) -> int:
    """``count`` done records in namespace ``ns``, commit times over the last hour."""
    now_ms = int(time.time() * 1000)
    with stack.admin("cachesync") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        if choice == "mysql_compact":
            from cachesync.consumer.adapters.mysql_dedup_compact import CompactMySQLDedupStore
            from bench.dedup_layout import admin_params
            store = CompactMySQLDedupStore(admin_params(stack, "cachesync"), ns, log_bin=False)
            store.counts()          # creates the tables with their windows
            store.close()
            token = (now_ms.to_bytes(6, "big") + os.urandom(10))
            cur.execute("INSERT INTO cachesync_dedup_compact_done (ns, claim_token) "
                        "VALUES (%s, %s)", (ns.encode(), token))
        t0 = time.perf_counter()
        for lo in range(0, count, PREFILL_CHUNK):
            hi = min(count, lo + PREFILL_CHUNK) - 1
            if choice == "mysql_compact":
                step = 3_600_000 / count
                cur.execute(
                    "INSERT INTO cachesync_dedup_compact (ns, id, claim_token, claimed_until) "
                    f"SELECT %s, UNHEX(CONCAT(LPAD(HEX({now_ms - 3_600_000} + "
                    f"FLOOR(seq * {step})), 12, '0'), LEFT(MD5(CONCAT('p', seq)), 20))), "
                    f"%s, NOW(6) FROM seq_{lo}_to_{hi}", (ns.encode(), token))
            else:
                cur.execute(
                    "INSERT INTO cachesync_dedup (ns, msg_id, status, claim_token, "
                    "claimed_until, done_at) SELECT %s, MD5(CONCAT('p', seq)), 'done', "
                    f"REPEAT('0', 32), NOW(6), NOW(6) FROM seq_{lo}_to_{hi}", (ns,))
        log(f"{NAME}: {choice}: {count:,} records prefilled in {time.perf_counter() - t0:.0f}s")
    return count


def _forget(box: Sandbox, choice: str, ns: str) -> None:
    """The run's dedup records (millions: kept out of the binlog while they go)."""
    if choice == "redis":
        _drop_redis_dedup(box, ns)
        return
    with box.stack.admin("cachesync") as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        if choice == "mysql_compact":
            for table in COMPACT_TABLES:
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            return
        while cur.execute("DELETE FROM cachesync_dedup WHERE ns = %s LIMIT 100000", (ns,)):
            pass
