"""Consumer throughput: Kafka change events -> dedup claim -> Redis UNLINK -> confirm -> commit.

A fresh topic is pre-filled once with M encoded ChangeEvents of one mapped table whose
mapping has 2 key templates (every event names 2 distinct keys, all keys distinct).
Each run, with every key present in Redis beforehand:

* baseline: redis-py UNLINK of the same 2*M keys in chunks of 2000, sent as a pipeline
  per chunk -> keys/s (the ceiling for the Redis part of the work);
* contender: PythonEngine from build_engine with a fresh group id (so a fresh dedup
  namespace: every id is claimed, nothing is a duplicate), real MySQL dedup store and
  real Redis, until it has consumed all M events -> events/s and keys/s.
"""

from __future__ import annotations

import time

from kafka import KafkaProducer

from bench.common import Sandbox, Worker, log, ratio, summarize, wait_for
from cachesync.wiring import build_engine
from consumer.adapters.redis_cache import PIPELINE_CHUNK
from consumer.adapters.redis_dedup import PREFIX as REDIS_DEDUP_PREFIX
from producer_outbox.rows import TxnContext, row_change
from schema.event import encode
from schema.keys import kafka_key

NAME = "consumer"
SIZES = {"full": 100_000, "quick": 10_000}
PARTITIONS = 3
TXN_ROWS = 10
CHUNK = 2000
OPS = ("insert", "update", "delete")
DEDUP_STORES = ("redis", "mysql")


def run(stack, quick: bool, runs: int) -> dict:
    m = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        topic = box.new_topic(PARTITIONS)
        table = f"{box.db}.items"
        templates = [box.prefix + "item:{id}", box.prefix + "item:sku:{sku}"]
        keys, prefill_s = prefill(box, topic, box.db, "items", m)
        log(f"consumer: {m} events ({len(keys)} keys) produced to {topic} in {prefill_s:.1f}s")
        base_runs, engine_runs = [], {store: [] for store in DEDUP_STORES}
        tables = {table: {"keys": templates}}
        for i in range(runs):
            # alternate the order so neither side always runs on a warmer machine
            order = ["baseline", *DEDUP_STORES]
            order = order if i % 2 == 0 else order[::-1]
            for what in order:
                populate(r, keys)
                if what == "baseline":
                    result = baseline_run(r, keys)
                    base_runs.append(result)
                else:
                    result = engine_run(box, topic, tables, m, len(keys), what)
                    engine_runs[what].append(result)
                log(f"consumer: run {i + 1}/{runs} {result['what']}: {result['keys_per_s']:.0f} keys/s")
        fields = ["events_per_s", "keys_per_s", "elapsed_s", "steady_events_per_s",
                  "steady_keys_per_s", "startup_s"]
        baseline = summarize(base_runs, ["keys_per_s", "elapsed_s"])
        contender = summarize(engine_runs["redis"], fields)
        mysql = summarize(engine_runs["mysql"], fields)
        return {
            "description": "PythonEngine events/s and keys/s (dedup on; Redis dedup store as "
                           "the contender, MySQL dedup store beside it; real Redis) vs "
                           "redis-py pipelined UNLINK of the same keys",
            "params": {"events": m, "keys": len(keys), "keys_per_event": 2, "ops": list(OPS),
                       "partitions": PARTITIONS, "engine_batch_size": "config default",
                       "unlink_chunk": CHUNK, "runs": runs, "prefill_s": round(prefill_s, 2)},
            "baseline": {"name": f"redis-py pipeline: UNLINK of {CHUNK} keys per round trip",
                         **baseline},
            "contender": {"name": "build_engine(...).run() with consumer.dedup_store: redis, "
                                  "until stats.consumed == M", **contender},
            "fraction_of_redis_ceiling": ratio(contender["median"]["keys_per_s"],
                                               baseline["median"]["keys_per_s"]),
            "mysql_dedup": {"name": "the same with consumer.dedup_store: mysql", **mysql,
                            "fraction_of_redis_ceiling": ratio(mysql["median"]["keys_per_s"],
                                                               baseline["median"]["keys_per_s"])},
        }
    finally:
        r.close()
        box.cleanup()


