"""The compiled framer of whole MariaDB transactions (``cachesync._speedups.scan_group``):
it answers only for a complete group of the common shape, and says exactly where each
event lies; anything else is None (the fast reader then reads event by event).

That both ways publish the same records is tested on a real server in
tests/integration/test_hotpath_differential.py.
"""

from __future__ import annotations

import random
import struct
import zlib

import pytest

speedups = pytest.importorskip("cachesync._speedups", reason="the C accelerator is not built")
scan_group = speedups.scan_group

GTID, XID, TABLE_MAP, ANNOTATE, QUERY, ROTATE, HEARTBEAT = 162, 16, 19, 160, 2, 4, 27
WRITE_V1, UPDATE_V2, DELETE_V2 = 23, 31, 32
FL_STANDALONE, FL_TRANSACTIONAL, FL_PREPARED_XA, FL_COMPLETED_XA = 1, 4, 64, 128


def event(etype: int, body: bytes, *, ts: int = 1700000000, server: int = 7, log_pos: int = 0,
          flags: int = 0) -> bytes:
    """An OK byte, the 19-byte event header, the body (a packet payload of the dump)."""
    header = struct.pack("<IBIIIH", ts, etype, server, 19 + len(body), log_pos, flags)
    return b"\x00" + header + body


def gtid_body(seq: int, domain: int = 0, flags: int = FL_TRANSACTIONAL) -> bytes:
    return struct.pack("<QIB", seq, domain, flags) + b"\x00" * 6


def packets(payloads, seq: int = 1) -> bytes:
    return b"".join(struct.pack("<I", len(p))[:3] + bytes([(seq + i) % 256]) + p
                    for i, p in enumerate(payloads))


def txn(*middle, gtid_flags: int = FL_TRANSACTIONAL) -> list[bytes]:
    return [event(GTID, gtid_body(9, flags=gtid_flags), log_pos=100),
            *middle, event(XID, struct.pack("<Q", 42), log_pos=400)]


TABLE = event(TABLE_MAP, b"\x01" * 30, log_pos=200)
ROWS = event(WRITE_V1, b"\x01" * 40, log_pos=300)


@pytest.mark.parametrize("middle", [
    (TABLE, ROWS),
    (TABLE, ROWS, ROWS, ROWS),
    (event(ANNOTATE, b"INSERT INTO t VALUES (1)"), TABLE, ROWS),
    (TABLE, event(UPDATE_V2, b"\x02" * 50), TABLE, event(DELETE_V2, b"\x03" * 20)),
    (),                                               # an empty transaction
])
def test_a_whole_common_group_is_framed(middle):
    payloads = txn(*middle)
    lead = packets([event(HEARTBEAT, b"x" * 5)], seq=250)      # bytes before pos are skipped
    data = lead + packets(payloads, seq=251)
    end, seq, frames = scan_group(data, len(lead), 251, False)
    assert end == len(data) and seq == (251 + len(payloads)) % 256
    assert [data[start:stop] for *_, start, stop in frames] == payloads
    assert [f[0] for f in frames] == [p[5] for p in payloads]
    ts, server = frames[0][1], frames[0][2]
    assert (ts, server, frames[0][3], frames[-1][3]) == (1700000000, 7, 100, 400)


def test_the_frames_end_at_the_xid_and_leave_what_follows():
    payloads = txn(TABLE, ROWS)
    data = packets(payloads + [event(GTID, gtid_body(10))])
    end, seq, frames = scan_group(data, 0, 1, False)
    assert end == len(packets(payloads)) and seq == 1 + len(payloads) and len(frames) == 4


@pytest.mark.parametrize("payloads", [
    txn(TABLE, ROWS, gtid_flags=FL_STANDALONE),           # DDL: no XID ends it
    txn(TABLE, ROWS, gtid_flags=FL_TRANSACTIONAL | FL_PREPARED_XA),
    txn(TABLE, ROWS, gtid_flags=FL_TRANSACTIONAL | FL_COMPLETED_XA),
    txn(event(QUERY, b"q" * 30), TABLE, ROWS),            # DML logged as a statement, BEGIN
    txn(TABLE, event(ROTATE, b"r" * 12)),
    txn(TABLE, event(166, b"z" * 30)),                    # a compressed event: expanded elsewhere
    txn(TABLE, event(26, b"z" * 30)),                     # an incident
    txn(TABLE, ROWS)[1:],                                 # not at a GTID
    [event(33, b"m" * 42), TABLE, ROWS, event(XID, b"\x00" * 8)],   # MySQL's GTID
    [event(GTID, gtid_body(9))[:25]],                     # a GTID event too short
    txn(TABLE, ROWS)[:-1],                                # no XID yet
    txn(TABLE, b"\xff" + ROWS[1:]),                       # an error packet
    txn(TABLE, ROWS)[:-1] + [event(XID, b"\x00" * 3)],    # an XID too short
])
def test_anything_else_is_left_to_the_event_by_event_path(payloads):
    assert scan_group(packets(payloads), 0, 1, False) is None


def test_a_group_the_buffer_cuts_short_or_out_of_sequence_is_not_framed():
    data = packets(txn(TABLE, ROWS))
    assert scan_group(data[:-1], 0, 1, False) is None
    assert scan_group(data[:len(data) - 10], 0, 1, False) is None
    assert scan_group(data, 0, 2, False) is None          # the connection checks the sequence
    assert scan_group(data, len(data), 1, False) is None
    assert scan_group(b"", 0, 0, False) is None


def test_sequence_numbers_wrap():
    payloads = txn(TABLE, ROWS)
    end, seq, frames = scan_group(packets(payloads, seq=254), 0, 254, False)
    assert seq == (254 + 4) % 256 and len(frames) == 4


def test_a_continued_packet_is_not_framed():
    big = event(WRITE_V1, b"\x01" * (0xFFFFFF - 20))       # payload of exactly 0xFFFFFF bytes
    data = packets(txn(TABLE, big))
    assert scan_group(data, 0, 1, False) is None


def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        scan_group(bytearray(b"xx"), 0, 0, False)
    with pytest.raises(TypeError):
        scan_group(b"xx", 0, 0)


def with_crc(payload: bytes) -> bytes:
    """The packet payload with the CRC32 a server appends under binlog_checksum=CRC32."""
    return payload + struct.pack("<I", zlib.crc32(payload[1:]))


def test_events_whose_checksums_verify_are_framed():
    payloads = [with_crc(p) for p in txn(TABLE, ROWS)]
    end, seq, frames = scan_group(packets(payloads), 0, 1, True)
    assert [packets(payloads)[start:stop] for *_, start, stop in frames] == payloads


@pytest.mark.parametrize("event_index", range(4))
@pytest.mark.parametrize("at", [1, 6, 20, -1])      # header, body, the checksum itself
def test_an_event_whose_checksum_fails_is_left_to_the_event_by_event_path(event_index, at):
    """The per-event path verifies it again and names the error (producer_outbox/checksums)."""
    payloads = [with_crc(p) for p in txn(TABLE, ROWS)]
    bad = bytearray(payloads[event_index])
    bad[at] ^= 0x10
    payloads[event_index] = bytes(bad)
    assert scan_group(packets(payloads), 0, 1, True) is None


def test_the_compiled_crc32_is_zlibs():
    rng = random.Random(43)
    for size in [*range(0, 40), 255, 256, 1000, 65537]:
        data = rng.randbytes(size)
        assert speedups.crc32(data) == zlib.crc32(data), size
    assert speedups.crc32(memoryview(b"x" * 100)[3:50]) == zlib.crc32(b"x" * 47)
