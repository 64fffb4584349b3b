"""The python engine's overlapped loop (``consumer.overlap_batches``, the default of ``run``):
the next batch is polled and prepared while a worker applies the current one, and yet every
batch reaches the cache and the dedup store alone, in order, and is committed after it was
applied, from the thread that polls."""

from __future__ import annotations

import threading

import pytest

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.adapters.memory import (MemoryCache, MemoryDeadLetters, MemoryDedupStore,
                                                MemorySource)
from cachesync.consumer.engine import PythonEngine
from cachesync.consumer.hooks import Hook
from cachesync.schema.errors import FatalError
from cachesync.schema.mapping import parse_mappings
from tests.support.events import change, record

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})
ROWS = 40


class Log:
    """What happened, in order, with the thread it happened on."""

    def __init__(self):
        self.entries: list[tuple[str, object, int]] = []
        self.applying = 0
        self.lock = threading.Lock()

    def add(self, kind: str, what) -> None:
        with self.lock:
            self.entries.append((kind, what, threading.get_ident()))

    def of(self, kind: str) -> list:
        return [e for e in self.entries if e[0] == kind]


class Source(MemorySource):
    """Hands out every record, then stops the engine; the engine thread is the poller."""

    def __init__(self, records, log: Log):
        super().__init__(records)
        self.log, self.engine = log, None

    def poll(self, max_records, timeout_s):
        batch = super().poll(max_records, timeout_s)
        self.log.add("poll", [r.offset for r in batch])
        if not batch and self._pos >= len(self.records):
            self.engine.stop()
        return batch

    def commit(self, offsets):
        self.log.add("commit", dict(offsets))
        super().commit(offsets)


class Cache(MemoryCache):
    """Records each delete; fails if two applies ever run at once."""

    def __init__(self, log: Log, fail_on: str | None = None):
        super().__init__()
        self.log, self.fail_on = log, fail_on

    def delete(self, keys):
        with self.log.lock:
            self.log.applying += 1
            assert self.log.applying == 1, "two batches applied at once"
        try:
            if self.fail_on in keys:
                raise FatalError("refused for good")
            self.log.add("delete", list(keys))
            return super().delete(keys)
        finally:
            with self.log.lock:
                self.log.applying -= 1


class Ticks(Hook):
    def __init__(self, log: Log):
        self.log = log

    def tick(self):
        assert self.log.applying == 0, "a hook ticked beside a batch"
        self.log.add("tick", None)

    def after_batch(self, result):
        self.log.add("after", [p.event.id for p in result.applied])


def _engine(log: Log, overlap: bool = True, fail_on: str | None = None, cache_type=Cache):
    records = [record(i, change(f"m{i}", i)) for i in range(ROWS)]
    source, cache = Source(records, log), cache_type(log, fail_on)
    cache.data.update({f"user:{i}": b"v" for i in range(ROWS)})
    engine = PythonEngine(source, MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS,
                          ConsumerSettings(batch_size=3, overlap_batches=overlap),
                          hooks=[Ticks(log)])
    source.engine = engine
    return engine, source, cache


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "in-turn"])
def test_every_batch_is_applied_in_order_then_committed(overlap):
    log = Log()
    engine, source, cache = _engine(log, overlap)
    engine.run()
    assert not any(k.startswith("user:") for k in cache.data)
    deletes = [keys for _, keys, _ in log.of("delete")]
    assert [k for keys in deletes for k in keys] == [f"user:{i}" for i in range(ROWS)]
    assert source.committed == {("changes", 0): ROWS}
    assert engine.stats.applied == ROWS and engine.stats.batches == len(deletes)
    # each batch's commit comes after its delete and before the next batch's delete
    order = [(kind, what) for kind, what, _ in log.entries if kind in ("delete", "commit")]
    assert [kind for kind, _ in order] == ["delete", "commit"] * len(deletes)
    for (_, keys), (_, offsets) in zip(order[::2], order[1::2]):
        assert offsets == {("changes", 0): int(keys[-1].split(":")[1]) + 1}
    # the Kafka consumer is touched from one thread only: the one that called run()
    me = threading.get_ident()
    assert {t for kind, _, t in log.entries if kind in ("poll", "commit", "tick", "after")} == {me}
    if overlap:
        assert {t for _, _, t in log.of("delete")} != {me}        # applied by the worker
        # some batch N+1 was polled before batch N was committed (what overlaps): before
        # some commit, more non-empty polls than commits up to and including it
        polls = commits = 0
        ahead = False
        for kind, what, _ in log.entries:
            polls += kind == "poll" and bool(what)
            if kind == "commit":
                commits += 1
                ahead = ahead or polls > commits
        assert ahead


