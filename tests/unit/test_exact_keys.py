"""Issue 13 in the pure core: partial mappings, ambiguous keys in update mode, versions that
go backwards, per-table counts and their metrics."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from cachesync.consumer.adapters.memory import (MemoryCache, MemoryDeadLetters,
                                                MemoryDedupStore, MemorySource)
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.plan import plan_batch
from cachesync.consumer.core.tally import TableTally
from cachesync.consumer.core.writes import APPLIED, BACKWARDS, REFUSED, CacheWrite, fence, padded
from cachesync.consumer.engine import PythonEngine
from cachesync.runtime.metrics import ConsumerMetrics
from cachesync.schema.event import ChangeEvent, Source, encode
from cachesync.schema.mapping import parse_mappings


def ev(after=None, before=None, table="t", version=5, msg_id="m1", op=None):
    image = after or before
    op = op or ("update" if after and before else "insert" if after else "delete")
    return ChangeEvent(msg_id, Source("binlog", "s", "0-1-1", 0.0), "d", table, op,
                       (("id", image.get("id")),), before, after, version)


def maps(keys, **spec):
    return parse_mappings({"d.t": {"keys": keys, **spec}})


# -- partial mappings ------------------------------------------------------------------

def test_a_missing_column_dead_letters_the_event_and_salvages_every_other_key():
    m = maps(["t:{id}", "t:name:{nmae}", "t:email:{email}"])          # a typo
    plan = plan_batch([ev(before={"id": 1, "email": "a@x"}, after={"id": 1, "email": "b@x"})], m)
    assert [e.reason for _, e in plan.poison] == ["missing_column"] and not plan.events
    (salvaged,) = plan.salvaged
    assert salvaged.keys == ("t:1", "t:email:a@x", "t:email:b@x")
    assert salvaged.unrenderable == 1


def test_a_column_dropped_mid_stream_still_renders_from_the_image_that_has_it():
    m = maps(["t:{id}", "t:email:{email}"])
    plan = plan_batch([ev(before={"id": 1, "email": "a@x"}, after={"id": 1})], m)
    assert plan.salvaged[0].keys == ("t:1", "t:email:a@x")


def test_update_mode_bad_version_is_dead_lettered_and_its_keys_invalidated():
    m = maps(["t:{id}"], mode="update", version_column="v")
    plan = plan_batch([ev(after={"id": 1, "v": "not a version"})], m)
    assert [e.reason for _, e in plan.poison] == ["bad_version"]
    assert plan.salvaged[0].keys == ("t:1",) and not plan.writes


def test_an_unknown_table_has_nothing_to_salvage():
    plan = plan_batch([ev(after={"id": 1}, table="other")], maps(["t:{id}"]))
    assert plan.poison and not plan.salvaged


# -- ambiguous keys in update mode -------------------------------------------------------

@pytest.mark.parametrize("keys, row, ambiguous", [
    (["bk:{a}:{b}"], {"id": 1, "a": "x:y", "b": "z"}, ["bk:x:y:z"]),
    (["bk:{a}:{b}"], {"id": 1, "a": "x", "b": "y:z"}, ["bk:x:y:z"]),
    (["bk:{a}:{b}"], {"id": 1, "a": "x", "b": "z"}, []),
    (["bk:{a}{b}"], {"id": 1, "a": "x", "b": "z"}, ["bk:xz"]),          # no separator at all
    (["user:{id}", "user:email:{email}"], {"id": 5, "email": "x"}, []),  # an int id: no overlap
    (["user:{id}", "user:email:{email}"], {"id": "5", "email": "x"}, ["user:email:x"]),
    # a text id may be 'email:y' in another row: both keys are another row's possible key
    (["user:{id}", "user:email:{email}"], {"id": "email:x", "email": "y"},
     ["user:email:x", "user:email:y"]),
    (["ts:{at}"], {"id": 1, "at": "2020-01-01 10:00:00"}, []),          # one field: no split
])
def test_update_mode_never_writes_a_key_another_row_could_render(keys, row, ambiguous):
    plan = plan_batch([ev(after=row)], maps(keys, mode="update"))
    (ep,) = plan.events
    assert [k for k, _ in ep.ambiguous] == ambiguous
    assert sorted(w.key for w in plan.writes if w.kind == "del") == sorted(ambiguous)
    assert all(w.kind == "json" for w in plan.writes if w.key not in ambiguous)


def test_the_two_rows_of_the_issue_never_share_a_value():
    m = maps(["bk:{a}:{b}"], mode="update")
    cache = MemoryCache()
    for i, (a, b) in enumerate([("x:y", "z"), ("x", "y:z")]):
        cache.write(plan_batch([ev(after={"id": i, "a": a, "b": b}, version=i + 1)], m).writes)
    assert "bk:x:y:z" not in cache.data


# -- versions going backwards ----------------------------------------------------------------

V5_OLD, V5_NEW = f"5/{padded(10)}", f"5/{padded(20)}"


@pytest.mark.parametrize("stored, incoming, decision", [
    (None, V5_OLD, APPLIED),
    (V5_OLD, V5_OLD, APPLIED),                                  # the same change again
    (V5_OLD, f"6/{padded(20)}", APPLIED),
    (f"6/{padded(20)}", V5_OLD, REFUSED),                       # a stale replay
    (V5_NEW, V5_OLD, REFUSED),                                  # same column version, older
    (f"5/{padded(10)}", f"3/{padded(20)}", BACKWARDS),          # newer change, lower version
    (padded(20), padded(10), REFUSED),                          # source versions only
])
def test_fence_tells_a_stale_replay_from_a_version_going_backwards(stored, incoming, decision):
    assert fence(stored, incoming) == decision


def test_memory_cache_invalidates_a_backwards_key_and_keeps_the_stored_version():
    cache = MemoryCache()
    write = lambda v: CacheWrite("k", "json", v, v, 60, 0.0)   # noqa: E731
    cache.write([write(f"5/{padded(10)}")])
    result = cache.write([write(f"3/{padded(20)}")])
    assert result.backwards == ("k",) and result.applied == 0 and result.refused == 0
    assert "k" not in cache.data and cache.versions["k"] == f"5/{padded(10)}"
    assert cache.write([write(f"4/{padded(15)}")]).refused == 0          # still newer source
    assert cache.write([write(f"5/{padded(5)}")]).refused == 1           # an old replay


# -- the engine: counts, warnings, metrics -----------------------------------------------------

def record(event, offset):
    return Record("t", 0, offset, b"k", encode(event), (("id", event.id.encode()),), 0)


def run(events, mappings):
    cache, dlq = MemoryCache(), MemoryDeadLetters()
    engine = PythonEngine(MemorySource([record(e, i) for i, e in enumerate(events)]),
                          MemoryDedupStore(), cache, dlq, mappings)
    engine.step()
    return engine, cache, dlq


def test_engine_invalidates_salvaged_keys_without_claiming_the_dead_letter(caplog):
    m = maps(["t:{id}", "t:name:{nmae}"])
    caplog.set_level(logging.WARNING)
    engine, cache, dlq = run([ev(after={"id": 1})], m)
    assert cache.deleted == ["t:1"] and [r for _, r, _ in dlq.sent] == ["missing_column"]
    assert engine.stats.applied == 0                   # not claimed: a replay applies in full
    assert engine.tables.snapshot() == {("unrenderable_templates", "d.t", ""): 1}
    assert "d.t: unrenderable_templates" in caplog.text and "dlq replay" in caplog.text


def test_engine_counts_backwards_versions_per_table_and_warns_naming_the_key(caplog):
    m = maps(["t:{id}"], mode="update", version_column="v")
    caplog.set_level(logging.WARNING)
    engine, cache, _ = run([ev(after={"id": 1, "v": 5}, version=10, msg_id="a"),
                            ev(after={"id": 1, "v": 3}, version=20, msg_id="b")], m)
    assert engine.tables.snapshot() == {("version_backwards", "d.t", ""): 1}
    assert "t:1" not in cache.data
    assert "d.t: version_backwards: key 't:1'" in caplog.text


def test_warnings_are_rate_limited_per_table_and_reason(caplog):
    now = [0.0]
    tally = TableTally(clock=lambda: now[0], warn_interval_s=60)
    caplog.set_level(logging.WARNING)
    for t in (0, 1, 2, 61):
        now[0] = t
        tally.backwards("d.t", ["k"])
    tally.backwards("d.u", ["k"])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and "(2 more since the last warning)" in lines[1]
    assert tally.snapshot() == {("version_backwards", "d.t", ""): 4,
                                ("version_backwards", "d.u", ""): 1}


def test_metrics_export_the_per_table_counts_with_their_labels():
    tally = TableTally()
    tally.add("null_key_skips", "d.t", 2)
    tally.add("invalidated_instead_of_written", "d.t", 1, "ambiguous_key")
    reg = CollectorRegistry()
    ConsumerMetrics(reg, lambda: None, tables=lambda: tally)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for fam in reg.collect() for s in fam.samples if not s.name.endswith("_created")}
    assert got[("cachesync_consumer_null_key_skips_total", (("table", "d.t"),))] == 2
    assert got[("cachesync_consumer_invalidated_instead_of_written_total",
                (("reason", "ambiguous_key"), ("table", "d.t")))] == 1
    names = {fam.name for fam in reg.collect()}
    assert {"cachesync_consumer_version_backwards", "cachesync_consumer_unrenderable_templates"} <= names


def test_a_merged_tally_adds_the_counts_of_another_without_warning_again(caplog):
    task = TableTally()
    task.add("version_backwards", "d.t", 2)
    driver = TableTally()
    driver.add("version_backwards", "d.t", 1)
    caplog.set_level(logging.WARNING)
    driver.merge(task.snapshot())
    assert driver.snapshot() == {("version_backwards", "d.t", ""): 3}
    assert caplog.records == []
