"""Table-level invalidation: remove every key of one table among many others.

Part 1, the scan itself: ``RedisCache.invalidate_table`` (what a TRUNCATE/DROP/RENAME, a
statement-logged write and ``cachesync resync`` run): SCAN by the template's glob over the
whole keyspace, full-match, pipelined UNLINK of each key and its lease. Baseline, same run:
the same keys UNLINKed (with their leases, same pipeline size) when their names are already
known, which is what an index of keys per table would give, without maintaining one on
every fill.

Part 2, end to end (``pipeline``, bench/table_pipeline.py, also alone with
``--only table_pipeline``): ``cachesync tail`` and the python engine on a fresh
topic (3 partitions), a writer committing rows of another table at a steady rate, then a
TRUNCATE of the table whose keys are cached. Per mode: the time from the TRUNCATE's commit
until its keys are gone, and the other table's commit -> apply lag (p50, p99) before it and
while the scan runs. Modes: ``beside`` (the default: the scan runs beside the row stream,
once per event) and ``inline`` (baseline, same run: the scan in the batch, once per
partition copy, nothing else applied meanwhile).
``python -m bench --only table_invalidate [--quick]`` (not in the default set: it writes
millions of keys at full size).
"""

from __future__ import annotations

import time

from bench import table_pipeline
from bench.common import Sandbox, log, ratio, summarize
from cachesync.consumer.adapters.redis_cache import PIPELINE_CHUNK, RedisCache
from cachesync.schema.keys import lease_key
from cachesync.schema.mapping import parse_mappings

NAME = "table_invalidate"
SIZES = {"full": (1_000_000, 5_000_000), "quick": (100_000, 500_000)}
FILL_CHUNK = 10_000


def run(stack, quick: bool, runs: int) -> dict:
    out = scan_part(stack, quick, runs)
    out["pipeline"] = table_pipeline.run(stack, quick, runs)
    return out


def scan_part(stack, quick: bool, runs: int) -> dict:
    table_keys, other_keys = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        mapping = parse_mappings({"bench.items": {"keys": [box.prefix + "item:{id}"]}}).get(
            "bench", "items")
        fill(r, box.prefix + "other:", other_keys)
        log(f"{NAME}: {other_keys:,} other keys written")
        sides: dict[str, list[dict]] = {"scan": [], "known": []}
        for i in range(runs):
            for what in (("scan", "known") if i % 2 == 0 else ("known", "scan")):
                fill(r, box.prefix + "item:", table_keys)
                result = scan_run(stack, mapping) if what == "scan" else known_run(
                    r, box.prefix + "item:", table_keys)
                if result["removed"] != table_keys:
                    raise AssertionError(f"{what} removed {result['removed']} of {table_keys}")
                sides[what].append(result)
                log(f"{NAME}: run {i + 1}/{runs} {what}: {result['elapsed_s']:.1f}s "
                    f"({result['keys_per_s']:,.0f} keys/s)")
        left = sum(1 for _ in r.scan_iter(match=box.prefix + "other:*", count=10_000))
        if left != other_keys:
            raise AssertionError(f"{other_keys - left} keys of other tables were removed")
        scan = summarize(sides["scan"], ["elapsed_s", "keys_per_s"])
        known = summarize(sides["known"], ["elapsed_s", "keys_per_s"])
        return {"params": {"table_keys": table_keys, "other_keys": other_keys, "runs": runs,
                           "pipeline_chunk": PIPELINE_CHUNK // 2},
                "cachesync_scan": scan, "baseline_known_keys": known,
                "scan_time_over_known": ratio(scan["median"]["elapsed_s"],
                                              known["median"]["elapsed_s"]),
                "other_keys_intact": True}
    finally:
        r.close()
        box.cleanup()


def fill(r, prefix: str, n: int) -> None:
    for start in range(0, n, FILL_CHUNK):
        pipe = r.pipeline(transaction=False)
        pipe.mset({f"{prefix}{i}": b"v" for i in range(start, min(n, start + FILL_CHUNK))})
        pipe.execute()


def scan_run(stack, mapping) -> dict:
    cache = RedisCache(stack.env["CACHESYNC_REDIS_URL"])
    try:
        t0 = time.perf_counter()
        removed = cache.invalidate_table(mapping)
        elapsed = time.perf_counter() - t0
    finally:
        cache.close()
    return {"what": "scan", "removed": removed, "elapsed_s": elapsed,
            "keys_per_s": removed / elapsed}


def known_run(r, prefix: str, n: int) -> dict:
    chunk = PIPELINE_CHUNK // 2
    t0 = time.perf_counter()
    removed = 0
    for start in range(0, n, chunk):
        keys = [f"{prefix}{i}" for i in range(start, min(n, start + chunk))]
        pipe = r.pipeline(transaction=False)
        pipe.unlink(*keys)
        pipe.unlink(*(lease_key(k) for k in keys))
        removed += int(pipe.execute()[0])
    elapsed = time.perf_counter() - t0
    return {"what": "known", "removed": removed, "elapsed_s": elapsed,
            "keys_per_s": removed / elapsed}
