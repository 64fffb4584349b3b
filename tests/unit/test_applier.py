"""The shared batch applier, deliveries and the retry helpers, over the in-memory adapters."""

from __future__ import annotations

import threading

import pytest

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore
from cachesync.consumer.applier import Applier, Stats
from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.core.delivery import decode_records
from cachesync.consumer.core.offsets import Record
from cachesync.schema.errors import DecodeError, FatalError, RetryableError
from cachesync.schema.event import encode_pack, pack_elements
from cachesync.schema.mapping import parse_mappings
from cachesync.schema.retry import RetryPolicy, Stopped, call, purge_in_batches
from tests.support.events import change, record
from tests.support.fakes import FlakyCache

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})
FAST = RetryPolicy(base_s=0.001, cap_s=0.002)
# an unmapped table's event written by hand: spacing and key order no encoder produces
GHOST = (b'{ "v": 1, "id": "g",  "db": "shop", "tbl": "ghosts", "op": "update", '
         b'"src": ["binlog", "s", "0-1-1", 0.0, 0], "pk": [["id", 9]], "b": {"id": 9}, '
         b'"a": {"id": 9}, "ver": 1}')


def cached(*ids) -> MemoryCache:
    cache = MemoryCache()
    cache.data.update({f"user:{i}": b"v" for i in ids})
    return cache


def test_without_a_dedup_store_nothing_is_claimed_and_repeats_apply_once():
    cache = cached(1, 2)
    applier = Applier(cache, MAPPINGS)
    result = applier.apply([record(0, change("a", 1)), record(1, change("a", 1)),
                            record(2, change("b", 3))])
    assert [ep.event.id for ep in result.applied] == ["a", "b"]
    assert result.duplicates == ["a"] and result.keys_existed == 1
    assert cache.deleted == ["user:1", "user:3"] and "user:2" in cache.data


def test_a_dead_letter_of_a_pack_element_carries_its_original_bytes():
    pack = encode_pack([change("a", 1), GHOST, b'{"v":1,"id":"broken"}'])
    dlq = MemoryDeadLetters()
    result = Applier(cached(1), MAPPINGS, dead_letters=dlq,
                     dedup=MemoryDedupStore()).apply([record(5, pack)])
    assert [ep.event.id for ep in result.applied] == ["a"]
    letters = {reason: r for r, reason, _ in dlq.sent}
    assert letters["unknown_table"].value == GHOST                 # not a re-encoding
    assert letters["unknown_table"].header("pack_index") == b"1"
    assert letters["unknown_table"].key == b"shop.ghosts:9"
    assert letters["invalid_envelope"].value == b'{"v":1,"id":"broken"}'
    assert [reason for _, reason in result.dead_lettered] == ["invalid_envelope", "unknown_table"]


def test_a_plain_record_is_dead_lettered_as_it_came():
    rec = Record("changes", 2, 7, b"shop.ghosts:9", GHOST, (("id", b"g"),))
    dlq = MemoryDeadLetters()
    Applier(MemoryCache(), MAPPINGS, dead_letters=dlq).apply([rec])
    assert dlq.sent == [(rec, "unknown_table", "no mapping for table 'shop.ghosts'")]


class _Recording(Stats):
    """Stats that remember the order their counters moved in."""

    def __setattr__(self, name, value):
        self.__dict__.setdefault("moved", []).append(name)
        super().__setattr__(name, value)


@pytest.mark.parametrize("via", ["apply", "add"])
def test_consumed_is_the_last_count_a_batch_moves(via):
    """A reader in another thread that sees the records consumed sees the batch's other
    counts too (a scrape, a test awaiting ``consumed``)."""
    stats = _Recording()
    stats.moved = []
    batch = [record(0, change("a", 1)), record(1, change("a", 1)), record(2, GHOST)]
    if via == "apply":
        Applier(cached(1), MAPPINGS, dedup=MemoryDedupStore(), dead_letters=MemoryDeadLetters(),
                stats=stats).apply(batch)
    else:
        stats.add({"consumed": 3, "applied": 1, "duplicates": 1, "dead_lettered": 1})
    counted = [n for n in stats.moved if n in ("consumed", "applied", "duplicates",
                                                "dead_lettered")]
    assert counted[-1] == "consumed" and set(counted) == {"consumed", "applied", "duplicates",
                                                           "dead_lettered"}
    assert (stats.consumed, stats.applied, stats.duplicates, stats.dead_lettered) == (3, 1, 1, 1)


def test_claimed_ids_are_confirmed_and_skipped_as_duplicates_next_time():
    dedup = MemoryDedupStore()
    applier = Applier(cached(1), MAPPINGS, dedup=dedup)
    applier.apply([record(0, change("a", 1))])
    again = applier.apply([record(1, change("a", 1))])
    assert again.applied == [] and again.duplicates == ["a"]
    assert dedup.rows["a"][0] == "done" and applier.stats.duplicates == 1


def test_an_id_busy_elsewhere_waits_and_a_stop_ends_the_wait():
    dedup, stop = MemoryDedupStore(), threading.Event()
    dedup.claim(["a"], 60)                                       # another consumer's live lease
    stop.set()
    applier = Applier(MemoryCache(), MAPPINGS, ConsumerSettings(claim_lease_s=60), dedup,
                      stop=stop)
    with pytest.raises(Stopped):
        applier.apply([record(0, change("a", 1))])


def test_transient_errors_are_retried_and_counted():
    applier = Applier(FlakyCache(2), MAPPINGS, retry=FAST)
    result = applier.apply([record(0, change("a", 1))])
    assert [ep.event.id for ep in result.applied] == ["a"] and applier.stats.retries == 2


