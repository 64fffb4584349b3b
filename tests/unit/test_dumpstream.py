"""The fast binlog reader's pure parts and packs spanning transactions (no services).

Event-level equality with python-mysql-replication is tested on a real server in
tests/integration/test_dumpstream.py.
"""

from __future__ import annotations

import io
import struct
import types

import pymysql
import pytest
from pymysqlreplication.event import MariadbGtidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from cachesync.runtime.config import TailerSettings
from cachesync.runtime.linger import Linger
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog import dumpstream
from cachesync.producer_outbox.binlog.dumpstream import (IDLE, DumpConnection, DumpStreamReader,
                                                  _Idle, reader_kind)
from cachesync.producer_outbox.binlog.eventtypes import length_encoded as _length_coded
from cachesync.producer_outbox.binlog.packets import BODY as _BODY
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.encode import packing as packing_module
from cachesync.producer_outbox.publish import pipeline as pipeline_module
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.schema.event import decode_record
from cachesync.schema.gtid import parse_gtid
from cachesync.schema.mapping import parse_mappings
from tests.support.binlog import MARIADB, _Checkpoints, _Stream, mariadb_gtid, rows, u, \
    with_table_maps, xid
from tests.support.clock import FakeClock


class _Chunks(io.RawIOBase):
    """A socket file giving out the bytes in the chunks it was made of."""

    def __init__(self, chunks):
        self._chunks = list(chunks)

    def read1(self, _n):
        return self._chunks.pop(0) if self._chunks else b""


def connection(data: bytes, chunk: int) -> DumpConnection:
    conn = object.__new__(DumpConnection)      # no server: only the packet reader
    conn.read_chunk = _Chunks([data[i:i + chunk] for i in range(0, len(data), chunk)]).read1
    conn.raw_socket, conn.force_close = lambda: None, lambda: None
    conn.seq, conn.dumping, conn._buf, conn._pos = 1, True, b"", 0
    return conn


def packet(payload: bytes, seq: int) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([seq % 256]) + payload


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_packets_split_across_any_chunking(chunk):
    payloads = [b"\x00" + bytes([i]) * (i * 37 % 300) for i in range(40)]
    data = b"".join(packet(p, seq) for seq, p in enumerate(payloads, start=1))
    conn = connection(data, chunk)
    assert [conn.next_raw() for _ in payloads] == payloads
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
        conn.next_raw()        # the server closed the stream: pymysql's error, for the library


def test_a_payload_of_16_mib_continues_in_the_next_packet():
    big = b"\x00" + b"x" * (0xFFFFFF - 1)
    tail = b"y" * 10
    data = packet(big, 1) + packet(tail, 2) + packet(b"\x00next", 3)
    conn = connection(data, 1 << 20)
    assert conn.next_raw() == big + tail
    assert conn.next_raw() == b"\x00next"


def test_a_sequence_gap_is_an_error_and_sequence_0_a_lost_server():
    conn = connection(packet(b"\x00a", 1) + packet(b"\x00b", 5), 100)
    assert conn.next_raw() == b"\x00a"
    with pytest.raises(pymysql.err.InternalError, match="got 5 expected 2"):
        conn.next_raw()
    conn = connection(packet(b"\xff\x00\x00", 0), 100)    # MariaDB shutting down
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
        conn.next_raw()


def test_the_reader_is_idle_only_when_the_buffer_is_empty_once_per_silence():
    conn = connection(packet(b"\x00a", 1) + packet(b"\x00b", 2), 5)   # b arrives in pieces
    conn.idle_wait_s = 0.01
    with pytest.raises(_Idle):      # before the first read, nothing consumed
        conn.next_raw()
    assert conn._pos == 0 and conn._buf == b""
    # then it waits for the server; a half-read packet is not idle
    assert [conn.next_raw(), conn.next_raw()] == [b"\x00a", b"\x00b"]
    with pytest.raises(_Idle):      # everything read: idle again, once
        conn.next_raw()
    with pytest.raises(pymysql.err.OperationalError, match="Lost connection"):
        conn.next_raw()


def _timed_reads(packets_at):
    """A connection whose socket gives each (arrival time, packet) once the clock reaches it."""
    clock = FakeClock(1000.0)
    chunks = list(packets_at)

    def read1(_n):
        at, data = chunks.pop(0)
        clock.now = max(clock.now, at)        # a read blocks until the bytes arrive
        return data
    conn = connection(b"", 1)
    conn.read_chunk = read1
    conn.linger = Linger(0.002, 0.004, clock.monotonic, clock.sleep)   # the tailer's
    return conn, clock


def test_at_the_head_reads_close_together_wait_for_more_and_far_apart_do_not():
    small = [packet(b"\x00" + bytes([i]) * 200, i + 1) for i in range(6)]
    conn, clock = _timed_reads([(1000.000, small[0]), (1000.001, small[1]),
                                (1000.002, small[2]), (1000.100, small[3]),
                                (1000.200, small[4]), (1000.300, small[5])])
    for _ in range(2):
        conn.next_raw()
    assert clock.slept == []                  # the second came 1 ms after the first...
    conn.next_raw()
    assert clock.slept == [0.002]             # ...so the third read waits until 2 ms after it
    conn.next_raw()                           # the third was still close: the fourth waits
    assert clock.slept == [0.002, 0.002]
    for _ in range(2):                        # the fourth came 97 ms later: nothing waits
        conn.next_raw()
    assert clock.slept == [0.002, 0.002]


