"""What following foreign-key cascades costs the tailer per cascaded parent row: the
invalidations ``producer_outbox.cascades`` builds for a deleted parent row (keys of the
FK-only template rendered from the parent, a table-level event for the child's other
templates once per transaction), against the same row published as a plain row event of a
mapped table (the baseline: what the tailer pays per row anyway), in the same run.
Pure CPU (no server); the consumer's side is one table scan per child table at a time
(``table_invalidate`` measures a scan). ``python -m bench --only fk_cascade [--quick]``.
"""

from __future__ import annotations

import time

from bench.common import log, median, ratio
from cachesync.producer_outbox.cascades import Cascades
from cachesync.producer_outbox.foreignkeys import CascadeGraph, ForeignKey
from cachesync.producer_outbox.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import parse_mappings

NAME = "fk_cascade"
SIZES = {"full": 200_000, "quick": 20_000}       # parent rows per measurement
PER_TXN = 100                                    # parent rows deleted per transaction
MAPPINGS = parse_mappings({"d.parent": {"keys": ["parent:{id}"]},
                           "d.child": {"keys": ["child:{id}", "child:byparent:{parent_id}"]}})
FKS = [ForeignKey("child_fk", ("d", "child"), ("parent_id",), ("d", "parent"), ("id",),
                  "CASCADE", "CASCADE")]


class _Keys:
    logged, version = None, 1
    graph = CascadeGraph(FKS, lambda db, t: MAPPINGS.get(db, t) is not None)


def run(stack, quick: bool, runs: int) -> dict:
    n = SIZES["quick" if quick else "full"]
    rows = [({"id": i, "name": f"p{i}"}, None) for i in range(n)]
    sides = {"plain_row": [], "cascade": []}
    for i in range(runs):
        sides["plain_row"].append(_timed(rows, _plain) / n * 1e6)
        sides["cascade"].append(_timed(rows, _cascade) / n * 1e6)
        log(f"{NAME}: run {i + 1}/{runs}: plain row {sides['plain_row'][-1]:.2f} us, "
            f"cascade {sides['cascade'][-1]:.2f} us per parent row")
    med = {k: round(median(v), 2) for k, v in sides.items()}
    return {"params": {"parent_rows": n, "rows_per_txn": PER_TXN, "runs": runs},
            "median_us_per_parent_row": med,
            "cascade_over_plain_row": ratio(med["cascade"], med["plain_row"])}


def _timed(rows, action) -> float:
    t0 = time.perf_counter()
    for start in range(0, len(rows), PER_TXN):
        ctx = TxnContext("mariadb:1", f"0-1-{start}", start + 1, 1.0, gtid=True)
        action(ctx, rows[start:start + PER_TXN])
    return time.perf_counter() - t0


def _plain(ctx, rows) -> None:
    for index, (before, _) in enumerate(rows):
        change = row_change(ctx, index, "d", "parent", "delete", "id", before, None)
        kafka_key("d", "parent", change.pk), encode(change)


_CASCADES = Cascades(_Keys(), MAPPINGS)


def _cascade(ctx, rows) -> None:
    _CASCADES.rows(ctx, "d", "parent", "delete", rows, 0, [])
