"""`cachesync snapshot` filling Redis from one large update-mode table: Spark vs the python engine.

A table of N rows (``items``: BIGINT primary key, a unique SKU, a name, a price, a stock
count; filled with MariaDB's sequence engine) is mapped in update mode with two key
templates (JSON values). Each run deletes the keys, then snapshots the whole table:

* baseline: ``snapshot --engine python`` (keyset pages of 1000 rows, one process);
* contender: ``snapshot --engine spark`` on the devstack's standalone cluster with ONE
  executor core (spark.cores.max=1), JDBC splits by primary key (the session is started
  once, outside the timing).

Reported: rows/s and keys/s (2 keys per row), elapsed, from the command's own report
(watermark read to the last write). Needs `devstack/stack.sh up spark`.
"""

from __future__ import annotations

import os
import time

from bench.common import Sandbox, log, ratio, summarize
from bench.spark_cluster import APP_CONF, _cluster
from cachesync.commands.snapshot import run_snapshot

NAME = "spark_snapshot"
SIZES = {"full": 1_000_000, "quick": 100_000}
# rows of the table instead of the size above (a host that cannot snapshot 1,000,000 rows six
# times in the time it has)
ROWS_VAR = "BENCH_SPARK_SNAPSHOT_ROWS"
PARTITIONS = 4
DDL = ("CREATE TABLE items (id BIGINT PRIMARY KEY, sku VARCHAR(32) NOT NULL, "
       "name VARCHAR(64) NOT NULL, price DECIMAL(10,2) NOT NULL, stock INT NOT NULL, "
       "UNIQUE KEY (sku))")
FILL = ("INSERT INTO `{db}`.items SELECT seq, CONCAT('SKU-', LPAD(seq, 9, '0')), CONCAT('item ', seq), "
        "(seq % 100000) / 100, seq % 97 FROM `{db}`.seq_1_to_{n}")


def run(stack, quick: bool, runs: int) -> dict:
    from cachesync.consumer.spark.session import spark_session
    env = _cluster()
    n = int(os.environ.get(ROWS_VAR) or SIZES["quick" if quick else "full"])
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        box.create_schema(DDL)
        t0 = time.perf_counter()
        stack.admin_sql(FILL.format(db=box.db, n=n))      # autocommit: the admin session
        log(f"{NAME}: {n} rows inserted in {time.perf_counter() - t0:.1f}s")
        table = f"{box.db}.items"
        cfg = box.write_config({table: {"mode": "update", "ttl": 3600, "tombstone_ttl": 3600,
                                        "keys": [box.prefix + "item:{id}",
                                                 box.prefix + "item:sku:{sku}"]}},
                               topic=box.new_topic(1))
        settings = box.settings(cfg)
        t0 = time.perf_counter()
        with spark_session("cachesync-bench-snapshot", env["DEVSTACK_SPARK_MASTER_URL"],
                           conf=APP_CONF) as spark:
            startup_s = time.perf_counter() - t0
            sides: dict[str, list] = {"python": [], "spark": []}
            for i in range(runs):
                for engine in (("python", "spark") if i % 2 == 0 else ("spark", "python")):
                    _drop_keys(r, box.prefix)
                    result = _snapshot(settings, table, engine, spark, n)
                    sides[engine].append(result)
                    log(f"{NAME}: run {i + 1}/{runs} {engine}: {result['rows_per_s']:.0f} rows/s")
        fields = ["rows_per_s", "keys_per_s", "elapsed_s"]
        s = {k: summarize(v, fields) for k, v in sides.items()}
        return {
            "description": "cachesync snapshot of one update-mode table into an empty cache: "
                           "Spark (standalone devstack cluster, one executor core) vs the "
                           "python engine, same table, same run",
            "params": {"rows": n, "keys_per_row": 2, "runs": runs, "partitions": PARTITIONS,
                       "python_page": 1000, "spark_conf": APP_CONF,
                       "spark_master": env["DEVSTACK_SPARK_MASTER_URL"],
                       "spark_startup_s": round(startup_s, 2), "host": "shared, 2 cores"},
            "baseline": {"name": "snapshot --engine python", **s["python"]},
            "contender": {"name": "snapshot --engine spark, 1 executor core", **s["spark"]},
            "spark_vs_python": ratio(s["spark"]["median"]["rows_per_s"],
                                     s["python"]["median"]["rows_per_s"]),
        }
    finally:
        _drop_keys(r, box.prefix)
        r.close()
        box.cleanup()


def _snapshot(settings, table: str, engine: str, spark, n: int) -> dict:
    report = run_snapshot(settings, (table,), engine, partitions=PARTITIONS, spark=spark,
                          show_progress=False)
    summary = report.tables[table]
    if (summary.rows, summary.written, summary.refused) != (n, 2 * n, 0):
        raise RuntimeError(f"{engine} snapshot: {summary.as_dict()}, expected {n} rows, "
                           f"{2 * n} keys written")
    return {"what": engine, "rows": n, "elapsed_s": round(report.elapsed_s, 3),
            "rows_per_s": round(n / report.elapsed_s, 1),
            "keys_per_s": round(2 * n / report.elapsed_s, 1)}


def _drop_keys(r, prefix: str) -> None:
    """The run's keys and their version companions (SCAN: the bench's own prefix only)."""
    batch = []
    for key in r.scan_iter(match=f"*{prefix}*", count=10_000):
        batch.append(key)
        if len(batch) >= 10_000:
            r.unlink(*batch)
            batch = []
    if batch:
        r.unlink(*batch)
