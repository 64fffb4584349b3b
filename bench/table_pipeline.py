"""A TRUNCATE end to end: how long until the table's keys are gone, and what it does to the
lag of another table's changes meanwhile.

``cachesync tail`` and the python engine on a fresh topic (3 partitions, so 3 copies of the
table-level event); ``table_keys`` keys of ``items`` cached among ``other_keys`` keys of no
table; a writer commits rows of ``others`` at ``rate`` per second, each carrying its
commit time (``ts_us``), and the engine's batch hook records each one's commit -> apply
lag. After ``BASE_S`` seconds, ``TRUNCATE items``. Per mode, medians over the runs: the
time from the TRUNCATE's commit until every ``items`` key is gone, the other table's lag
p50/p99 before it and p99 from the TRUNCATE until its keys are gone, and that p99 over the
one before; the scans the engine ran and the SCAN calls Redis served (INFO commandstats),
and the ``items`` keys left, counted with one SCAN once the run is over. Modes (``BENCH_TABLE_
PIPELINE_MODES``, comma-separated): ``beside`` (the default: consumer.table_jobs, one scan
per event beside the row stream), ``inline`` (the scan in the batch, once per copy) and
``none`` (baseline: the same writer and keys, no TRUNCATE, for as long as the longest
``beside`` run before it took; 30 s before any). ``beside:<busy share>:<SCAN COUNT>`` runs
``beside`` with ``consumer.table_scan_busy_share`` and ``consumer.table_scan_count`` set, so
several paces are measured against one baseline in one run.

Keys are written by a Lua loop on the server (``SET ... PX``, the TTL the consumer's
defaults give: 3600 s shortened by up to 10 %), the other keys once, the table's before each
run. Sizes: ``--quick``, full, or ``BENCH_TABLE_PIPELINE_SIZE=medium`` (1,000,000 table keys
among 5,000,000; 0.5 GB) or ``scale`` (among 50,000,000; about 5 GB of Redis memory): these two
need an empty Redis of their own, which they flush at the end (point ``CACHESYNC_REDIS_URL``
of the env file at it). ``python -m bench --only table_pipeline [--quick]``.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pymysql
import redis

from bench.common import Sandbox, Worker, log, percentile, ratio, summarize, wait_for
from cachesync.consumer.adapters.kafka_source import KafkaSource
from cachesync.consumer.engine import PythonEngine
from cachesync.runtime.kafka_security import client_security
from cachesync.wiring import (build_cache, build_dead_letters, build_dedup, build_table_jobs,
                              kafka_group, mappings)

NAME = "table_pipeline"
# (items keys cached, other keys, others commits/s)
SIZES = {"full": (200_000, 2_000_000, 200), "quick": (20_000, 200_000, 100),
         "medium": (1_000_000, 4_000_000, 200), "scale": (1_000_000, 49_000_000, 200)}
DEFAULT_MODES = {"full": "beside,inline", "quick": "beside,inline", "medium": "beside,none",
                 "scale": "beside,none"}
OWN_REDIS = ("medium", "scale")     # sizes that need an empty Redis of their own (flushed)
BASE_S = 3.0            # lag measured before the TRUNCATE
CAUGHT_UP_S = 1.0       # a warmed-up run's latest commit -> apply lag
NONE_S = 30.0           # the ``none`` baseline's window when no ``beside`` run preceded it
FILL_CHUNK = 10_000     # keys per server-side fill script (well under Redis's busy-script time)
TTL_MS, TTL_JITTER = 3_600_000, 0.1     # the consumer's default ttl and ttl_jitter
MODES = ("beside", "inline", "none")
NO_SUCH_TABLE = 1146    # MySQL's ER_NO_SUCH_TABLE
FIELDS = ["gone_s", "base_p50_ms", "base_p99_ms", "during_p50_ms", "during_p99_ms",
          "during_p99_over_base", "table_scans", "scan_calls", "scan_ms_per_call", "items_left"]
# SET each key prefix..i for i in [lo, hi) with a TTL of ttl_ms shortened by up to jitter_ms
# (spread by the index); keys are not declared: a standalone Redis
FILL_LUA = """
local prefix, lo, hi = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl, jitter = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = lo, hi - 1 do
  redis.call('SET', prefix .. i, 'v', 'PX', ttl - (i * 7919) % jitter)
