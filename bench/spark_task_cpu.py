"""CPU of a Spark consume task's Python vs the python engine's whole loop, on the same records
(a development probe, not one of the JSON benchmarks).

    python -m bench.spark_task_cpu [EVENTS] [rounds=2] [profile=engine|task]

A fresh topic (3 partitions) gets EVENTS ChangeEvents (bench.consumer.prefill, 2 keys each).
Per round, in this process, each time with every key SET first and a fresh dedup namespace:

* engine: the python engine's ``step()`` loop (real Kafka, MySQL dedup, Redis; the collector
  paced as in ``PythonEngine.run``) until it applied EVENTS, its first poll left out;
* task: ``consume_arrow`` (what one Spark task runs) on Arrow batches of the same topic's
  records (Kafka source columns, ``consumer.batch_size`` records per batch as the engine sets
  them), after a warm-up task opened its connections. The Kafka fetch is the executor JVM's
  there, so it is not in this figure; it is in the engine's.

Prints CPU seconds and microseconds per event of each, the size of the task's pickled
result, and with ``profile=`` the top of a cProfile of that side. CPU, not wall time: the
host is usually shared.
"""
import cProfile
import pickle
import pstats
import sys
import time
from contextlib import contextmanager

import pyarrow as pa
from kafka import KafkaConsumer

from bench.common import Sandbox, Stack
from bench.consumer import populate, prefill
from cachesync.runtime.gc_pacing import paced
from cachesync.consumer.spark.applier import ApplyConfig, consume_arrow
from cachesync.wiring import SettingsAdapters
from cachesync.wiring import build_engine

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("key", pa.binary()), ("value", pa.binary()), ("headers", pa.list_(HEADER)),
                    ("timestamp_ms", pa.int64())])


def arrow_batches(stack, topic: str, per: int) -> list:
    """The topic's records as mapInArrow hands them to a task: partition after partition."""
    consumer = KafkaConsumer(topic, bootstrap_servers=stack.bootstrap, consumer_timeout_ms=3000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    rows = [{"topic": m.topic, "partition": m.partition, "offset": m.offset, "key": m.key,
             "value": m.value, "headers": [{"key": k, "value": v} for k, v in m.headers],
             "timestamp_ms": m.timestamp} for m in consumer]
    consumer.close()
    rows.sort(key=lambda row: (row["partition"], row["offset"]))
    return [pa.RecordBatch.from_pylist(rows[i:i + per], SCHEMA) for i in range(0, len(rows), per)]


@contextmanager
def profiled(prof):
    """``prof`` (a cProfile.Profile) enabled around the block; None: no profile."""
    if prof is None:
        yield
        return
    prof.enable()
    try:
        yield
    finally:
        prof.disable()


def engine_cpu(box, settings, n: int, prof) -> tuple[float, int]:
    engine = build_engine(settings)
    try:
        while not engine.stats.consumed:
            engine.step()            # joins the group, opens connections, applies a first poll
        first = engine.stats.consumed
        c0 = time.process_time()
        with paced(), profiled(prof):
            while engine.stats.consumed < n:
                engine.step()
        return time.process_time() - c0, engine.stats.consumed - first
    finally:
        engine.close()


def task_cpu(config, batches, prof) -> tuple[float, int, int]:
    c0 = time.process_time()
    with profiled(prof):
        out = list(consume_arrow(batches, config, 1))
    cpu = time.process_time() - c0
    result = out[0].column(0)[0].as_py()
    return cpu, pickle.loads(result)["stats"]["consumed"], len(result)


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv and "=" not in argv[0] else 20_000
    opts = dict(a.split("=", 1) for a in argv if "=" in a)
    rounds, profile = int(opts.get("rounds", "2")), opts.get("profile")
    stack = Stack()
    box = Sandbox(stack, "taskcpu")
    r = stack.redis()
    try:
        topic = box.new_topic(3)
        keys, _, _ = prefill(box, {True: box.new_topic(3), False: topic}, box.db, "items", n)
        tables = {f"{box.db}.items": {"keys": [box.prefix + "item:{id}",
                                               box.prefix + "item:sku:{sku}"]}}

        def settings():
            return box.settings(box.write_config(tables, topic=topic, group=box.new_group(),
                                                 consumer={"dedup_store": "mysql"}))
        batch_size = settings().consumer.batch_size
        batches = arrow_batches(stack, topic, batch_size)
        for i in range(rounds):
            prof = cProfile.Profile(time.process_time)
            populate(r, keys)
            cpu, events = engine_cpu(box, settings(), n, prof if profile == "engine" else None)
            print(f"round {i + 1} engine: {events} events, {cpu:.3f} s CPU, "
                  f"{cpu / events * 1e6:.1f} us/event")
            populate(r, keys)
            config = ApplyConfig(SettingsAdapters(settings()))
            list(consume_arrow(batches[:1], config, 0))         # warm: the code paths
            populate(r, keys)
            config = ApplyConfig(SettingsAdapters(settings()))
            list(consume_arrow([], config, 0))                   # this run's adapters
            cpu, events, size = task_cpu(config, batches, prof if profile == "task" else None)
            print(f"round {i + 1} task:   {events} events, {cpu:.3f} s CPU, "
                  f"{cpu / events * 1e6:.1f} us/event, result {size:,} bytes pickled")
            if profile:
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    finally:
        r.close()
        box.cleanup()


if __name__ == "__main__":
    main(sys.argv[1:])