def test_at_the_head_a_read_is_idle_at_once_when_it_came_alone_or_before_its_linger(monkeypatch):
    """Idleness is said at once after a short read that came alone, and before the linger
    after one that came close to the one before (what was read leaves before the reader
    sleeps); after ``idle_wait_s`` of silence when a read came close but its linger is over
    (more may be on the way)."""
    waits = []
    monkeypatch.setattr(dumpstream.select, "select",
                        lambda r, w, x, timeout: waits.append(timeout) or ([], [], []))
    small = [packet(b"\x00" + bytes([i]) * 200, i + 1) for i in range(4)]
    conn, clock = _timed_reads([(1000.000, small[0]), (1000.001, small[1]),
                                (1000.100, small[2]), (1000.101, small[3])])
    conn.raw_socket, conn.idle_wait_s = object, 0.005
    with pytest.raises(_Idle):          # before any read: after the whole silence
        conn.next_raw()
    assert waits == [0.005]
    assert conn.next_raw() == small[0][4:]
    with pytest.raises(_Idle):          # the first read came alone: idle at once
        conn.next_raw()
    assert waits == [0.005, 0.0]
    assert conn.next_raw() == small[1][4:]
    with pytest.raises(_Idle):          # 1 ms after it: idle before the linger, no wait
        conn.next_raw()
    assert waits == [0.005, 0.0] and clock.slept == []
    assert conn.next_raw() == small[2][4:]      # the linger, then the read
    assert clock.slept == [0.002]
    with pytest.raises(_Idle):          # 99 ms later: alone
        conn.next_raw()
    assert waits == [0.005, 0.0, 0.0]
    assert conn.next_raw() == small[3][4:]
    clock.now += 0.01                   # close, but the linger is over by the next read
    with pytest.raises(_Idle):
        conn.next_raw()
    assert waits == [0.005, 0.0, 0.0, 0.005] and clock.slept == [0.002]


def test_before_wait_comes_after_the_linger_before_each_read_that_may_wait():
    """``before_wait`` runs with nothing buffered, after the linger's sleep and right before
    the read that may wait for the server, saying whether the newest arrival came alone;
    never between the pieces of a packet."""
    small = [packet(b"\x00" + bytes([i]) * 200, i + 1) for i in range(3)]
    conn, clock = _timed_reads([(1000.000, small[0]), (1000.001, small[1][:50]),
                                (1000.001, small[1][50:]), (1000.100, small[2])])
    calls = []
    conn.before_wait = lambda alone: calls.append((clock.now, alone, list(clock.slept)))
    assert conn.next_raw() == small[0][4:]
    assert calls == [(1000.0, False, [])]               # before the first read: nothing came
    assert conn.next_raw() == small[1][4:]              # its second piece: no call
    assert calls[1:] == [(1000.0, True, [])]            # the first came alone
    assert conn.next_raw() == small[2][4:]
    # the second came 1 ms after the first: the read waits the linger, then says so
    assert calls[2:] == [(pytest.approx(1000.003), False, [0.002])]


def _reader_over(conn: DumpConnection) -> DumpStreamReader:
    reader = object.__new__(DumpStreamReader)   # no server: only what await_bytes reads
    reader._buffered_connection = lambda: conn
    return reader


def test_await_bytes_reads_only_into_a_drained_buffer():
    conn = connection(packet(b"\x00a", 1) + packet(b"\x00b", 2), 100)
    reader = _reader_over(conn)
    assert reader.await_bytes() is True and conn._pos == 0 and len(conn._buf) == 12
    assert reader.await_bytes() is False        # bytes still buffered: nothing read
    assert [conn.next_raw(), conn.next_raw()] == [b"\x00a", b"\x00b"]
    conn.idle_wait_s = 0.01                     # drained, and the socket stays silent
    assert reader.await_bytes() is IDLE
    assert reader.await_bytes() is False        # the server closed: the library's to raise
    assert isinstance(conn.handoff_error, pymysql.err.OperationalError)


def test_reading_from_behind_never_waits():
    full = [packet(b"\x00" + b"x" * 20_000, i + 1) for i in range(3)]   # long reads
    conn, clock = _timed_reads([(1000.0, p) for p in full])
    for _ in full:
        conn.next_raw()
    assert clock.slept == []


@pytest.mark.parametrize("domain,server,seq", [(0, 1, 42), (7, 4294967295, 2**64 - 1), (12, 3, 1)])
def test_a_gtid_event_carries_the_gtid_its_text_parses_to(domain, server, seq):
    raw = bytes(_BODY) + struct.pack("<QIB", seq, domain, 0)
    event = DumpStreamReader._gtid(raw, 1700000000, server)
    assert event.gtid == f"{domain}-{server}-{seq}"
    assert event.parsed == parse_gtid(event.gtid) and str(event.parsed) == event.gtid


