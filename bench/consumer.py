"""Consumer throughput: Kafka change events -> dedup claim -> Redis UNLINK -> confirm -> commit.

Two fresh topics are pre-filled once with the same M encoded ChangeEvents of one mapped
table whose mapping has 2 key templates (every event names 2 distinct keys, all keys
distinct), written in transactions of 20-80 rows as the tailer benchmark writes them:
one topic as the tailer publishes with ``pack_rows: 500`` (the rows of one transaction
and partition in one record), one with a record per row. Each run, with every key
present in Redis beforehand:

* baseline (the target's ceiling): redis-py pipelined DEL, one DEL per key, 2000
  commands per round trip -> keys/s;
* reference: redis-py UNLINK of 2000 keys per command -> keys/s (what one multi-key
  command per round trip reaches; the engine's own delete is this shape);
* contender: PythonEngine from build_engine on the packed topic, with a fresh group id
  (so a fresh dedup namespace: every id is claimed, nothing is a duplicate), the Redis
  dedup store and real Redis, until it has consumed all M events -> events/s and keys/s;
  beside it the MySQL dedup store, and the Redis store on the one-record-per-row topic.
"""

from __future__ import annotations

import random
import time

from kafka import KafkaProducer

from bench.common import OVERLAP, Sandbox, Worker, log, ratio, summarize, wait_for
from cachesync.wiring import build_engine
from cachesync.consumer.adapters.redis_cache import PIPELINE_CHUNK
from cachesync.schema.keys import DEDUP_PREFIX as REDIS_DEDUP_PREFIX
from cachesync.producer_outbox.encode.packing import Packer
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key

NAME = "consumer"
SIZES = {"full": 100_000, "quick": 10_000}
PARTITIONS = 3
TXN_ROWS = (20, 80)          # rows per transaction, uniform (as in the tailer benchmark)
PACK_ROWS = 500              # tailer.pack_rows of the packed topic
CHUNK = 2000
OPS = ("insert", "update", "delete")
# (dedup store, packed topic?) per engine run; the first is the contender
ENGINE_RUNS = (("redis", True), ("mysql", True), ("redis", False))


def run(stack, quick: bool, runs: int) -> dict:
    m = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        topics = {True: box.new_topic(PARTITIONS), False: box.new_topic(PARTITIONS)}
        table = f"{box.db}.items"
        templates = [box.prefix + "item:{id}", box.prefix + "item:sku:{sku}"]
        keys, prefill_s, records = prefill(box, topics, box.db, "items", m)
        log(f"consumer: {m} events ({len(keys)} keys) produced in {prefill_s:.1f}s: "
            f"{records[True]} packed records, {records[False]} unpacked")
        sides: dict[str, list[dict]] = {"del": [], "unlink": [],
                                        **{_label(*e): [] for e in ENGINE_RUNS}}
        tables = {table: {"keys": templates}}
        for i in range(runs):
            # alternate the order so neither side always runs on a warmer machine
            order = ["del", "unlink", *ENGINE_RUNS]
            for what in (order if i % 2 == 0 else order[::-1]):
                populate(r, keys)
                if what in ("del", "unlink"):
                    result = baseline_run(r, keys, what)
                    sides[what].append(result)
                else:
                    store, packed = what
                    result = engine_run(box, topics[packed], tables, m, len(keys), store)
                    result["what"] = _label(store, packed)
                    sides[result["what"]].append(result)
                log(f"consumer: run {i + 1}/{runs} {result['what']}: {result['keys_per_s']:.0f} keys/s")
        fields = ["events_per_s", "keys_per_s", "elapsed_s", "steady_events_per_s",
                  "steady_keys_per_s", "startup_s"]
        ceiling = summarize(sides["del"], ["keys_per_s", "elapsed_s"])
        unlink = summarize(sides["unlink"], ["keys_per_s", "elapsed_s"])
        engines = {_label(*e): summarize(sides[_label(*e)], fields) for e in ENGINE_RUNS}
        top = ceiling["median"]["keys_per_s"]

        def figure(label: str, name: str) -> dict:
            fig = engines[label]
            return {"name": name, **fig,
                    "fraction_of_redis_ceiling": ratio(fig["median"]["keys_per_s"], top),
                    "fraction_of_multi_key_unlink": ratio(fig["median"]["keys_per_s"],
                                                          unlink["median"]["keys_per_s"])}

        contender = figure(_label(*ENGINE_RUNS[0]),
                           f"build_engine(...).run() with consumer.dedup_store: redis on records "
                           f"packed as tailer.pack_rows {PACK_ROWS} packs them, until "
                           f"stats.consumed == M")
        return {
            "description": "PythonEngine events/s and keys/s (dedup on; Redis dedup store as "
                           "the contender; real Redis) vs redis-py pipelined DEL of the same "
                           "keys, one DEL per key (the target's ceiling)",
            "params": {"events": m, "keys": len(keys), "keys_per_event": 2, "ops": list(OPS),
                       "txn_rows": list(TXN_ROWS), "pack_rows": PACK_ROWS,
                       "records": {"packed": records[True], "unpacked": records[False]},
                       "partitions": PARTITIONS, "engine_batch_size": "config default",
                       "overlap_batches": OVERLAP,
                       "pipeline_chunk": CHUNK, "runs": runs, "prefill_s": round(prefill_s, 2)},
            "baseline": {"name": f"redis-py pipeline: one DEL per key, {CHUNK} per round trip",
                         **ceiling},
            "multi_key_unlink": {"name": f"redis-py: UNLINK of {CHUNK} keys per command "
                                         "and round trip", **unlink},
            "contender": contender,
            "fraction_of_redis_ceiling": contender["fraction_of_redis_ceiling"],
            "mysql_dedup": figure(_label("mysql", True), "the same with consumer.dedup_store: mysql"),
            "unpacked": figure(_label("redis", False), "the same (Redis dedup) on one record "
                                                       "per row (pack_rows 1)"),
        }
    finally:
        r.close()
        box.cleanup()