def test_deliveries_keep_record_and_pack_index():
    plain, pack = record(0, change("a", 1)), record(1, encode_pack([change("b", 2), b"[1]"]))
    decoded = decode_records([plain, pack, record(2, b"\xff")])
    assert [(d.event.id, d.record.offset, d.index) for d in decoded.deliveries] == [
        ("a", 0, None), ("b", 1, 0)]
    assert decoded.deliveries[0].raw == plain.value
    assert decoded.deliveries[1].raw == change("b", 2)
    assert [(u.record.offset, u.record.header("pack_index"), u.error.reason)
            for u in decoded.undecodable] == [(1, b"1", "invalid_envelope"), (2, None, "invalid_json")]
    assert (decoded.consumed, decoded.widest) == (4, 2)


@pytest.mark.parametrize("elements", [
    [b'{"a":"x]\\"y,"}', b"5", b"[1,2]", b'"s\\\\"'],
    [b'{"pack":[3]}', b'{"b":{"c":[{"d":"]"}]}}'],
])
def test_pack_elements_returns_each_element_byte_for_byte(elements):
    raw = b'{"v":1, "pack": [ ' + b" , ".join(elements) + b' ], "x": "pack"}'
    assert pack_elements(raw) == elements


def test_pack_elements_refuses_a_record_without_a_pack():
    with pytest.raises(DecodeError):
        pack_elements(b'{"v":1,"name":"pack","id":"a"}')


def test_call_retries_transient_errors_only():
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise RetryableError("down")
        return "ok"
    retried = []
    assert call(flaky, "flaky", policy=FAST, on_retry=lambda e, n: retried.append(n)) == "ok"
    assert retried == [1, 2]
    with pytest.raises(FatalError):
        call(lambda: (_ for _ in ()).throw(FatalError("bad")), "fatal", policy=FAST)


def test_call_gives_up_after_max_attempts_and_stops_on_request():
    def down():
        raise RetryableError("down")
    with pytest.raises(RetryableError):
        call(down, "bounded", policy=RetryPolicy(base_s=0.001, cap_s=0.001, max_attempts=3))
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        call(down, "stopping", stop, FAST)


@pytest.mark.parametrize("rows, batch, max_batches, total, calls", [
    (7, 3, None, 7, 3),      # 3 + 3 + 1: the short batch ends it
    (6, 3, None, 6, 3),      # 3 + 3 + 0
    (25, 10, 2, 20, 2),      # bounded: the rest waits for the next run
    (0, 5, None, 0, 1),
])
def test_purge_in_batches_stops_at_a_short_batch_or_the_bound(rows, batch, max_batches, total,
                                                              calls):
    left, seen = [rows], []

    def purge(limit):
        n = min(limit, left[0])
        left[0] -= n
        seen.append(limit)
        return n
    assert purge_in_batches(purge, batch, max_batches) == total and len(seen) == calls


class UnlinkingStore(MemoryDedupStore):
    """The in-memory store with the Redis store's one-call claim, invalidate and confirm
    (over a MemoryCache standing for the server they share); counts the calls."""

    unlinks = True

    def __init__(self, cache: MemoryCache):
        super().__init__()
        self.cache, self.calls = cache, []

    def claim_unlink(self, changes):
        self.calls.append([i for i, _ in changes])
        token, states = self.claim([i for i, _ in changes], 30)
        ours = [i for i, _ in changes if states[i].value == "owned"]
        existed = self.cache.delete([k for i, keys in changes if i in ours for k in keys])
        self.confirm(token, ours)
        return states, existed


def test_a_delete_only_batch_is_claimed_invalidated_and_confirmed_in_one_call():
    cache = cached(1, 2)
    store = UnlinkingStore(cache)
    token, _ = store.claim(["dup"], 30)
    store.confirm(token, ["dup"])
    applier = Applier(cache, MAPPINGS, dedup=store)
    result = applier.apply([record(0, change("a", 1)), record(1, change("dup", 2)),
                            record(2, change("b", 3))])
    assert store.calls == [["a", "dup", "b"]]
    assert [ep.event.id for ep in result.applied] == ["a", "b"]
    assert list(result.duplicates) == ["dup"] and result.keys_existed == 1
    assert "user:2" in cache.data and applier.stats.keys_deleted == 1
    assert dict(store.claim(["a", "b"], 30)[1]) == {"a": ClaimState.DONE, "b": ClaimState.DONE}


def test_ids_busy_in_the_one_call_go_the_usual_way_once_their_lease_is_over():
    cache = cached(1, 2)
    store = UnlinkingStore(cache)
    store.claim(["b"], 0.05)                     # another consumer's claim, soon expired
    applier = Applier(cache, MAPPINGS, dedup=store, retry=FAST)
    result = applier.apply([record(0, change("a", 1)), record(1, change("b", 2))])
    assert store.calls == [["a", "b"]]
    assert sorted(ep.event.id for ep in result.applied) == ["a", "b"]
    assert "user:1" not in cache.data and "user:2" not in cache.data


def test_a_batch_with_fenced_writes_is_not_applied_in_one_call():
    mappings = parse_mappings({"shop.users": {"keys": ["user:{id}"], "mode": "update",
                                              "value_columns": ["id"]}})
    cache = MemoryCache()
    store = UnlinkingStore(cache)
    Applier(cache, mappings, dedup=store).apply([record(0, change("a", 1))])
    assert cache.data["user:1"] == '{"id":1}'
    assert store.calls == [] and store.counts()["done"] == 1
