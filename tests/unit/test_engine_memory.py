"""The python engine's protocol over the in-memory adapters (the real ones are in integration)."""

import pytest

from cachesync.consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore, MemorySource
from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.engine import PythonEngine
from cachesync.schema.event import ChangeEvent, Source, encode
from cachesync.schema.mapping import parse_mappings
from tests.support.events import change, record

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})


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


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_update_mode_counts_fenced_writes_and_keeps_the_newest():
    m = parse_mappings({"shop.users": {"keys": ["user:{id}"], "mode": "update",
                                       "value_columns": ["id", "n"]}})

    def upd(msg_id, n, version):
        return encode(ChangeEvent(msg_id, Source("binlog", "s", "0-1-1", 0.0), "shop", "users",
                                  "update", (("id", 1),), {"id": 1, "n": 0}, {"id": 1, "n": n},
                                  version))
    cache = MemoryCache()
    engine = PythonEngine(MemorySource([record(0, upd("new", 2, 20)), record(1, upd("old", 1, 10))]),
                          MemoryDedupStore(), cache, MemoryDeadLetters(), m)
    engine.step()
    assert cache.data["user:1"] == '{"id":1,"n":2}'          # merged in the batch: one write
    engine2 = PythonEngine(MemorySource([record(2, upd("late", 0, 5))]), MemoryDedupStore(),
                           cache, MemoryDeadLetters(), m)
    engine2.step()                                            # a late, older update: refused
    assert cache.data["user:1"] == '{"id":1,"n":2}' and engine2.stats.fenced == 1


def test_delayed_second_delete_runs_after_its_delay_and_on_stop():
    m = parse_mappings({"shop.users": {"keys": ["user:{id}"], "double_delete": 0.5}})
    clock, cache = Clock(), MemoryCache()
    source = MemorySource([record(0, change("a", 1))])
    engine = PythonEngine(source, MemoryDedupStore(), cache, MemoryDeadLetters(), m, clock=clock)
    engine.step()
    assert cache.deleted == ["user:1"]
    cache.data["user:1"] = "refilled from a stale read"
    clock.now += 0.4
    engine.step()
    assert cache.data["user:1"] == "refilled from a stale read"   # not yet due
    clock.now += 0.2
    engine.step()
    assert "user:1" not in cache.data and engine.stats.double_deletes == 1
    source.records.append(record(1, change("b", 2)))
    engine.step()
    engine.stop()
    engine.run()                                                  # stopping runs what is pending
    assert cache.deleted == ["user:1", "user:1", "user:2", "user:2"]


def test_the_periodic_purge_runs_on_its_interval_and_is_bounded():
    clock, dedup = Clock(), MemoryDedupStore()
    dedup._clock = clock
    token, _ = dedup.claim([f"d{i}" for i in range(25)], 30)
    dedup.confirm(token, [f"d{i}" for i in range(25)])
    opts = ConsumerSettings(dedup_retention_s=60, purge_interval_s=300, purge_batch=10,
                         purge_batches_per_run=2)
    engine = PythonEngine(MemorySource(), dedup, MemoryCache(), MemoryDeadLetters(), MAPPINGS,
                          options=opts, clock=clock)
    clock.now += 299
    engine.step()
    assert engine.stats.purged == 0                 # interval not reached
    clock.now += 2
    engine.step()
    assert engine.stats.purged == 20                # two batches of ten, then it yields
    clock.now += 300
    engine.step()
    assert engine.stats.purged == 25 and not dedup.rows


class TimedSource(MemorySource):
    """Records the timeout of every poll."""

    def __init__(self, records=()):
        super().__init__(records)
        self.timeouts = []

    def poll(self, max_records, timeout_s):
        self.timeouts.append(timeout_s)
        return super().poll(max_records, timeout_s)


def test_an_idle_poll_waits_until_the_next_hook_is_due_and_no_longer():
    m = parse_mappings({"shop.users": {"keys": ["user:{id}"], "double_delete": 0.5}})
    clock, source = Clock(), TimedSource([record(0, change("a", 1))])
    options = ConsumerSettings(poll_timeout_s=1.0, purge_interval_s=0)
    engine = PythonEngine(source, MemoryDedupStore(), MemoryCache(), MemoryDeadLetters(), m,
                          options=options, clock=clock)
    engine.step()                               # nothing due before it: the whole wait
    clock.now += 0.2
    engine.step()                               # the second delete is due in 0.3 s
    clock.now += 0.4
    engine.step()                               # it runs before the poll: nothing due after it
    assert source.timeouts == pytest.approx([1.0, 0.3, 1.0])
    assert engine.stats.double_deletes == 1


def test_the_dedup_purge_bounds_an_idle_poll_too():
    clock, source = Clock(), TimedSource()
    dedup = MemoryDedupStore()
    engine = PythonEngine(source, dedup, MemoryCache(), MemoryDeadLetters(),
                          parse_mappings({"shop.users": {"keys": ["user:{id}"]}}),
                          options=ConsumerSettings(poll_timeout_s=5.0, purge_interval_s=2.0),
                          clock=clock)
    engine.step()
    clock.now += 1.5
    engine.step()
    assert source.timeouts == pytest.approx([2.0, 0.5])


def test_polls_that_fail_are_retried_soon_whatever_the_engine_policy_allows(caplog):
    """A broker away makes every poll fail; the consumer must not sleep seconds between two
    of them, or it sleeps on after the broker serves again with the outage's backlog
    waiting. Other calls keep the policy's own backoff."""
    from cachesync.consumer.engine import POLL_RETRY_CAP_S
    from cachesync.schema.errors import RetryableError
    from cachesync.schema.retry import RetryPolicy

    class Highest:                       # every backoff at its ceiling
        @staticmethod
        def uniform(_low, high):
            return high

    class Away(MemorySource):
        failures = 9

        def poll(self, max_records, timeout_s):
            if self.failures:
                self.failures -= 1
                raise RetryableError("Kafka poll failed: 111 ECONNREFUSED")
            return super().poll(max_records, timeout_s)
    policy = RetryPolicy(base_s=0.001, cap_s=5.0, rand=Highest())
    source = Away([record(0, change("a", 1))])
    cache = MemoryCache()
    cache.data["user:1"] = b"v"
    engine = PythonEngine(source, MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS,
                          retry=policy)
    with caplog.at_level("WARNING", logger="cachesync.schema.retry"):
        engine.step()
    waits = [float(m.split("retrying in ")[1].split("s:")[0]) for m in caplog.messages]
    assert len(waits) == 9 and "user:1" not in cache.data
    assert waits[-1] == POLL_RETRY_CAP_S and max(waits) == POLL_RETRY_CAP_S
    assert policy.backoff(9) == 0.512 and POLL_RETRY_CAP_S < 0.512     # capped for polls only
