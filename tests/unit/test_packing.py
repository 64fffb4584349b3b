"""Packed records: the codec, the tailer's packer and the engine reading packs (no services)."""

import json
import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from cachesync.consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore, MemorySource
from cachesync.consumer.core.offsets import Record
from cachesync.runtime.config import ConsumerSettings, TailerSettings
from cachesync.consumer.engine import PythonEngine
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.encode.packing import Packer
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent
from cachesync.schema.errors import DecodeError
from cachesync.schema.event import decode, decode_record, encode, encode_pack
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import parse_mappings
from tests.support.events import event as change
from cachesync.schema import partition as partitioning
from cachesync.schema.partition import partition_for
from tests.support.binlog import (MARIADB, _Checkpoints, _Stream, mariadb_gtid, rows, u,
                                  with_table_maps, xid)

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})


def _implementations():
    """The pure-Python partitioner always; the C one (cachesync._speedups) where built."""
    found = [pytest.param((partitioning.py_murmur2, partitioning.py_partition_for), id="python")]
    try:
        from cachesync import _speedups
    except ImportError:
        found.append(pytest.param(None, id="c", marks=pytest.mark.skip(
            reason="cachesync._speedups is not built (no C compiler at `make install`)")))
    else:
        found.append(pytest.param((_speedups.murmur2, _speedups.partition_for), id="c"))
    return found


@pytest.mark.parametrize("impl", _implementations())
def test_murmur2_is_kafkas(impl):
    murmur2, partition = impl
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        assert murmur2(data) == kafka_murmur2(data)
        for partitions in (1, 3, 7, 2**31 - 1):
            assert partition(data, partitions) == (kafka_murmur2(data) & 0x7FFFFFFF) % partitions
    text = "shop.users:42".encode()
    assert murmur2(bytearray(text)) == murmur2(memoryview(text)) == kafka_murmur2(text)


@pytest.mark.parametrize("impl", _implementations())
def test_both_partitioners_refuse_the_same_bad_input_the_same_way(impl):
    murmur2, partition = impl
    for bad in (0, -3, 2**31, 2**64):
        with pytest.raises(ValueError, match=r"partitions must be in 1\.\.2147483647"):
            partition(b"k", bad)
    for bad in (3.0, "3", None):
        with pytest.raises(TypeError):
            partition(b"k", bad)
    for bad in ("text, not bytes", 42, None):
        with pytest.raises(TypeError):
            murmur2(bad)
        with pytest.raises(TypeError):
            partition(bad, 3)
    with pytest.raises(TypeError):
        partition(key=b"k", partitions=3)          # positional only, as the C function
    assert partition(b"k", True) == partition(b"k", 1) == 0    # an int subclass is an int


@pytest.mark.parametrize("impl", _implementations())
def test_a_buffer_of_wider_items_hashes_its_bytes(impl):
    murmur2, partition = impl
    import array
    words = array.array("i", [1, 2, 3])
    assert murmur2(words) == kafka_murmur2(words.tobytes())
    assert partition(words, 7) == (kafka_murmur2(words.tobytes()) & 0x7FFFFFFF) % 7


def test_the_partitioner_in_use_is_the_compiled_one_when_built_and_not_switched_off():
    from cachesync import speedups
    if speedups() is None:
        assert not partitioning.ACCELERATED and partition_for is partitioning.py_partition_for
    else:
        assert partitioning.ACCELERATED and partition_for is speedups().partition_for


def test_a_pack_round_trips_in_order():
    events = [change("a", 1), change("b", 2), change("c", 1, version=2)]
    raw = encode_pack([encode(e) for e in events])
    assert json.loads(raw)["v"] == 1
    assert decode_record(raw) == events
    assert decode_record(encode(events[0])) == [events[0]]


@pytest.mark.parametrize("raw, reason", [
    (b'{"v":1,"pack":[]}', "invalid_envelope"),
    (b'{"v":1,"pack":{"a":1}}', "invalid_envelope"),
    (b'{"v":3,"pack":[]}', "unsupported_version"),
    (b'{"v":1,"pack":[', "invalid_json"),
])
def test_an_unreadable_pack_is_one_error(raw, reason):
    with pytest.raises(DecodeError) as e:
        decode_record(raw)
    assert e.value.reason == reason and e.value.raw == raw


def test_a_bad_element_is_an_error_in_its_place():
    good = encode(change("a", 1))
    raw = b'{"v":1,"pack":[' + good + b',{"v":9,"id":"x"},{"v":1,"id":"y"},7]}'
    items = decode_record(raw)
    assert items[0] == change("a", 1)
    assert [(i.reason, json.loads(i.raw)) for i in items[1:]] == [
        ("unsupported_version", {"v": 9, "id": "x"}),
        ("invalid_envelope", {"v": 1, "id": "y"}),
        ("invalid_envelope", 7)]


def test_decode_of_one_event_refuses_a_pack():
    with pytest.raises(DecodeError, match="pack"):
        decode(encode_pack([encode(change("a", 1))]))


