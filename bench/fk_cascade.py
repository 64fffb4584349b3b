"""What following foreign-key cascades costs: per cascaded parent row in the tailer, and on
other tables' lag at N parent deletes per second, end to end.

Per parent row (pure CPU, no server): the invalidations ``producer_outbox.unlogged_changes.cascades`` builds
for a deleted parent row (keys of the FK-only template rendered from the parent, a
table-level event for the child's other templates once per transaction), against the same
row published as a plain row event of a mapped table (the baseline: what the tailer pays per
row anyway), in the same run.

Other tables' lag (``other_table_lag``, on the devstack): ``cachesync tail`` and ``cachesync
consume`` (child processes, default settings, a 3-partition topic) follow ``child`` (``ON
DELETE CASCADE`` into ``parent``, which is not mapped) with a template that is not FK-only,
so every parent delete is a table-level invalidation of ``child``, among ``FILLER`` keys of
no table. A process deletes parents (3 child rows each, their keys cached) in single-row
transactions at each rate of ``DELETE_RATES``, open loop, while ``bench.lag.Harness``
measures the commit -> key gone lag of an unrelated mapped table (``lag``) at
``LAG_RATE`` commits/s. Per rate, medians over the runs: that lag (p50/p99/max) and its
p99 over the one at 0 deletes/s (the baseline, measured in the same run), the parent
deletes achieved, the SCAN calls Redis served, and the child keys of deleted parents still
cached once the pipeline drained (must be 0). ``python -m bench --only fk_cascade [--quick]``.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from bench.common import Sandbox, _quietly, log, median, ratio, summarize, wait_for
from bench.lag import DDL as LAG_DDL
from bench.lag import Harness, _alive, _checkpoint_stored
from bench.table_pipeline import _populate, _scan_calls
from cachesync.producer_outbox.unlogged_changes.cascades import Cascades
from cachesync.producer_outbox.unlogged_changes.foreignkeys import CascadeGraph, ForeignKey
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
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


# other tables' lag: parent deletes/s, seconds per rate, the other table's commits/s, keys of
# no table in Redis (every scan examines them), child rows per parent
DELETE_RATES = (0, 1, 10, 50)
LAG_SIZES = {"full": (30.0, 200, 500_000), "quick": (8.0, 200, 50_000)}
CHILDREN = 3
DRAIN_S = 120.0          # for the child keys of deleted parents to be gone
SETTLED_S = 2.0          # no SCAN call for this long: the consumer's scans are over
LAG_FIELDS = ["p50_ms", "p99_ms", "max_ms", "achieved_rate", "deletes_per_s", "scan_calls",
              "child_keys_left", "missing"]


def run(stack, quick: bool, runs: int) -> dict:
    return {"per_parent_row": per_parent_row(quick, runs),
            "other_table_lag": other_table_lag(stack, quick, runs)}


def per_parent_row(quick: bool, runs: int) -> dict:
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


def other_table_lag(stack, quick: bool, runs: int) -> dict:
    """The other table's commit -> key gone lag at each of DELETE_RATES parent deletes/s."""
    seconds, lag_rate, filler = LAG_SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(
            LAG_DDL, "CREATE TABLE parent (id BIGINT PRIMARY KEY)",
            "CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL, "
            "FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)")
        # beyond SELECT, so that the tailer reads the rule (else it takes it as CASCADE)
        stack.admin_sql(f"GRANT REFERENCES ON `{box.db}`.* TO cachesync@'127.0.0.1'")
        r = stack.redis()
        _populate(stack, r, box.prefix + "filler", filler)
        cfg = box.write_config(
            {f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}", box.prefix + "lag:note:{note}"]},
             f"{box.db}.child": {"keys": [box.prefix + "child:{id}",
                                          box.prefix + "child:byparent:{parent_id}"]}},
            topic=box.new_topic(3), consumer={"dedup_store": "redis"},
            metrics={"listen": "127.0.0.1:0"})      # a free port on a shared host
        tail = box.spawn("tail", cfg)
        wait_for(lambda: _alive(box, tail) and _checkpoint_stored(stack, box.settings(cfg)
                                                                   .tailer.name),
                 120, "the tailer's start checkpoint")
        consume = box.spawn("consume", cfg)
        harness = Harness(box, notified=True)
        parents = _Parents(box, r)
        sides: dict[int, list[dict]] = {rate: [] for rate in DELETE_RATES}
        try:
            harness.warm_up(lambda: _alive(box, tail) and _alive(box, consume))
            for i in range(runs):
                for rate in (DELETE_RATES if i % 2 == 0 else tuple(reversed(DELETE_RATES))):
                    result = _one_rate(harness, parents, r, rate, seconds, lag_rate)
                    _alive(box, tail)
                    _alive(box, consume)
                    sides[rate].append(result)
                    log(f"{NAME}: run {i + 1}/{runs}, {rate} parent deletes/s "
                        f"({result['deletes_per_s']}/s done): other table p50 "
                        f"{result['p50_ms']} ms, p99 {result['p99_ms']} ms; "
                        f"{result['scan_calls']} SCAN calls, {result['child_keys_left']} child "
                        f"keys left (load {result['loadavg']})")
        finally:
            harness.close()
        keys = r.dbsize()
        r.close()
        by_rate = {str(rate): summarize(sides[rate], LAG_FIELDS) for rate in DELETE_RATES}
        base = by_rate["0"]["median"]["p99_ms"]
        for rate in DELETE_RATES:
            by_rate[str(rate)]["p99_over_no_deletes"] = ratio(
                by_rate[str(rate)]["median"]["p99_ms"], base)
        return {"params": {"delete_rates": list(DELETE_RATES), "seconds": seconds,
                           "other_table_commits_per_s": lag_rate, "filler_keys": filler,
                           "keys_in_redis": keys, "children_per_parent": CHILDREN,
                           "partitions": 3, "runs": runs,
                           "consumer": "config defaults (table scans paced: busy share 0.5, "
                                       "COUNT 1000)"},
                "by_rate": by_rate}
    finally:
        _quietly(lambda: stack.admin_sql(
            f"REVOKE REFERENCES ON `{box.db}`.* FROM cachesync@'127.0.0.1'"))
        box.cleanup()