def test_length_coded_integers():
    assert _length_coded(b"\x05", 0) == (5, 1)
    assert _length_coded(b"\xfc\x01\x02", 0) == (0x0201, 3)
    assert _length_coded(b"\xfd\x01\x02\x03", 0) == (0x030201, 4)
    assert _length_coded(b"\xfe" + struct.pack("<Q", 2 ** 40), 0) == (2 ** 40, 9)


def test_reader_setting():
    assert [reader_kind(r) for r in ("auto", "fast", "library")] == ["fast", "fast", "library"]
    with pytest.raises(ValueError, match="tailer.reader"):
        reader_kind("turbo")


# -- packs spanning transactions -------------------------------------------------------

class _IdleStream(_Stream):
    """A stream that says when it is idle (IDLE items), as the fast reader does."""

    signals_idle = True


class _HeldAcks:
    """A publisher whose acks arrive when the test says so."""

    def __init__(self):
        self.records, self.pending = [], []

    def partitions(self, topic):
        return [0, 1, 2]

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        self.records.append(decode_record(value))
        self.pending.append(on_ack)

    def ack_all(self):
        while self.pending:
            self.pending.pop(0)()

    def flush(self, timeout_s=None):
        pass


def _txn(seq: int):
    return [mariadb_gtid(0, 1, seq), rows(WriteRowsEvent, u(seq, f"{seq}@x")), xid(seq)]


def test_packs_span_transactions_and_the_checkpoint_waits_for_their_acks(monkeypatch):
    # the clock stands still: no pack reaches its linger time and the partition count is read
    # once, so what closes packs here is the stream going idle, not how busy the host is
    frozen = types.SimpleNamespace(monotonic=lambda: 1000.0)
    monkeypatch.setattr(pipeline_module, "time", frozen)
    monkeypatch.setattr(packing_module, "time", frozen)
    events = with_table_maps([e for seq in range(42, 52) for e in _txn(seq)])
    stream = _IdleStream(events[:24] + [IDLE] + events[24:])    # idle after 6 transactions
    publisher, checkpoints = _HeldAcks(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints,
                    parse_mappings({"app.users": {"keys": ["user:{id}"]}}),
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=50)))
    source = tailer.binlog_source(stream, MARIADB, Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4))
    tailer.pipeline.run(source)
    # the idle stream sent the first 6 transactions' rows, in at most 3 records (partitions)
    sent = [e for record in publisher.records for e in record]
    assert sorted(e.source.position for e in sent) == [f"0-1-{s}" for s in range(42, 48)]
    assert len(publisher.records) <= 3 and max(map(len, publisher.records)) >= 2
    tailer.pipeline.save_checkpoint()
    assert checkpoints.saved == []           # nothing acknowledged yet
    publisher.ack_all()
    tailer.pipeline.save_checkpoint()
    # transactions 48-51 wait in open packs: the checkpoint stops at 47
    assert checkpoints.saved[-1].gtid == "0-1-47"
    tailer.pipeline.drain()
    publisher.ack_all()
    tailer.pipeline.save_checkpoint()
    assert checkpoints.saved[-1].gtid == "0-1-51" and tailer.acked == 10


class _OnePartition(_HeldAcks):
    def partitions(self, topic):
        return [0]


class _PacedStream(_IdleStream):
    """Transactions ``step_s`` apart on ``clock`` (it moves on at each GTID event)."""

    def __init__(self, events, clock, step_s):
        super().__init__(events)
        self._clock, self._step_s = clock, step_s

    def __iter__(self):
        for event in list.__iter__(self):
            if isinstance(event, MariadbGtidEvent):
                self._clock.now += self._step_s
            yield event


@pytest.mark.parametrize("linger_ms, sizes", [(5, [3, 3, 3, 1]), (10, [5, 5])])
def test_a_busy_pack_is_sent_tailer_pack_linger_ms_after_it_opened(monkeypatch, linger_ms,
                                                                     sizes):
    """Transactions 3 ms apart and never idle: each pack goes out with the first transaction
    that ends ``tailer.pack_linger_ms`` or more after the pack opened (the last at the drain)."""
    clock = FakeClock(1000.0)
    monkeypatch.setattr(pipeline_module, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr(packing_module, "time", types.SimpleNamespace(monotonic=clock))
    events = with_table_maps([e for seq in range(42, 52) for e in _txn(seq)])
    publisher = _OnePartition()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(),
                    parse_mappings({"app.users": {"keys": ["user:{id}"]}}),
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=50,
                                                      pack_linger_ms=linger_ms)))
    source = tailer.binlog_source(_PacedStream(events, clock, 0.003), MARIADB,
                                  Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4))
    tailer.pipeline.run(source)
    tailer.pipeline.drain()
    assert [len(record) for record in publisher.records] == sizes