def test_packer_groups_by_table_and_partition_and_closes_at_the_limits():
    packer = Packer(max_rows=3, max_bytes=10_000)
    keys = [kafka_key("shop", "users", (("id", i),)) for i in range(40)]
    full = [p for i, k in enumerate(keys)
            if (p := packer.add("shop", "users", k, b"x%d" % i, f"id{i}", 4)) is not None]
    rest = packer.drain()
    assert packer.drain() == [] and packer.open_rows == 0
    packs = full + rest
    assert all(p.rows == 3 for p in full) and all(p.rows <= 3 for p in rest)
    assert sum(p.rows for p in packs) == 40
    for p in packs:   # every row is in its own key's partition; the pack carries its first key
        idx = [int(v[1:]) for v in p.values]
        assert {partition_for(keys[i].encode(), 4) for i in idx} == {p.partition}
        assert p.key == keys[idx[0]] and p.msg_id == f"id{idx[0]}" and idx == sorted(idx)
    by_bytes = Packer(max_rows=1000, max_bytes=10)
    assert by_bytes.add("d", "t", "k", b"0123456789", "i", 1).rows == 1
    assert by_bytes.add("d", "t", "k", b"a", "i", 1) is None
    other = by_bytes.add("d", "other", "k", b"0123456789", "j", 1)   # its own group
    assert other.values == [b"0123456789"] and [p.values for p in by_bytes.drain()] == [[b"a"]]


def test_a_one_row_pack_goes_out_as_a_plain_event():
    packer = Packer(max_rows=2, max_bytes=10_000)
    packer.add("shop", "users", "shop.users:1", encode(change("a", 1)), "a", 1)
    (pack,) = packer.drain()
    assert decode(pack.record_value()) == change("a", 1)


class _PackPublisher:
    def __init__(self, partitions=3):
        self.records, self._n = [], partitions

    def partitions(self, topic):
        return list(range(self._n))

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        self.records.append((partition, key, msg_id, decode_record(value)))
        on_ack()

    def flush(self, timeout_s=None):
        pass


def test_the_tailer_packs_each_transaction_by_partition():
    users = [u(i, f"{i}@x") for i in range(1, 21)]
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, *users[:12]),
              rows(UpdateRowsEvent, *[(x, {**x, "email": "new"}) for x in users[:8]]), xid(1),
              mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, users[19]), xid(2)]
    publisher, checkpoints = _PackPublisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints,
                    parse_mappings({"app.users": {"keys": ["user:{id}"]}}),
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=5)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4)))
    tailer.pipeline.save_checkpoint()
    assert tailer.published == tailer.acked == 21
    assert checkpoints.saved[-1].gtid == "0-1-43"
    first_txn = [r for r in publisher.records if r[3][0].source.position == "0-1-42"]
    # each record: one partition, at most 5 rows, every row's key hashing to it
    for partition, key, msg_id, evs in publisher.records:
        assert 1 <= len(evs) <= 5 and key == kafka_key("app", "users", evs[0].pk)
        assert msg_id == evs[0].id
        assert {partition_for(kafka_key("app", "users", e.pk).encode(), 3) for e in evs} == {partition}
    assert len(first_txn) < 20
    # per key, the binlog order (row_index) survives packing
    seen = {}
    for _, _, _, evs in publisher.records:
        for e in evs:
            assert e.source.row_index > seen.get((e.source.position, e.pk), -1)
            seen[(e.source.position, e.pk)] = e.source.row_index
    assert sorted(e.source.row_index for r in first_txn for e in r[3]) == list(range(20))
    (last,) = [r for r in publisher.records if r[3][0].source.position == "0-1-43"]
    assert len(last[3]) == 1


def test_the_engine_applies_a_pack_and_dead_letters_only_its_poison_element():
    pack = encode_pack([encode(change("a", 1)), encode(change("x", 2, table="ghosts")),
                        b'{"v":1,"id":"broken"}', encode(change("c", 3))])
    record = Record("changes", 0, 7, b"shop.users:1", pack, (("id", b"a"),))
    cache = MemoryCache()
    cache.data.update({f"user:{i}": b"v" for i in range(5)})
    source, dlq = MemorySource([record, Record("changes", 0, 8, b"k", encode(change("d", 4)))]), MemoryDeadLetters()
    engine = PythonEngine(source, MemoryDedupStore(), cache, dlq, MAPPINGS)
    result = engine.step()
    assert sorted(p.event.id for p in result.applied) == ["a", "c", "d"]
    assert "user:1" not in cache.data and "user:3" not in cache.data and "user:2" in cache.data
    assert engine.stats.consumed == 5 and engine.stats.dead_lettered == 2
    letters = {reason: r for r, reason, _ in dlq.sent}
    ghost, broken = letters["unknown_table"], letters["invalid_envelope"]
    assert decode(ghost.value) == change("x", 2, table="ghosts")
    assert (ghost.offset, ghost.key, ghost.header("id"), ghost.header("pack_index")) == (
        7, b"shop.ghosts:2", b"x", b"1")
    assert (broken.value, broken.header("pack_index"), broken.header("id")) == (
        b'{"v":1,"id":"broken"}', b"2", None)
    assert source.committed == {("changes", 0): 9}


def test_the_engine_polls_fewer_records_when_they_are_packed():
    packs = [Record("changes", 0, i, b"k", encode_pack([encode(change(f"{i}-{j}", j))
                                                        for j in range(4)])) for i in range(10)]
    source = MemorySource(packs)
    asked = []
    poll = source.poll
    source.poll = lambda n, t: asked.append(n) or poll(n, t)
    engine = PythonEngine(source, MemoryDedupStore(), MemoryCache(), MemoryDeadLetters(), MAPPINGS,
                          ConsumerSettings(batch_size=8))
    for _ in range(4):
        engine.step()
    # nothing seen yet: batch_size records; then batch_size // the widest record seen (4)
    assert asked[:3] == [8, 2, 2] and engine.stats.consumed == 40
