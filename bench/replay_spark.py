"""Replay throughput: the spark engine vs the python engine on the same topic, same run.

A fresh topic (3 partitions) is pre-filled once with M ChangeEvents of one mapped table
with 2 key templates (bench.consumer.prefill: all keys distinct). Each run replays the
whole topic for real (invalidate-only, every key present in Redis beforehand) with:

* baseline: the python engine (`cachesync replay --engine python`: one process, one
  group-less consumer, batches of 2000);
* contender: the spark engine (`--engine spark`, local[2], the session started once,
  outside the timing; its start-up time is reported separately).
"""

from __future__ import annotations

import time

from bench.common import Sandbox, log, ratio, summarize
from bench.consumer import populate, prefill
from cachesync.commands.replay import run_replay
from cachesync.consumer.replay import parse_bound

NAME = "replay_spark"
SIZES = {"full": 1_000_000, "quick": 50_000}
PARTITIONS = 3


def run(stack, quick: bool, runs: int) -> dict:
    from cachesync.consumer.spark.session import spark_session
    m = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        topic = box.new_topic(PARTITIONS)
        table = f"{box.db}.items"
        keys, prefill_s = prefill(box, topic, box.db, "items", m)
        log(f"replay: {m} events ({len(keys)} keys) produced in {prefill_s:.1f}s")
        settings = box.settings(box.write_config(
            {table: {"keys": [box.prefix + "item:{id}", box.prefix + "item:sku:{sku}"]}},
            topic=topic))
        t0 = time.perf_counter()
        with spark_session("cachesync-bench", "local[2]") as spark:
            startup_s = time.perf_counter() - t0
            py_runs, sp_runs = [], []
            for i in range(runs):
                for engine in (("python", "spark") if i % 2 == 0 else ("spark", "python")):
                    populate(r, keys)
                    result = _replay(settings, engine, spark, m, len(keys))
                    (py_runs if engine == "python" else sp_runs).append(result)
                    log(f"replay: run {i + 1}/{runs} {engine}: {result['events_per_s']:.0f} events/s")
        fields = ["events_per_s", "keys_per_s", "elapsed_s"]
        baseline, contender = summarize(py_runs, fields), summarize(sp_runs, fields)
        return {
            "description": "cachesync replay of the whole topic (real deletes, keys present): "
                           "spark engine (local[2]) vs python engine, same topic, same run",
            "params": {"events": m, "keys": len(keys), "keys_per_event": 2,
                       "partitions": PARTITIONS, "runs": runs, "prefill_s": round(prefill_s, 2),
                       "spark_master": "local[2]", "spark_startup_s": round(startup_s, 2)},
            "baseline": {"name": "replay --engine python", **baseline},
            "contender": {"name": "replay --engine spark (session already started)", **contender},
            "spark_vs_python": ratio(contender["median"]["events_per_s"],
                                     baseline["median"]["events_per_s"]),
        }
    finally:
        r.close()
        box.cleanup()


def _replay(settings, engine: str, spark, m: int, n_keys: int) -> dict:
    report = run_replay(settings, settings.tables, engine, parse_bound("earliest"),
                        parse_bound("latest"), spark=spark, show_progress=False)
    keys = sum(t["keys"] for t in report.tables.values())
    if report.records != m or keys != n_keys or report.keys_existed != n_keys:
        raise RuntimeError(f"{engine} replay: {report.records} records, {keys} keys, "
                           f"{report.keys_existed} existed; expected {m}, {n_keys}, {n_keys}")
    return {"what": engine, "events": m, "keys": keys, "elapsed_s": report.elapsed_s,
            "events_per_s": round(m / report.elapsed_s, 1),
            "keys_per_s": round(keys / report.elapsed_s, 1)}
