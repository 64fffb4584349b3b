"""What a per-table index of cached keys would cost on the hot path: the Redis work of
filling and invalidating keys with and without keeping a set of the table's keys beside them.

An index replaces a table-level scan of the whole keyspace by a read of the table's own
keys (``table_invalidate`` measures that side). Its price is paid on every change: a fill
(``read_through``, a fenced write) adds the key to the table's set (SADD), and a row
invalidation removes it (SREM), or the set would keep every key ever cached. Both are
measured here as the consumer and the client send them: pipelined in chunks of CHUNK keys
(SET with TTL / UNLINK), and one key per round trip as ``read_through`` fills
(``fill_one``), against the same plus the set's command in the same round trip, alternating
run by run on the devstack's Redis. Also the set's memory per key. The product keeps no index
today; these figures are what decides whether it should.
``python -m bench --only key_index [--quick] [--runs N]``.
"""

from __future__ import annotations

import time

from bench.common import Sandbox, log, median, ratio

NAME = "key_index"
SIZES = {"full": 200_000, "quick": 20_000}      # keys per measurement
CHUNK = 500                                     # consumer.batch_size's default
TTL_S = 600


def run(stack, quick: bool, runs: int) -> dict:
    n = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    index = f"{box.prefix}index"
    sides = {s: {"fill": [], "fill_one": [], "invalidate": []} for s in ("plain", "indexed")}
    try:
        for i in range(runs):
            for side in (("plain", "indexed") if i % 2 == 0 else ("indexed", "plain")):
                keys = [f"{box.prefix}k:{i}:{side}:{j}" for j in range(n)]
                with_index = side == "indexed"
                sides[side]["fill"].append(n / _timed(r, keys, _fill, index, with_index))
                sides[side]["invalidate"].append(
                    n / _timed(r, keys, _invalidate, index, with_index))
                ones = keys[:n // 10]
                sides[side]["fill_one"].append(len(ones) / _timed(r, ones, _fill, index,
                                                                  with_index, chunk=1))
                log(f"{NAME}: run {i + 1}/{runs} {side}: fill "
                    f"{sides[side]['fill'][-1]:,.0f} keys/s, invalidate "
                    f"{sides[side]['invalidate'][-1]:,.0f} keys/s")
        # the set's memory per member, measured on a set of n keys
        keys = [f"{box.prefix}m:{j}" for j in range(n)]
        for part in range(0, n, CHUNK):
            r.sadd(index, *keys[part:part + CHUNK])
        per_key = (r.memory_usage(index, samples=0) or 0) / n
        med = {s: {k: round(median(v)) for k, v in d.items()} for s, d in sides.items()}
        return {"params": {"keys": n, "chunk": CHUNK, "runs": runs, "ttl_s": TTL_S},
                "median_keys_per_s": med,
                "indexed_over_plain": {k: ratio(med["indexed"][k], med["plain"][k])
                                       for k in ("fill", "fill_one", "invalidate")},
                "index_bytes_per_key": round(per_key, 1)}
    finally:
        r.unlink(index)
        for part in _scan_chunks(r, f"{box.prefix}*"):
            r.unlink(*part)
        r.close()
        box.cleanup()


def _timed(r, keys, action, index: str, with_index: bool, chunk: int = CHUNK) -> float:
    t0 = time.perf_counter()
    for start in range(0, len(keys), chunk):
        action(r, keys[start:start + chunk], index, with_index)
    return time.perf_counter() - t0


def _fill(r, keys, index: str, with_index: bool) -> None:
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.set(k, b"cached value of a row", ex=TTL_S)
    if with_index:
        pipe.sadd(index, *keys)
    pipe.execute()


def _invalidate(r, keys, index: str, with_index: bool) -> None:
    pipe = r.pipeline(transaction=False)
    pipe.unlink(*keys)
    if with_index:
        pipe.srem(index, *keys)
    pipe.execute()


def _scan_chunks(r, pattern: str):
    batch = []
    for key in r.scan_iter(match=pattern, count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            yield batch
            batch = []
    if batch:
        yield batch
