"""What the same work costs when it runs alone after a wait: the price of an arrival at the head.

At the head of the binlog each commit arrives alone and wakes each thread on its way from a
sleep, and CPU per commit there is far above what the same code costs in a tight loop
(``head_cost``). This benchmark times fixed pieces of the consumer's work, each call
preceded by a sleep of GAPS_MS (0: back to back), on this thread's CPU clock:

* ``prepare``: ``Applier.prepare`` (decode and plan) of one record holding one row change
  of a table mapped to 2 keys, as the consumer does for every batch at the head;
* ``redis``: one EVALSHA of a one-line script on the devstack's Redis, sent and read on a
  connection of its own (the consumer's ``OwnConnectionScript`` path): a round trip;
* ``both``: the two one after the other, as in a batch.

Each figure is the median over runs of the mean CPU per call (``<work>_us``), and
``<work>_x`` is that over the same work back to back in the same run. The clock starts once
the sleep has returned, so the wake-up itself is not in the figure (``empty_us``: a call
that does nothing, the clock's own cost). If what an arrival costs were its wake-ups, ``x``
would stay near 1; above it, the work itself runs slower after a wait, with the CPU's
caches (and, on a virtual machine, the host's) cold.
"""

from __future__ import annotations

import os
import statistics
import time

from bench.common import log, summarize
from cachesync.consumer.applier import Applier
from cachesync.consumer.core.offsets import Record
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import parse_mappings

NAME = "cold_wake"
GAPS_MS = tuple(float(g) for g in os.environ.get("BENCH_COLD_WAKE_GAPS_MS", "0,1,10,100").split(","))
CALLS = {"full": (4000, 200), "quick": (1000, 50)}    # back to back, after a gap
WORKS = ("empty", "prepare", "redis", "both")
SCRIPT = "return redis.call('unlink', KEYS[1], KEYS[2])"


def run(stack, quick: bool, runs: int) -> dict:
    hot_calls, gap_calls = CALLS["quick" if quick else "full"]
    client = stack.redis()
    conn = client.connection_pool.make_connection()
    conn.connect()
    try:
        works = _works(conn, client.script_load(SCRIPT))
        results = {f"{gap:g}": [] for gap in GAPS_MS}
        for i in range(runs):
            hot = None
            for gap in GAPS_MS:
                n = hot_calls if gap == 0 else gap_calls
                figures = {f"{name}_us": _per_call_us(fn, gap / 1000, n)
                           for name, fn in works.items()}
                if gap == 0:
                    hot = figures
                for name in WORKS[1:]:
                    if hot is not None and hot[f"{name}_us"] > 0:
                        figures[f"{name}_x"] = round(figures[f"{name}_us"] / hot[f"{name}_us"], 2)
                results[f"{gap:g}"].append(figures)
                log(f"cold_wake run {i + 1}/{runs}, gap {gap:g} ms: "
                    + ", ".join(f"{k} {v:g}" for k, v in figures.items()))
        fields = [*(f"{w}_us" for w in WORKS), *(f"{w}_x" for w in WORKS[1:])]
        return {"description": "CPU per call of fixed pieces of the consumer's work, back to back "
                               "and each after a sleep of gap ms",
                "params": {"gaps_ms": list(GAPS_MS), "calls_back_to_back": hot_calls,
                           "calls_after_a_gap": gap_calls, "runs": runs,
                           "cpu": "this thread's CPU clock (time.thread_time_ns)",
                           "x": "work after a gap over the same work back to back"},
                "gaps": {gap: summarize(rs, fields) for gap, rs in results.items()}}
    finally:
        conn.disconnect()
        client.close()


def one_record() -> tuple[Applier, Record]:
    """An applier (no cache, no dedup store: ``prepare`` only) and one record holding one
    UPDATE of a row of ``shop.items``, whose mapping names 2 keys, encoded as the tailer
    publishes it."""
    applier = Applier(cache=None, mappings=parse_mappings(
        {"shop.items": {"keys": ["item:{id}", "item:sku:{sku}"]}}))
    ctx = TxnContext("mariadb:bench", "0-77-1", 1, time.time())
    image = {"id": 7, "sku": "SKU-00000007", "name": "item 7", "price": 0.7, "stock": 3}
    event = row_change(ctx, 0, "shop", "items", "update", "id", image, {**image, "stock": 4})
    return applier, Record("cachesync.changes", 0, 0,
                           kafka_key("shop", "items", event.pk).encode(), encode(event),
                           (("id", event.id.encode()),))


def _works(conn, sha: str) -> dict:
    """The pieces of work, each a callable."""
    applier, record = one_record()
    keys = ("cold-wake:a", "cold-wake:b")

    def prepare():
        applier.prepare([record])

    def redis():
        conn.send_command("EVALSHA", sha, 2, *keys)
        conn.read_response()

    def both():
        prepare()
        redis()
    return {"empty": lambda: None, "prepare": prepare, "redis": redis, "both": both}


def _per_call_us(fn, gap_s: float, calls: int) -> float:
    """Mean CPU µs of ``fn()``, each call after a ``gap_s`` sleep (none at 0)."""
    spent = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.thread_time_ns()
        fn()
        spent.append(time.thread_time_ns() - t0)
    return round(statistics.fmean(spent) / 1000, 1)