end
return hi - lo
"""


def run(stack, quick: bool, runs: int) -> dict:
    size = os.environ.get("BENCH_TABLE_PIPELINE_SIZE") or ("quick" if quick else "full")
    table_keys, other_keys, rate = SIZES[size]
    modes = _modes(os.environ.get("BENCH_TABLE_PIPELINE_MODES") or DEFAULT_MODES[size])
    r = stack.redis()
    if size in OWN_REDIS and r.dbsize():
        r.close()
        raise RuntimeError(f"BENCH_TABLE_PIPELINE_SIZE={size} needs a Redis of its own, empty "
                           f"(it flushes it at the end): {stack.env['CACHESYNC_REDIS_URL']} "
                           f"holds {r.dbsize():,} keys")
    box = Sandbox(stack, NAME)
    try:
        box.create_schema("CREATE TABLE items (id INT PRIMARY KEY)",
                          "CREATE TABLE others (id INT AUTO_INCREMENT PRIMARY KEY, "
                          "ts_us BIGINT NOT NULL)")
        t0 = time.perf_counter()
        _populate(stack, r, box.prefix + "bulk", other_keys)
        log(f"{NAME}: {other_keys:,} other keys written in {time.perf_counter() - t0:.0f}s; "
            f"{r.dbsize():,} keys in Redis, {r.info('memory')['used_memory_human']}")
        sides: dict[str, list[dict]] = {m: [] for m in modes}
        last_gone = None    # kept across runs: a ``none`` listed first measures as long as
        for i in range(runs):   # the longest scan of the runs before
            for mode in (modes if i % 2 == 0 or "none" in modes else tuple(reversed(modes))):
                _fill(r, box.prefix + "item:", table_keys if _kind(mode) != "none" else 0)
                window = last_gone or NONE_S
                result = one_run(box, mode, table_keys, rate, window)
                if _kind(mode) == "beside":     # the none baseline as long as the longest
                    last_gone = max(last_gone or 0, result["gone_s"])
                sides[mode].append(result)
                log(f"{NAME}: run {i + 1}/{runs} {mode}: keys gone {result['gone_s']:.2f}s after "
                    f"the TRUNCATE ({result['table_scans']} scan, {result['scan_calls']} SCAN "
                    f"calls); others' p99 {result['base_p99_ms']:.0f} ms before, "
                    f"{result['during_p99_ms']:.0f} ms during (load {result['loadavg']})")
                # the whole run, so that an interrupted benchmark (an hour at scale) keeps it
                log(f"{NAME}: run {i + 1}/{runs} {mode}: {json.dumps(result)}")
        out = {"params": {"size": size, "table_keys": table_keys, "other_keys": other_keys,
                          "keys_in_redis": other_keys + table_keys, "others_commits_per_s": rate,
                          "partitions": 3, "runs": runs, "modes": list(modes),
                          "ttl_ms": TTL_MS, "ttl_jitter": TTL_JITTER}}
        for mode in modes:
            out[mode] = summarize(sides[mode], FIELDS)
        if "inline" in modes:
            out["gone_s_beside_over_inline"] = ratio(out["beside"]["median"]["gone_s"],
                                                     out["inline"]["median"]["gone_s"])
        if "none" in modes:
            for mode in (m for m in modes if _kind(m) == "beside"):
                out[f"during_p99_{mode}_over_none"] = ratio(
                    out[mode]["median"]["during_p99_ms"], out["none"]["median"]["during_p99_ms"])
        out["dedup_purge"] = _purge_s(box)
        return out
    except Exception as e:
        log(f"{NAME} failed ({type(e).__name__}: {e}); cleaning up")
        raise
    finally:
        if size in OWN_REDIS:   # deleting millions of keys one by one takes minutes
            r.flushall(asynchronous=True)
        r.close()
        box.cleanup()


def _modes(spec: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in spec.split(",") if m.strip())
    unknown = [m for m in modes if _kind(m) not in MODES
               or (":" in m and (_kind(m) != "beside" or len(m.split(":")) != 3))]
    if unknown or not modes:
        raise ValueError(f"BENCH_TABLE_PIPELINE_MODES: {spec!r}; known: {', '.join(MODES)}")
    return modes


def _kind(mode: str) -> str:
    """``beside``, ``inline`` or ``none``: a mode without its pace."""
    return mode.split(":")[0]


def _pace(mode: str) -> dict:
    """The consumer settings of ``beside:<busy share>:<SCAN COUNT>`` (none: the defaults)."""
    if ":" not in mode:
        return {}
    _, share, count = mode.split(":")
    return {"table_scan_busy_share": float(share), "table_scan_count": int(count)}


def one_run(box: Sandbox, mode: str, table_keys: int, rate: float, window_s: float) -> dict:
    """One run of ``mode``; ``window_s``: how long the ``none`` baseline measures after its
    first BASE_S seconds (the ``beside`` run's time until the keys were gone)."""
    topic = box.new_topic(3)
    cfg = box.write_config({f"{box.db}.items": {"keys": [box.prefix + "item:{id}"]},
                            # ts_us in the key: the events carry only the key columns
                            f"{box.db}.others": {"keys": [box.prefix + "other:{id}:{ts_us}"]}},
                           topic=topic, tailer={"heartbeat_interval_s": 0},
                           consumer={"dedup_store": "redis", **_pace(mode)},
                           metrics={"listen": "127.0.0.1:0"})   # a free port on a shared host
    lags: list[tuple[float, float]] = []      # (commit time, lag s) of each others row

    def on_batch(result):
        for ep in result.applied:
            if ep.event.table == "others" and ep.event.after:
                committed = ep.event.after["ts_us"] / 1e6
                lags.append((committed, result.applied_at - committed))
    tailer = box.spawn("tail", cfg)
    engine = _engine(box.settings(cfg), mode, on_batch)
    worker, writer = Worker(engine.run, "engine"), _Writer(box, rate)
    r = box.stack.redis()
    try:
        try:
            wait_for(lambda: _running(tailer) and _checkpointed(box, box.settings(cfg).tailer.name),
                     120, "the tailer's start checkpoint")
        except (TimeoutError, ChildProcessError) as e:
            raise RuntimeError(f"{e}; the tailer said: {box.proc_log(tailer)}") from e
        worker.start()
        writer.start()
        # warmed up once the rows flow (the group joined, the first batches applied)
        wait_for(lambda: worker.check() or len(lags) >= rate, 300, "the other table flowing")
        try:        # and the backlog of the start applied (the group's join took seconds)
            wait_for(lambda: worker.check() or lags[-1][1] < CAUGHT_UP_S, 60, "caught up")
        except TimeoutError:
            log(f"{NAME}: {mode}: the lag stayed over {CAUGHT_UP_S}s for 60s; measuring anyway")
        started = time.time()
        time.sleep(BASE_S)          # the baseline window: lag under the steady writer alone
        scans_before = _scan_calls(r)
        truncated = time.time()
        if _kind(mode) == "none":
            time.sleep(window_s)    # the same writer, nothing truncated
        else:
            box.stack.admin_sql(f"TRUNCATE TABLE `{box.db}`.items")
            wait_for(lambda: worker.check() or engine.stats.table_keys_deleted >= table_keys,
                     3600, "the items keys gone", interval=0.01)
        gone = time.time()
        scan_calls, scan_us = (a - b for a, b in zip(_scan_calls(r), scans_before))
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
    # counted once, with the run over: a SCAN of the whole keyspace
    left = 0 if _kind(mode) == "none" else sum(
        1 for _ in r.scan_iter(match=box.prefix + "item:*", count=10_000))
    r.close()
    base = [lag for c, lag in lags if started <= c < truncated]
    during = [lag for c, lag in lags if truncated <= c <= gone] or [gone - truncated]
    b99, d99 = percentile(base, 99), percentile(during, 99)
    return {"mode": mode, "gone_s": gone - truncated, "base_p50_ms": 1000 * percentile(base, 50),
            "base_p99_ms": 1000 * b99, "during_p50_ms": 1000 * percentile(during, 50),
            "during_p99_ms": 1000 * d99, "during_p99_over_base": d99 / b99,
            "others_applied": len(lags), "during_samples": len(during),
            "during_max_ms": 1000 * max(during), "table_scans": engine.stats.table_scans,
            "table_scans_reused": engine.stats.table_scans_reused,
            "copies": sum(s.copies for s in engine.table_scans.scans())
            if engine.table_scans else None,
            "scan_calls": scan_calls, "items_left": left,
            "scan_ms_per_call": scan_us / 1000 / max(1, scan_calls),
            "paused_s": sum(s.paused for s in engine.table_scans.scans())
            if engine.table_scans else None,
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _checkpointed(box: Sandbox, name: str) -> bool:
    """Whether the tailer ``name`` stored its start checkpoint (the table itself appears with
    the first tailer that runs on a fresh server)."""
    try:
        return bool(box.stack.admin_sql(
            "SELECT 1 FROM cachesync.cachesync_checkpoint WHERE name = %s", (name,)))
    except pymysql.err.ProgrammingError as e:
        if e.args[0] == NO_SUCH_TABLE:
            return False
        raise


def _running(proc) -> bool:
    """True while ``proc`` runs; raises ChildProcessError once it exited."""
    if proc.poll() is not None:
        raise ChildProcessError(f"exited with code {proc.returncode}")
    return True


def _scan_calls(r) -> tuple[int, int]:
    """SCAN calls Redis served so far and the microseconds it spent in them (INFO
    commandstats)."""
    stat = r.info("commandstats").get("cmdstat_scan", {})
    return int(stat.get("calls", 0)), int(stat.get("usec", 0))


def _purge_s(box: Sandbox) -> dict:
    """How long one periodic purge of the Redis dedup store takes on this keyspace (between
    two batches of the engine): with the retention every record was written with (nothing to
    scan for), and with a shorter one (a SCAN of the whole keyspace)."""
    from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
    store = RedisDedupStore(box.stack.env["CACHESYNC_REDIS_URL"], box.new_group(), 86400)
    try:
        store.claim(["bench"], lease_s=1)       # a writer's retention on record
        out = {}
        for what, retention in (("same_retention_s", 86400), ("shorter_retention_s", 3600)):
            t0 = time.perf_counter()
            store.purge(retention, 10_000)
            out[what] = round(time.perf_counter() - t0, 3)
        return out
    finally:
        store.close()


def _engine(settings, mode: str, on_batch) -> PythonEngine:
    """The engine as build_engine makes it (``beside``), or without the table scans beside
    the rows (``inline``: each copy scanned in its batch)."""
    k = settings.kafka
    source = KafkaSource(k.bootstrap_servers, k.topic, k.group_id, group=kafka_group(settings),
                         security=client_security(k))
    return PythonEngine(source, build_dedup(settings), build_cache(settings),
                        build_dead_letters(settings), mappings(settings),
                        options=settings.consumer, on_batch=on_batch,
                        table_jobs=build_table_jobs(settings) if _kind(mode) == "beside" else None)


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
    """Keys ``prefix``0 .. n-1 with the consumer's default TTL (as its writes and fills set)."""
    script = r.register_script(FILL_LUA)
    for start in range(0, n, FILL_CHUNK):
        script(args=[prefix, start, min(n, start + FILL_CHUNK), TTL_MS, int(TTL_MS * TTL_JITTER)])


def _populate(stack, r, prefix: str, n: int) -> None:
    """Keys ``prefix``:0 .. n-1 of no table: DEBUG POPULATE where the server allows it
    (``enable-debug-command local``: a C loop, ~10x the Lua one), else the Lua fill."""
    try:
        with redis.Redis.from_url(stack.env["CACHESYNC_REDIS_URL"], socket_timeout=None) as slow:
            slow.execute_command("DEBUG", "POPULATE", n, prefix, 1)
    except redis.ResponseError as e:
        log(f"{NAME}: DEBUG POPULATE refused ({e}): filling with a Lua loop")
        _fill(r, prefix + ":", n)
