"""Pure parts of replay, audit and the Spark applier: bounds, rate limit, verdicts, records."""

from __future__ import annotations

import dataclasses

import pytest

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.audit import CONSISTENT, MISSING, STALE, UNVERIFIED, expected_entries, verdict
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.replay import Bound, RateLimiter, ReplayApplier, invalidate_only, parse_bound
from cachesync.consumer.spark.records import KAFKA_SELECT, arrow_records, to_record
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.mapping import parse_mappings

MAPPINGS = parse_mappings({"app.users": {"keys": ["user:{id}", "user:email:{email}"]},
                           "app.orders": {"keys": ["order:{id}"], "mode": "update"}})


@pytest.mark.parametrize("text, bound", [
    ("earliest", Bound("earliest")),
    ("latest", Bound("latest")),
    ("120", Bound("offset", offset=120)),
    ("0:5,2:9", Bound("offsets", offsets={0: 5, 2: 9})),
    ("@1700000000000", Bound("time", time_ms=1700000000000)),
    ("2023-11-14T22:13:20Z", Bound("time", time_ms=1700000000000)),
    ("2023-11-14T22:13:20", Bound("time", time_ms=1700000000000)),     # naive = UTC
])
def test_parse_bound(text, bound):
    assert parse_bound(text) == bound


@pytest.mark.parametrize("text", ["", "yesterday", "0:5,x", "-3"])
def test_parse_bound_rejects(text):
    with pytest.raises(ValueError, match="expected earliest"):
        parse_bound(text)


def test_rate_limiter_waits_for_the_previous_batch_to_fit():
    now, slept = [0.0], []
    limiter = RateLimiter(100, clock=lambda: now[0], sleep=lambda s: (slept.append(s),
                                                                        now.__setitem__(0, now[0] + s)))
    for _ in range(3):
        limiter.acquire(50)            # 50 events at 100/s: 0.5 s each
    assert slept == [0.5, 0.5]
    RateLimiter(None, sleep=lambda s: pytest.fail("unlimited must not sleep")).acquire(10**9)


def test_invalidate_only_turns_update_mode_into_deletes():
    modes = {t: m.mode for t, m in invalidate_only(MAPPINGS).tables.items()}
    assert modes == {"app.users": "delete", "app.orders": "delete"}
    assert MAPPINGS.tables["app.orders"].mode == "update"     # the input is left alone


def _record(offset, event):
    return Record("t", 0, offset, f"{event.db}.{event.table}:x".encode(), encode(event))


def test_replay_applier_counts_distinct_keys_per_table_and_filters_tables():
    ctx = TxnContext("s", "0-1-1", 1, 0.0)
    user = row_change(ctx, 0, "app", "users", "update", "id", {"id": 1, "email": "a"},
                      {"id": 1, "email": "b"})
    order = row_change(ctx, 1, "app", "orders", "insert", "id", None, {"id": 7, "v": 1})
    records = [_record(0, user), _record(1, order), _record(2, user),
               Record("t", 0, 3, b"app.users:9", b"garbage")]
    cache = MemoryCache()
    applier = ReplayApplier(MAPPINGS, cache)
    applier.apply(records)
    assert applier.counts.distinct_keys() == {"app.users": 3, "app.orders": 1}
    assert applier.counts.poison == 1 and applier.counts.records == 4
    assert sorted(cache.deleted) == ["order:7", "user:1", "user:email:a", "user:email:b"]

    only_orders = ReplayApplier(MAPPINGS, None, tables=("app.orders",))
    only_orders.apply(records)
    assert only_orders.counts.distinct_keys() == {"app.orders": 1}


def test_audit_verdicts():
    users, orders = MAPPINGS.tables["app.users"], MAPPINGS.tables["app.orders"]
    row = {"id": 1, "email": "a@x", "name": "n", "score": __import__("decimal").Decimal("1.50")}
    (key, expected), (email_key, _) = expected_entries(row, users)
    assert (key, email_key) == ("user:1", "user:email:a@x")
    assert verdict(users, expected, None) == MISSING
    assert verdict(users, expected, b'{"id": 1, "name": "n", "score": 1.5}') == CONSISTENT
    assert verdict(users, expected, b'{"id": 1, "name": "old"}') == STALE
    assert verdict(users, expected, b"\x00binary") == UNVERIFIED
    assert verdict(users, expected, b'{"unrelated": 1}') == UNVERIFIED
    (_, written), = expected_entries({"id": 7, "v": 1}, orders)
    assert verdict(orders, written, b'{"id":7,"v":1}') == CONSISTENT
    assert verdict(orders, written, b'{"id":7,"v":0}') == STALE
    hashed = dataclasses.replace(orders, value_format="hash")
    (_, fields), = expected_entries({"id": 7, "v": 1}, hashed)
    assert verdict(hashed, fields, {b"id": b"7", b"v": b"1"}) == CONSISTENT
    assert verdict(hashed, fields, {b"id": b"7", b"v": b"2"}) == STALE


