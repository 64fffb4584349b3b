"""Binlog event checksums (producer_outbox/binlog/checksums.py) over binlog files real servers wrote.

Every event of every file of the shared ``realbinlog/`` folder that carries CRC32 checksums
verifies, the FORMAT_DESCRIPTION events of the five files copied while the server was still
writing them (LOG_EVENT_BINLOG_IN_USE_F set) included, as MySQL verifies them. A byte changed
anywhere in an event makes ``verify`` raise the named error; streamed to the change source
(tests/support/realbinlog.py), the tailer stops with that error naming the position, with
both readers, and publishes no row of the damaged event or after it. ``make
test-python-path`` runs the same with ``CACHESYNC_NO_SPEEDUPS=1``; with the compiled path,
mariadb-bin.000001's transaction goes through ``scan_group``/``plain_run``, which leave a
failing event to the per-event path (tests/unit/test_scan_group.py).
"""

from __future__ import annotations

import struct
import zlib

import pytest

from cachesync.producer_outbox.binlog.checksums import (FORMAT_DESCRIPTION, LOG_EVENT_BINLOG_IN_USE_F,
                                                 BinlogChecksumError, verify)
from tests.support import realbinlog as rb
from tests.support.mysqlbinlog import OK_BYTE

CHECKSUMMED = [n for n in rb.names() if rb.RealFile(n, rb.split_events(rb.file_bytes(n))).checksum]
ROWS = frozenset((23, 24, 25, 30, 31, 32))
TABLE_MAP, TRANSACTION_PAYLOAD = 19, 40


def _events(name: str) -> list[tuple[int, bytes]]:
    return rb.split_events(rb.file_bytes(name))


def _flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x04
    return bytes(out)


def test_the_shared_folder_holds_files_with_and_without_checksums():
    assert len(CHECKSUMMED) >= 15 and len(CHECKSUMMED) < len(rb.names())
    in_use = [n for n in CHECKSUMMED if _events(n)[0][1][17] & LOG_EVENT_BINLOG_IN_USE_F]
    # some were copied while the server was writing them, some after it closed them
    assert 0 < len(in_use) < len(CHECKSUMMED), in_use


@pytest.mark.parametrize("name", CHECKSUMMED)
def test_every_event_of_a_real_file_verifies(name):
    for _start, data in _events(name):
        verify(OK_BYTE + data)


def test_the_in_use_flag_is_left_out_of_the_format_descriptions_checksum_only():
    name = next(n for n in CHECKSUMMED if _events(n)[0][1][17] & LOG_EVENT_BINLOG_IN_USE_F)
    fde = _events(name)[0][1]
    assert fde[4] == FORMAT_DESCRIPTION
    verify(OK_BYTE + fde)
    # the same event with the checksum computed over the flag as written also verifies
    # (a server that cleared it before computing)
    verify(OK_BYTE + fde[:-4] + struct.pack("<I", zlib.crc32(fde[:-4])))
    # another event type with that flag bit gets no such allowance
    other = next(d for _s, d in _events(name) if d[4] != FORMAT_DESCRIPTION and not d[17] & 1)
    with pytest.raises(BinlogChecksumError):
        verify(OK_BYTE + _flipped(other, 17)[:17] + bytes([other[17] | 1]) + other[18:])


@pytest.mark.parametrize("at", [0, 4, 13, 17, 19, 40, -5, -1])
def test_a_changed_byte_is_a_named_error(at):
    start, data = _events("mysql-bin.checksum-crc32")[5]
    damaged = _flipped(data, at if at >= 0 else len(data) + at)
    with pytest.raises(BinlogChecksumError) as e:
        verify(OK_BYTE + damaged)
    error = e.value
    assert error.size == len(data) and error.stored != error.computed
    assert "fails its CRC32 checksum" in str(error)
    named = error.at("binlog.000007:1234")
    assert isinstance(named, BinlogChecksumError)
    assert "at binlog.000007:1234" in str(named) and f"{len(data)} bytes" in str(named)


def test_the_one_call_check_agrees_with_computing_the_checksum():
    """verify's shortcut (module comment) against the plain computation, any length."""
    from cachesync.producer_outbox.binlog import checksums
    assert zlib.crc32(b"\0", checksums._PAST_OK_BYTE) == 0
    for size in range(0, 300, 7):
        event = bytes((i * 37 + size) & 0xFF for i in range(19 + size))
        packet = OK_BYTE + event + struct.pack("<I", zlib.crc32(event))
        assert zlib.crc32(packet, checksums._PAST_OK_BYTE) == checksums._RESIDUE
        verify(packet)
        with pytest.raises(BinlogChecksumError):
            verify(packet[:-1] + bytes([packet[-1] ^ 0x80]))


def test_packets_that_are_not_events_are_left_to_the_reader():
    verify(b"")
    err, eof, ok = 0xFF, 0xFE, 0x00        # the first byte of a reply: error, end, event
    verify(bytes([err, 0, 0]) + b" an error packet from the server")
    verify(bytes([eof, 0, 0, 2, 0]))
    verify(bytes([ok]) + bytes([1]) * 10)  # too short to hold a header and a checksum


# -- through the change source, both readers ------------------------------------------------

def _first(name: str, kinds: frozenset) -> int:
    return next(start for start, data in _events(name) if data[4] in kinds)


# (file, the event types whose first one is damaged)
DAMAGED = [
    ("mariadb-bin.000001", ROWS),                       # MariaDB: the compiled run's shape
    ("mariadb-bin.000001", frozenset((TABLE_MAP,))),
    ("vector.binlog", ROWS),                            # MySQL 9.0.1, rows decoded
    ("json.binlog.000001", frozenset((FORMAT_DESCRIPTION,))),   # flag in use set
    ("mysql-bin.compressed", frozenset((TRANSACTION_PAYLOAD,))),
]


@pytest.mark.parametrize("reader", ("fast", "library"))
@pytest.mark.parametrize("name,kinds", DAMAGED)
def test_the_tailer_stops_on_a_damaged_event_naming_its_position(gomysql_reading, name, kinds,
                                                                reader):
    """The first event of ``kinds`` has a byte changed: every row of the file comes at or
    after it, so none may be published; table-level events before it may (tables mapped by
    go-mysql's reading, as in tests/unit/test_realbinlog.py)."""
    start = _first(name, kinds)
    data = dict(_events(name))[start]
    named = rb.named_tables(gomysql_reading[name])
    whole = rb.read_file(name, reader, named)
    damaged = rb.read_file(name, reader, named,
                           replace={start: _flipped(data, len(data) // 2)})
    assert whole.error is None and (whole.rows or whole.tables)
    assert isinstance(damaged.error, BinlogChecksumError), damaged.error
    assert f" at {rb.SERVED_AS}:{start} (type {data[4]}, " in str(damaged.error)
    assert damaged.error.size == len(data)
    assert damaged.rows == []
    assert damaged.tables == whole.tables[:len(damaged.tables)]
    assert len(damaged.tables) < len(whole.tables) or whole.rows
