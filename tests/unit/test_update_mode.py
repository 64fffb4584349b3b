"""Update mode in the pure core: which fenced writes an event becomes, and the fencing rule."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.core.plan import plan_batch
from cachesync.consumer.core.writes import CacheWrite, merge_writes, padded
from cachesync.schema.event import ChangeEvent, Source
from cachesync.schema.mapping import parse_mappings
from tests.histories import all_keys, decode_values, deliveries, expected_state, mappings


def table(**spec):
    return parse_mappings({"shop.users": {"keys": ["user:{id}", "user:email:{email}"],
                                          "mode": "update", "ttl": 600, **spec}})


def ev(op, before=None, after=None, version=5):
    image = after or before
    return ChangeEvent("m", Source("binlog", "s", "0-1-1", 0.0), "shop", "users", op,
                       (("id", image["id"]),), before, after, version)


def ops(plan):
    return [(w.key, w.kind, w.value) for w in plan.writes]


def test_insert_writes_the_row_as_json_to_every_key_with_the_source_version():
    row = {"id": 1, "email": "a@x", "name": "Ann"}
    plan = plan_batch([ev("insert", after=row)], table())
    value = json.dumps(row, separators=(",", ":"))
    assert ops(plan) == [("user:1", "json", value), ("user:email:a@x", "json", value)]
    assert {w.version for w in plan.writes} == {padded(5)} and not plan.keys
    assert {(w.ttl_s, w.ttl_jitter) for w in plan.writes} == {(600, 0.1)}


def test_a_moved_key_gets_a_tombstone_and_a_delete_tombstones_every_key():
    moved = plan_batch([ev("update", before={"id": 1, "email": "a@x"},
                           after={"id": 1, "email": "b@x"})], table(value_columns=["email"]))
    assert ops(moved) == [("user:1", "json", '{"email":"b@x"}'),
                          ("user:email:b@x", "json", '{"email":"b@x"}'),
                          ("user:email:a@x", "del", "")]
    gone = plan_batch([ev("delete", before={"id": 1, "email": "a@x"})], table(tombstone_ttl=30))
    assert ops(gone) == [("user:1", "del", ""), ("user:email:a@x", "del", "")]
    assert {w.ttl_s for w in gone.writes} == {30}


def test_hash_values_skip_nulls_and_keep_types_as_text():
    row = {"id": 1, "email": "a@x", "score": dt.date(2026, 1, 2), "bio": None, "raw": b"\x00\xff"}
    plan = plan_batch([ev("insert", after=row)], table(value="hash"))
    assert plan.writes[0].kind == "hash"
    assert json.loads(plan.writes[0].value) == ["id", "1", "email", "a@x", "score", "2026-01-02",
                                                "raw", "0x00ff"]


@pytest.mark.parametrize("value, expected", [
    (42, f"{padded(42)}/{padded(5)}"),
    (dt.datetime(2026, 11, 22, 13, 0, 1), f"2026-11-22T13:00:01.000000/{padded(5)}"),
    (dt.datetime(2026, 11, 22, 13, 0, 1, 5), f"2026-11-22T13:00:01.000005/{padded(5)}"),
])
def test_a_version_column_orders_first_and_the_source_position_breaks_ties(value, expected):
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e", "v": value})],
                      table(version_column="v"))
    assert {w.version for w in plan.writes} == {expected}


def test_version_strings_sort_like_the_values():
    assert padded(9) < padded(10) < padded(2 ** 70)
    a = plan_batch([ev("insert", after={"id": 1, "email": "e", "v": dt.datetime(2026, 1, 1, 0, 0, 9)})],
                   table(version_column="v")).writes[0].version
    b = plan_batch([ev("insert", after={"id": 1, "email": "e", "v": dt.datetime(2026, 1, 1, 0, 0, 10)})],
                   table(version_column="v"), ).writes[0].version
    assert a < b


@pytest.mark.parametrize("value, reason", [(-1, "bad_version"), (1.5, "bad_version"),
                                           ("abc", "bad_version"), (True, "bad_version")])
def test_unusable_version_values_are_poison(value, reason):
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e", "v": value})],
                      table(version_column="v"))
    assert [e.reason for _, e in plan.poison] == [reason] and not plan.writes


def test_missing_version_or_value_column_is_poison_naming_it():
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e"})], table(version_column="v"))
    assert plan.poison[0][1].reason == "missing_column" and "'v'" in plan.poison[0][1].detail
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e"})], table(value_columns=["nope"]))
    assert plan.poison[0][1].reason == "missing_column"


def test_a_null_version_invalidates_instead_of_writing():
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e", "v": None})],
                      table(version_column="v"))
    assert plan.keys == ["user:1", "user:email:e"] and not plan.writes
    assert plan.events[0].unversioned


def test_an_oversized_value_becomes_a_tombstone():
    plan = plan_batch([ev("insert", after={"id": 1, "email": "e", "blob": "x" * 200})],
                      table(max_value_bytes=100))
    assert [w.kind for w in plan.writes] == ["del", "del"] and plan.events[0].oversized == 1


def test_repeated_writes_to_a_key_collapse_to_the_newest():
    w = lambda v, val: CacheWrite("k", "json", padded(v), val, 60, 0.0)   # noqa: E731
    assert merge_writes([w(3, "c"), w(1, "a"), w(3, "c2"), w(2, "b")]) == [w(3, "c2")]


def test_delete_mode_tables_keep_plain_invalidations_and_the_double_delete():
    m = parse_mappings({"shop.users": {"keys": ["user:{id}"], "double_delete": 0.5}})
    plan = plan_batch([ev("delete", before={"id": 1})], m)
    assert plan.keys == ["user:1"] and not plan.writes
    assert plan.events[0].double_delete_s == 0.5


@settings(max_examples=400, deadline=None)
@given(deliveries())
def test_any_interleaving_ends_at_the_newest_version(delivery):
    history, batches = delivery
    cache, m = MemoryCache(), mappings()
    for batch in batches:
        cache.write(plan_batch(batch, m).writes)
    values = {k: cache.data[k] for k in all_keys() if k in cache.data}
    assert decode_values(values) == expected_state(history)