def test_to_record_from_a_spark_row():
    from pyspark.sql import Row       # the Row class the workers get (pure Python)
    row = Row(topic="t", partition=2, offset=9, key=bytearray(b"k"), value=bytearray(b"v"),
              headers=[Row(key="id", value=bytearray(b"m1")), Row(key="x", value=None)],
              timestamp_ms=1700000000123)
    assert list(row.asDict()) == [c.split(" AS ")[-1] for c in KAFKA_SELECT]
    assert to_record(row) == Record("t", 2, 9, b"k", b"v", (("id", b"m1"), ("x", b"")),
                                    1700000000123)


def test_arrow_records_are_the_records_of_the_same_rows():
    """What mapInArrow hands a task (the Kafka source's Arrow types, KAFKA_SELECT's order)
    gives the same Records, in the same order, as the pickled Rows of those rows."""
    import pyarrow as pa
    from pyspark.sql import Row
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary()),
                        ("headers", pa.list_(header)), ("timestamp_ms", pa.int64())])
    rows = [("t", 2, 9, b"k", b"v", [{"key": "id", "value": b"m1"}, {"key": "x", "value": None}],
             1700000000123),
            ("t", 2, 10, None, None, None, None),            # a tombstone, no headers
            ("t", 0, 4, b"k2", b"{}", [], 5)]
    batches = [pa.RecordBatch.from_pylist([dict(zip(schema.names, r)) for r in part], schema)
               for part in (rows[:2], rows[2:])]
    assert schema.names == [c.split(" AS ")[-1] for c in KAFKA_SELECT]
    as_rows = [Row(topic, partition, offset, key, value,
                   [Row(**h) for h in headers] if headers is not None else None, ts)
               for topic, partition, offset, key, value, headers, ts in rows]
    assert list(arrow_records(batches)) == [to_record(r) for r in as_rows]
    assert list(arrow_records(batches))[1] == Record("t", 2, 10, None, None, (), 0)


def test_an_executor_without_pyarrow_says_so(monkeypatch):
    import sys

    from cachesync.consumer.spark.stream import _executor_pyarrow
    monkeypatch.setitem(sys.modules, "pyarrow", None)          # import pyarrow fails
    assert _executor_pyarrow(iter([0])) == [(sys.executable, None)]
    monkeypatch.undo()
    assert _executor_pyarrow(iter([0]))[0][1]                  # the venv has it


def test_stream_options_refuse_an_unknown_transfer():
    from cachesync.consumer.spark.stream import StreamOptions
    assert StreamOptions("ck").transfer == "auto"
    with pytest.raises(ValueError, match="expected auto, arrow or rows"):
        StreamOptions("ck", transfer="arow")


def test_pyspark_is_imported_only_inside_consumer_spark():
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    offenders = []
    for package in ("schema", "consumer", "cachesync", "producer_outbox", "bench"):
        for path in (root / package).rglob("*.py"):
            if "spark" in path.relative_to(root).parts[:2]:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                offenders += [(str(path.relative_to(root)), n) for n in names
                              if n.split(".")[0] == "pyspark"]
    assert offenders == []


class _Partitions:
    """What _per_slot sees of an RDD: its partition count and coalesce."""

    def __init__(self, n: int):
        self.n = n

    def getNumPartitions(self) -> int:  # noqa: N802 (pyspark's name)
        return self.n

    def coalesce(self, n: int) -> "_Partitions":
        return _Partitions(n)


def test_a_micro_batch_takes_at_most_one_task_per_core_and_no_more_than_it_has_partitions():
    from cachesync.consumer.spark.stream import _per_slot
    assert [_per_slot(_Partitions(n), 2).n for n in (1, 2, 3, 12)] == [1, 2, 2, 2]
    assert _per_slot(_Partitions(3), 8).n == 3
