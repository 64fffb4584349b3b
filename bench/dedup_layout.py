"""Claim latency of the MySQL dedup store as its table outgrows the buffer pool: the rows
layout (``cachesync_dedup``, keyed by the random message-id hash) against the compact one
(``cachesync_dedup_compact``, keyed by commit time first), in the same run.

Both stores run side by side on the devstack's MariaDB, in a database of the run's own,
claiming and confirming batches of fresh message ids (random 32-hex ids, as the tailer's
BLAKE2b ids are) with the current time as their commit time, alternating batch by batch,
so host load and the shared buffer pool weigh on both alike. Figures per slice of the
run (each slice adds the same number of records to each table): claim and
claim+confirm p50/p99 per batch, and each table's size (data + indexes) against
``innodb_buffer_pool_size``. The binlog is off for both sessions (``sql_log_bin = 0``,
the admin account): this measures the table, not the binlog.
``python -m bench --only dedup_layout [--quick]``.
"""

from __future__ import annotations

import os
import time

from bench.common import Sandbox, log, percentile, ratio
from cachesync.consumer.adapters.mysql_dedup import MySQLDedupStore
from cachesync.consumer.adapters.mysql_dedup_compact import CompactMySQLDedupStore
from cachesync.runtime.mysql import MySQLParams

NAME = "dedup_layout"
SIZES = {"full": 3_200_000, "quick": 100_000}     # records per layout
BATCH = 500                                       # consumer.batch_size's default
SLICES = 8
LEASE_S = 30.0
TABLES = {"rows": ("cachesync_dedup", "cachesync_dedup_done"),
          "compact": ("cachesync_dedup_compact", "cachesync_dedup_compact_done")}


def run(stack, quick: bool, runs: int) -> dict:
    """One growth run (``runs`` does not repeat it: the table's growth is the figure)."""
    total = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    box.create_schema()
    params = admin_params(stack, box.db)
    stores = {"rows": MySQLDedupStore(params, "bench", log_bin=False),
              "compact": CompactMySQLDedupStore(params, "bench", log_bin=False)}
    try:
        (_, pool), = stack.admin_sql("SHOW GLOBAL VARIABLES LIKE 'innodb_buffer_pool_size'")
        per_slice = max(BATCH, total // SLICES // BATCH * BATCH)
        slices = []
        for i in range(SLICES):
            s = _slice(stores, per_slice, i)
            s["records_per_layout"] = per_slice * (i + 1)
            s.update(_sizes(stack, box.db, int(pool)))
            slices.append(s)
            log(f"{NAME}: slice {i + 1}/{SLICES}: claim p50 rows {s['rows']['claim_ms_p50']} ms, "
                f"compact {s['compact']['claim_ms_p50']} ms; tables "
                f"{s['rows_table_mb']} / {s['compact_table_mb']} MB "
                f"(pool {int(pool) // 2**20} MB)")
        first, last = slices[0], slices[-1]
        return {"params": {"records_per_layout": per_slice * SLICES, "batch": BATCH,
                           "slices": SLICES, "buffer_pool_mb": int(pool) // 2**20,
                           "log_bin": "off (both)"},
                "slices": slices,
                "last_slice_claim_p50_rows_over_compact": ratio(
                    last["rows"]["claim_ms_p50"], last["compact"]["claim_ms_p50"]),
                "rows_claim_p50_last_over_first": ratio(
                    last["rows"]["claim_ms_p50"], first["rows"]["claim_ms_p50"]),
                "compact_claim_p50_last_over_first": ratio(
                    last["compact"]["claim_ms_p50"], first["compact"]["claim_ms_p50"])}
    finally:
        for store in stores.values():
            store.close()
        box.cleanup()


def admin_params(stack, database: str) -> MySQLParams:
    """The devstack's admin account (it may turn the binlog off and drop partitions)."""
    with open(stack.env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"], encoding="utf-8") as f:
        return MySQLParams(stack.env["CACHESYNC_MYSQL_HOST"],
                           int(stack.env["CACHESYNC_MYSQL_PORT"]),
                           stack.env["DEVSTACK_MYSQL_ADMIN_USER"], f.read().strip(),
                           database=database)


def _slice(stores: dict, records: int, index: int) -> dict:
    """Claim and confirm ``records`` new ids in each store, a batch each in turn."""
    claim = {name: [] for name in stores}
    total = {name: [] for name in stores}
    for n in range(records // BATCH):
        order = list(stores) if (n + index) % 2 == 0 else list(reversed(stores))
        for name in order:
            ids = [os.urandom(16).hex() for _ in range(BATCH)]
            now = time.time()
            t0 = time.perf_counter()
            token, states = stores[name].claim(ids, LEASE_S, dict.fromkeys(ids, now))
            t1 = time.perf_counter()
            stores[name].confirm(token, ids)
            t2 = time.perf_counter()
            if len(states) != BATCH:
                raise RuntimeError(f"{name}: {len(states)} states for {BATCH} ids")
            claim[name].append((t1 - t0) * 1000)
            total[name].append((t2 - t0) * 1000)
    return {name: {"claim_ms_p50": _ms(percentile(claim[name], 50)),
                   "claim_ms_p99": _ms(percentile(claim[name], 99)),
                   "claim_confirm_ms_p50": _ms(percentile(total[name], 50)),
                   "claim_confirm_ms_p99": _ms(percentile(total[name], 99)),
                   "records_per_s": round(BATCH * len(total[name]) / (sum(total[name]) / 1000))}
            for name in stores}


def _sizes(stack, db: str, pool: int) -> dict:
    out = {}
    for name, tables in TABLES.items():
        for table in tables:    # the sizes below are InnoDB's statistics: refresh them
            stack.admin_sql(f"ANALYZE TABLE `{db}`.`{table}`")
        rows = stack.admin_sql(
            "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN (%s, %s)", (db, *tables))
        size = int(rows[0][0] or 0)
        out[f"{name}_table_mb"] = round(size / 2**20, 1)
        out[f"{name}_table_over_pool"] = round(size / pool, 2)
    return out


def _ms(x):
    return None if x is None else round(x, 2)