def _label(store: str, packed: bool) -> str:
    return f"engine ({store} dedup, {'packed' if packed else 'one record per row'})"


def prefill(box: Sandbox, topics: dict[bool, str], db: str, table: str,
            m: int) -> tuple[list[str], float, dict[bool, int]]:
    """Produce the same M events to both topics (packed / not); returns the keys they
    name (2 per event, all distinct), the time taken and the records per topic."""
    producer = KafkaProducer(bootstrap_servers=box.stack.bootstrap, acks="all", linger_ms=20,
                             batch_size=256 * 1024)
    partitions = len(producer.partitions_for(topics[True]))
    packer = Packer(PACK_ROWS, 256 * 1024)
    rng = random.Random(42)
    keys: list[str] = []
    records = {True: 0, False: 0}

    def send(packed: bool, key: str, value: bytes, msg_id: str, partition=None) -> None:
        producer.send(topics[packed], key=key.encode(), value=value, partition=partition,
                      headers=[("id", msg_id.encode("ascii"))])
        records[packed] += 1

    t0 = time.perf_counter()
    now = time.time()
    i = txn = 0
    while i < m:
        txn += 1
        ctx = TxnContext("mariadb:bench", f"0-77-{txn}", txn, now)
        for row_index in range(min(rng.randint(*TXN_ROWS), m - i)):
            op = OPS[i % 3]
            image = {"id": i, "sku": f"SKU-{i:08d}", "name": f"item {i}", "price": i % 1000 / 10,
                     "stock": i % 97}
            after = {**image, "stock": image["stock"] + 1}
            before, after = {"insert": (None, image), "update": (image, after),
                             "delete": (image, None)}[op]
            event = row_change(ctx, row_index, db, table, op, "id", before, after)
            key, value = kafka_key(db, table, event.pk), encode(event)
            send(False, key, value, event.id)
            full = packer.add(db, table, key, value, event.id, partitions)
            if full is not None:
                send(True, full.key, full.record_value(), full.msg_id, full.partition)
            keys += [f"{box.prefix}item:{i}", f"{box.prefix}item:sku:SKU-{i:08d}"]
            i += 1
        for pack in packer.drain():
            send(True, pack.key, pack.record_value(), pack.msg_id, pack.partition)
    producer.flush(60)
    producer.close()
    return keys, time.perf_counter() - t0, records


def populate(r, keys: list[str]) -> None:
    """SET every key (not timed), so both sides delete keys that exist."""
    pipe = r.pipeline(transaction=False)
    for i in range(0, len(keys), CHUNK):
        for k in keys[i:i + CHUNK]:
            pipe.set(k, b"cached-value", ex=900)
        pipe.execute()


def baseline_run(r, keys: list[str], shape: str) -> dict:
    """``del``: one DEL per key, CHUNK commands per pipeline; ``unlink``: one UNLINK of
    CHUNK keys per round trip."""
    existed = 0
    t0 = time.perf_counter()
    for i in range(0, len(keys), CHUNK):
        pipe = r.pipeline(transaction=False)
        if shape == "del":
            for k in keys[i:i + CHUNK]:
                pipe.delete(k)
        else:
            pipe.unlink(*keys[i:i + CHUNK])
        existed += sum(pipe.execute())
    elapsed = time.perf_counter() - t0
    if existed != len(keys):
        raise RuntimeError(f"baseline unlinked {existed} existing keys, expected {len(keys)}")
    return {"what": f"baseline ({shape})", "keys": len(keys), "elapsed_s": round(elapsed, 4),
            "keys_per_s": round(len(keys) / elapsed, 1)}


def engine_run(box: Sandbox, topic: str, tables: dict, m: int, n_keys: int,
               dedup_store: str) -> dict:
    group = box.new_group()
    cfg = box.write_config(tables, topic=topic, group=group,
                           consumer={"dedup_store": dedup_store, "overlap_batches": OVERLAP})
    batches: list[tuple[float, int, int]] = []     # (time, events, keys) per batch

    def on_batch(result):
        batches.append((time.perf_counter(), len(result.applied) + len(result.duplicates),
                        sum(len(ep.keys) for ep in result.applied)))

    engine = build_engine(box.settings(cfg), on_batch=on_batch)
    worker = Worker(engine.run, "engine")
    try:
        t0 = time.perf_counter()
        worker.start()

        def done():   # on_batch runs after the offset commit: the batch is complete
            worker.check()
            return sum(b[1] for b in batches) >= m
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