def prefill(box: Sandbox, topic: str, db: str, table: str, m: int) -> tuple[list[str], float]:
    """Produce M events; returns the keys they name (2 per event, all distinct)."""
    producer = KafkaProducer(bootstrap_servers=box.stack.bootstrap, acks="all", linger_ms=20,
                             batch_size=256 * 1024)
    keys: list[str] = []
    t0 = time.perf_counter()
    now = time.time()
    for i in range(m):
        txn, row_index = divmod(i, TXN_ROWS)
        ctx = TxnContext("mariadb:bench", f"0-77-{txn + 1}", txn + 1, now)
        op = OPS[i % 3]
        image = {"id": i, "sku": f"SKU-{i:08d}", "name": f"item {i}", "price": i % 1000 / 10,
                 "stock": i % 97}
        after = {**image, "stock": image["stock"] + 1}
        before, after = {"insert": (None, image), "update": (image, after),
                         "delete": (image, None)}[op]
        event = row_change(ctx, row_index, db, table, op, "id", before, after)
        producer.send(topic, key=kafka_key(db, table, event.pk).encode(), value=encode(event),
                      headers=[("id", event.id.encode("ascii"))])
        keys += [f"{box.prefix}item:{i}", f"{box.prefix}item:sku:SKU-{i:08d}"]
    producer.flush(60)
    producer.close()
    return keys, time.perf_counter() - t0


def populate(r, keys: list[str]) -> None:
    """SET every key (not timed), so both sides delete keys that exist."""
    pipe = r.pipeline(transaction=False)
    for i in range(0, len(keys), CHUNK):
        for k in keys[i:i + CHUNK]:
            pipe.set(k, b"cached-value", ex=900)
        pipe.execute()


def baseline_run(r, keys: list[str]) -> dict:
    existed = 0
    t0 = time.perf_counter()
    for i in range(0, len(keys), CHUNK):
        pipe = r.pipeline(transaction=False)
        pipe.unlink(*keys[i:i + CHUNK])
        existed += sum(pipe.execute())
    elapsed = time.perf_counter() - t0
    if existed != len(keys):
        raise RuntimeError(f"baseline unlinked {existed} existing keys, expected {len(keys)}")
    return {"what": "baseline", "keys": len(keys), "elapsed_s": round(elapsed, 4),
            "keys_per_s": round(len(keys) / elapsed, 1)}


def engine_run(box: Sandbox, topic: str, tables: dict, m: int, n_keys: int,
               dedup_store: str) -> dict:
    group = box.new_group()
    cfg = box.write_config(tables, topic=topic, group=group,
                           consumer={"dedup_store": dedup_store})
    batches: list[tuple[float, int, int]] = []     # (time, events, keys) per batch

    def on_batch(result):
        batches.append((time.perf_counter(), len(result.applied) + len(result.duplicates),
                        sum(len(ep.keys) for ep in result.applied)))

    engine = build_engine(box.settings(cfg), on_batch=on_batch)
    worker = Worker(engine.run, "engine")
    try:
        t0 = time.perf_counter()
        worker.start()

        def done():
            worker.check()
            return engine.stats.consumed >= m
        wait_for(done, 600, f"the engine to consume {m} events", interval=0.005)
        t_end = batches[-1][0]
    finally:
        engine.stop()
        worker.join(30)
        _close_engine(engine)
        if dedup_store == "redis":
            _drop_redis_dedup(box, group)
    worker.check()
    s = engine.stats
    keys = sum(b[2] for b in batches)
    if (s.consumed, s.applied, s.duplicates, s.dead_lettered) != (m, m, 0, 0) or keys != n_keys:
        raise RuntimeError(f"unexpected engine stats {s} (keys planned {keys}, expected {n_keys})")
    elapsed = t_end - t0
    first_t, first_events, first_keys = batches[0]
    steady = t_end - first_t
    return {"what": f"engine ({dedup_store} dedup)", "dedup_store": dedup_store, "events": s.consumed, "keys": keys, "keys_existed": s.keys_deleted,
            "batches": s.batches, "elapsed_s": round(elapsed, 4),
            "events_per_s": round(m / elapsed, 1), "keys_per_s": round(keys / elapsed, 1),
            "startup_s": round(first_t - t0, 4),
            "steady_events_per_s": round((m - first_events) / steady, 1) if steady else None,
            "steady_keys_per_s": round((keys - first_keys) / steady, 1) if steady else None}


def _drop_redis_dedup(box: Sandbox, group: str) -> None:
    """The Redis dedup records (TTL = the dedup retention, days) of this run's namespace."""
    r = box.stack.redis()
    try:
        batch = list(r.scan_iter(match=f"{REDIS_DEDUP_PREFIX}{group}:*", count=5000))
        for i in range(0, len(batch), 5000):
            r.unlink(*batch[i:i + 5000])
    finally:
        r.close()


def _close_engine(engine) -> None:
    # PythonEngine has no close(): without this its Kafka consumer stays in the group
    # (and the producer, MySQL and Redis connections stay open) until the process ends.
    for attr in ("_source", "_dedup", "_cache", "_dlq"):
        part = getattr(engine, attr, None)
        if part is not None and hasattr(part, "close"):
            try:
                part.close()
            except Exception as e:
                log(f"consumer: closing {attr} failed: {e}")


assert CHUNK == PIPELINE_CHUNK, "baseline chunk should match the adapter's pipeline chunk"
