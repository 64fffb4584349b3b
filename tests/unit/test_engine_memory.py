"""The python engine's protocol over the in-memory adapters (the real ones are in integration)."""

from consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore, MemorySource
from consumer.core.offsets import Record
from consumer.engine import PythonEngine
from schema.event import ChangeEvent, Source, encode
from schema.mapping import parse_mappings

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})


def record(offset, value, partition=0):
    return Record("changes", partition, offset, b"k", value)


def change(msg_id, uid, table="users"):
    return encode(ChangeEvent(msg_id, Source("binlog", "s", "0-1-1", 0.0), "shop", table, "update",
                              (("id", uid),), {"id": uid}, {"id": uid}, 1))


def engine_for(records, dedup=None):
    cache = MemoryCache()
    cache.data.update({f"user:{i}": b"v" for i in range(10)})
    source, dlq = MemorySource(records), MemoryDeadLetters()
    engine = PythonEngine(source, dedup or MemoryDedupStore(), cache, dlq, MAPPINGS)
    return engine, source, cache, dlq


def test_applies_then_commits_offsets():
    engine, source, cache, _ = engine_for([record(0, change("a", 1)), record(1, change("b", 2), 1)])
    result = engine.step()
    assert [p.event.id for p in result.applied] == ["a", "b"]
    assert "user:1" not in cache.data and "user:2" not in cache.data and "user:3" in cache.data
    assert source.committed == {("changes", 0): 1, ("changes", 1): 2}


def test_duplicates_across_and_within_batches_are_skipped():
    dedup = MemoryDedupStore()
    engine, *_ = engine_for([record(0, change("a", 1))], dedup)
    engine.step()
    engine2, _, cache, _ = engine_for([record(5, change("a", 1)), record(6, change("b", 2)),
                                       record(7, change("b", 2))], dedup)
    result = engine2.step()
    assert sorted(result.duplicates) == ["a", "b"]
    assert [p.event.id for p in result.applied] == ["b"]
    assert "user:1" in cache.data  # not deleted again: it was a duplicate


def test_poison_goes_to_dead_letters_and_the_batch_goes_on():
    engine, source, cache, dlq = engine_for([
        record(0, b"garbage"), record(1, change("x", 1, table="ghosts")), record(2, change("c", 3))])
    result = engine.step()
    assert [(r.offset, reason) for r, reason, _ in dlq.sent] == [(0, "invalid_json"), (1, "unknown_table")]
    assert [p.event.id for p in result.applied] == ["c"] and "user:3" not in cache.data
    assert source.committed == {("changes", 0): 3}


def test_an_expired_claim_is_taken_over():
    clock = [0.0]
    dedup = MemoryDedupStore(clock=lambda: clock[0])
    dedup.claim(["a"], lease_s=5)           # a consumer claimed and died
    clock[0] = 6.0                          # lease over
    engine, *_ = engine_for([record(0, change("a", 1))], dedup)
    assert [p.event.id for p in engine.step().applied] == ["a"]