def test_a_fatal_error_in_a_batch_ends_the_loop_and_its_offsets_stay_uncommitted():
    log = Log()
    engine, source, _ = _engine(log, fail_on="user:10")
    with pytest.raises(FatalError, match="refused for good"):
        engine.run()
    committed = source.committed.get(("changes", 0), 0)
    assert committed <= 10          # nothing at or after the failed batch
    applied = [k for _, keys, _ in log.of("delete") for k in keys]
    assert applied == [f"user:{i}" for i in range(len(applied))] and len(applied) < 12
    assert committed == len(applied)


def test_stop_while_a_batch_is_in_flight_lands_and_commits_it():
    log, stopped, engines = Log(), threading.Event(), []

    class StopInFlight(Cache):
        def delete(self, keys):
            if "user:6" in keys and not stopped.is_set():
                stopped.set()
                engines[0].stop()          # asked while this batch is being applied
            return super().delete(keys)

    engine, source, _ = _engine(log, cache_type=StopInFlight)
    engines.append(engine)
    engine.run()
    applied = [k for _, keys, _ in log.of("delete") for k in keys]
    assert "user:6" in applied and len(applied) < ROWS
    assert source.committed == {("changes", 0): len(applied)}


def test_a_short_poll_is_applied_before_the_next_poll():
    """No backlog (a poll returned fewer records than asked): the loop waits for the batch
    before polling again, so the next batch takes in all that arrived meanwhile."""
    log = Log()

    class Trickle(Source):
        def poll(self, max_records, timeout_s):
            return super().poll(min(max_records, 2), timeout_s)     # never a full batch

    records = [record(i, change(f"m{i}", i)) for i in range(ROWS)]
    source, cache = Trickle(records, log), Cache(log)
    engine = PythonEngine(source, MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS,
                          ConsumerSettings(batch_size=3), hooks=[Ticks(log)])
    source.engine = engine
    engine.run()
    assert source.committed == {("changes", 0): ROWS}
    kinds = [kind for kind, what, _ in log.entries if kind in ("poll", "delete", "commit")]
    # every batch: poll, delete, commit; never a poll between a delete and its commit
    assert all(not (a == "delete" and b == "poll") for a, b in zip(kinds, kinds[1:]))
    assert kinds.count("delete") == ROWS // 2


def test_a_fatal_error_of_the_batch_in_flight_when_stop_came_is_raised():
    """Stop asked between handing a batch over and collecting it (here by a hook's tick),
    then that batch fails for good: run() raises the error instead of returning as if all
    went well, and the batch is not committed."""
    log, engines = Log(), []

    class StopOnSecondTick(Ticks):
        def tick(self):
            super().tick()
            if len(self.log.of("tick")) == 2:
                engines[0].stop()

    class Failing(Cache):
        def delete(self, keys):
            if "user:3" in keys:
                raise FatalError("refused for good")
            return super().delete(keys)

    records = [record(i, change(f"m{i}", i)) for i in range(ROWS)]
    source, cache = Source(records, log), Failing(log)
    engine = PythonEngine(source, MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS,
                          ConsumerSettings(batch_size=3), hooks=[StopOnSecondTick(log)])
    source.engine = engine
    engines.append(engine)
    with pytest.raises(FatalError, match="refused for good"):
        engine.run()
    assert source.committed == {("changes", 0): 3}        # the first batch only


def test_a_fatal_poll_with_a_batch_in_flight_is_raised_without_waiting_out_its_retries():
    log = Log()
    engine, source, _ = _engine(log)
    real_poll = source.poll

    def poll(max_records, timeout_s):
        if source._pos >= 6:
            raise FatalError("fenced for good")
        return real_poll(max_records, timeout_s)
    source.poll = poll
    with pytest.raises(FatalError, match="fenced for good"):
        engine.run()
    assert engine._stop.is_set()          # the batch in flight was told to give up
    assert source.committed.get(("changes", 0), 0) <= 6