def _one_rate(harness: Harness, parents: "_Parents", r, rate: int, seconds: float,
              lag_rate: int) -> dict:
    """The other table's lag while parents are deleted at ``rate`` per second."""
    ids = parents.add(int(rate * seconds * 1.5) + 1 if rate else 0)
    # the scans of the rate before are over: none of them runs into this one
    wait_for(lambda: _scans_settled(r), DRAIN_S, "the consumer's table scans settled")
    scans_before = _scan_calls(r)[0]
    deleter = _Deleter(parents.box, ids, rate)
    deleter.start()
    try:
        result = harness.measure_commits(lag_rate, seconds, False)
    finally:
        deleted, spent = deleter.stop()
    left = parents.keys_left(ids[:deleted])
    try:
        wait_for(lambda: not parents.keys_left(ids[:deleted]), DRAIN_S,
                 "the child keys of the deleted parents gone")
    except TimeoutError:
        pass        # reported as child_keys_left
    return {**result, "delete_rate": rate, "deletes": deleted,
            "deletes_per_s": round(deleted / spent, 1) if spent else 0.0,
            "child_keys_left_at_end_of_writes": left,
            "child_keys_left": parents.keys_left(ids[:deleted]),
            "scan_calls": _scan_calls(r)[0] - scans_before,
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _scans_settled(r) -> bool:
    """Whether Redis served no SCAN call for SETTLED_S."""
    before = _scan_calls(r)[0]
    time.sleep(SETTLED_S)
    return _scan_calls(r)[0] == before


class _Parents:
    """Parent rows with CHILDREN child rows each, and the child keys cached."""

    def __init__(self, box: Sandbox, r):
        self.box, self._r, self._next = box, r, 1

    def add(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + n))
        self._next += n
        if not ids:
            return ids
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO parent (id) VALUES (%s)", [(i,) for i in ids])
            cur.executemany("INSERT INTO child (id, parent_id) VALUES (%s, %s)",
                            [(i * CHILDREN + k, i) for i in ids for k in range(CHILDREN)])
            conn.commit()
        pipe = self._r.pipeline(transaction=False)
        for key in self._keys(ids):
            pipe.set(key, b"cached", ex=3600)
        pipe.execute()
        return ids

    def _keys(self, ids: list[int]) -> list[str]:
        p = self.box.prefix
        return [key for i in ids for key in (f"{p}child:byparent:{i}",
                                             *(f"{p}child:{i * CHILDREN + k}"
                                               for k in range(CHILDREN)))]

    def keys_left(self, ids: list[int]) -> int:
        keys = self._keys(ids)
        return sum(self._r.exists(*keys[i:i + 1000]) for i in range(0, len(keys), 1000))


class _Deleter:
    """A process deleting ``ids``' parents at ``rate`` per second, one per transaction, open
    loop (a late delete does not push the ones after it back), until stopped."""

    def __init__(self, box: Sandbox, ids: list[int], rate: int):
        ctx = multiprocessing.get_context("fork")
        self._stop, self._done, self._spent = ctx.Event(), ctx.Value("i", 0), ctx.Value("d", 0.0)
        self._proc = ctx.Process(target=_delete_parents, daemon=True,
                                 args=(box, ids, rate, self._stop, self._done, self._spent))

    def start(self) -> None:
        self._proc.start()

    def stop(self) -> tuple[int, float]:
        """(parents deleted, seconds it deleted for)."""
        self._stop.set()
        self._proc.join(30)
        if self._proc.exitcode != 0:
            raise RuntimeError(f"the parent deleter exited with {self._proc.exitcode}")
        return self._done.value, self._spent.value


def _delete_parents(box: Sandbox, ids: list[int], rate: int, stop, done, spent) -> None:
    if not rate:
        return
    with box.stack.admin(box.db, autocommit=True) as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        for n, parent in enumerate(ids):
            if stop.wait(max(0.0, t0 + n / rate - time.perf_counter())):
                break
            cur.execute("DELETE FROM parent WHERE id = %s", (parent,))
            done.value = n + 1
            spent.value = time.perf_counter() - t0
