"""Compressed events expanded, every event type ruled on, tagged GTID events parsed (pure).

MySQL transaction payloads are those real MySQL 8.0.27, 8.0.28 and 8.0.32 servers wrote, read
from the shared test data folder (recorded/ and realbinlog/, sources in their READMEs); what
they expand into is compared with go-mysql's reading of the same files (the
``gomysql_reading`` fixture, tests/support/gomysql.py). MariaDB's compressed events are built
from MariaDB's documented layout here and read from the real MariaDB in
tests/integration/test_binlog_compression.py. Everything else is built here from the
documented formats (tests/support/mysqlbinlog.py).
"""

from __future__ import annotations

import struct
import zlib

import pytest
import zstandard

from cachesync.producer_outbox.binlog.compressed import CompressedEventError, expand, expandable
from cachesync.producer_outbox.binlog.eventtypes import (DECODED, EXPANDED, NO_ROWS, TABLE_LEVEL, TYPES,
                                                  event_type, is_own)
from cachesync.producer_outbox.binlog.framing import UndecodedEvent, own_event, parse_tagged_gtid
from cachesync.schema.gtid import MYSQL, Gtid
from tests.support import mysqlbinlog as mb
from tests.support.mysqlbinlog import OK_BYTE
from tests.support.binlog import UUID
from tests.support.shared import recorded, shared_file

ZSTD_MAGIC = zstandard.FRAME_HEADER      # a zstd frame's first bytes (RFC 8878)
COMPRESSED_FILES = ["mysql-bin.compressed", "transaction_compression.000001"]


def mysql_8027():
    """(zstd payload, inner event types, uncompressed size) of the payload MySQL 8.0.27
    wrote (recorded/, its README names the source)."""
    data = recorded("mysql-8.0.27-zstd-payload.json")
    payload = data["MYSQL_8027_ZSTD_PAYLOAD"]
    return payload, data["MYSQL_8027_INNER_TYPES"], len(_decompressed(payload))


def _decompressed(data: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


def packet(etype: int, body: bytes, end: int = 1000, checksum: bool = True, flags: int = 0):
    return OK_BYTE + mb.event(etype, body, end, checksum=checksum, flags=flags)


def payload_body(data: bytes, size: int, kind: int = 0) -> bytes:
    return mb.payload_header(len(data), size, kind) + data


def check_packet(raw: bytes, checksum: bool) -> None:
    """OK byte, a header whose size is the event's, a valid CRC32 (when on)."""
    assert raw[0] == 0
    size = struct.unpack_from("<I", raw, 10)[0]
    assert size == len(raw) - 1
    if checksum:
        assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[1:-4]) & 0xFFFFFFFF


@pytest.mark.parametrize("checksum", [True, False])
def test_a_recorded_mysql_payload_expands_into_its_events(checksum):
    payload, inner, size = mysql_8027()
    raw = packet(mb.TRANSACTION_PAYLOAD, payload_body(payload, size), end=5000,
                 checksum=checksum)
    assert expandable(raw)
    events = expand(raw, checksum)
    assert tuple(e[5] for e in events) == inner
    for e in events:
        check_packet(e, checksum)
    # the position stays before the transaction until its last event (XID), which ends
    # where the payload ends
    ends = [struct.unpack_from("<I", e, 14)[0] for e in events]
    assert ends == [0] * (len(inner) - 1) + [5000]


def _real_payloads(name: str) -> list[bytes]:
    """The TRANSACTION_PAYLOAD_EVENTs of a binlog file a real server wrote, as packets."""
    data = shared_file("realbinlog", name).read_bytes()
    out, at = [], 4
    while at < len(data):
        size = struct.unpack_from("<I", data, at + 9)[0]
        if data[at + 4] == mb.TRANSACTION_PAYLOAD:
            out.append(OK_BYTE + data[at:at + size])
        at += size
    return out


@pytest.mark.parametrize("name", COMPRESSED_FILES)
def test_payloads_real_servers_wrote_expand_as_go_mysql_expands_them(gomysql_reading, name):
    """MySQL 8.0.28 and 8.0.32 (SOURCES.md): each payload's events, by type, are those
    go-mysql expands it into; each is a whole event with its CRC32."""
    payloads = _real_payloads(name)
    expanded = [expand(raw, True) for raw in payloads]
    assert [[e[5] for e in events] for events in expanded] == gomysql_reading[name]["payloads"]
    assert payloads and all(expanded)
    for e in (e for events in expanded for e in events):
        check_packet(e, True)


@pytest.mark.parametrize("name", COMPRESSED_FILES)
def test_the_test_writer_writes_the_payload_header_real_servers_wrote(name):
    """The header fields ``mysqlbinlog.payload`` writes are the bytes the real servers wrote
    before their payload (fields and order)."""
    (raw,) = _real_payloads(name)
    body = raw[1 + mb.HEADER_LEN:-4]               # after the OK byte and header, before CRC32
    at = body.index(ZSTD_MAGIC)
    data = body[at:]
    assert body[:at] == mb.payload_header(len(data), len(_decompressed(data)))


@pytest.mark.parametrize("name", ["vector.binlog", "binlog_transaction_with_GTID_TAG.000001"])
def test_the_test_writer_declares_the_post_header_lengths_mysql_9_servers_wrote(name):
    data = shared_file("realbinlog", name).read_bytes()
    size = struct.unpack_from("<I", data, 4 + 9)[0]
    body = data[4 + mb.HEADER_LEN:4 + size - 5]     # up to the checksum algorithm and CRC32
    assert body[57:] == mb.POST_HEADER_LENGTHS


def test_a_built_payload_gives_back_the_plain_events():
    table = mb.Table(7, "app", "users", (mb.Column("id", mb.LONG),))
    inner = mb.row_transaction(table, mb.WRITE_ROWS, [(1,), (2,)], 9)
    raw = packet(mb.TRANSACTION_PAYLOAD, mb.payload(inner), end=777)
    events = expand(raw, True)
    plain = [mb.event(t, b, 0) for t, b in inner]
    plain[-1] = mb.event(inner[-1][0], inner[-1][1], 777)
    assert [e[1:] for e in events] == plain


@pytest.mark.parametrize("body, message", [
    (lambda: payload_body(b"not zstd at all", 10), "zstd"),
    (lambda: payload_body(b"xx", 2, kind=1), "binlog_transaction_compression=OFF"),
    (lambda: mb._field(1, 3), "no end mark"),
    # field 3 declares 2 value bytes; its length-encoded value needs 3
    (lambda: mb.lenenc(3) + mb.lenenc(2) + mb.lenenc(1000)[:2], "cut short"),
    # field 3 declares 3 value bytes; its length-encoded value is 1 byte
    (lambda: mb.lenenc(3) + mb.lenenc(3) + mb.lenenc(5) + b"\0\0" + b"\0", "holds a 1-byte value"),
])
def test_a_payload_that_cannot_be_expanded_exactly_is_an_error(body, message):
    with pytest.raises(CompressedEventError, match=message):
        expand(packet(mb.TRANSACTION_PAYLOAD, body()), True)


def test_a_payload_whose_size_field_is_not_its_size_is_an_error():
    payload, _, size = mysql_8027()
    with pytest.raises(CompressedEventError, match=f"the event says {size - 1}"):
        expand(packet(mb.TRANSACTION_PAYLOAD, payload_body(payload, size - 1)), True)


def test_a_payload_with_a_truncated_inner_event_is_an_error():
    data = mb.event(mb.XID, mb.xid(1), 0, checksum=False)[:-3]
    body = payload_body(zstandard.ZstdCompressor().compress(data), len(data))
    with pytest.raises(CompressedEventError):
        expand(packet(mb.TRANSACTION_PAYLOAD, body), True)


def mariadb_compressed(data: bytes) -> bytes:
    """MariaDB's compressed form (log_event.cc binlog_buf_compress): 0x80 | n, the size in n
    bytes big-endian, the zlib stream."""
    width = max(1, (len(data).bit_length() + 7) // 8)
    return bytes([0x80 | width]) + len(data).to_bytes(width, "big") + zlib.compress(data)


def test_a_mariadb_compressed_query_expands_to_the_query():
    plain = mb.query("TRUNCATE TABLE users", "app")
    head = plain[:13 + 3 + 1]           # post-header, db, NUL
    raw = packet(165, head + mariadb_compressed(b"TRUNCATE TABLE users"), end=321)
    (out,) = expand(raw, True)
    assert out == packet(mb.QUERY, plain, end=321)


@pytest.mark.parametrize("compressed, plain, v2", [
    (166, 23, False), (167, 24, False), (168, 25, False),
    (169, 30, True), (170, 31, True), (171, 32, True)])
def test_mariadb_compressed_rows_expand_to_rows_events(compressed, plain, v2):
    table = mb.Table(7, "app", "users", (mb.Column("id", mb.LONG), mb.Column("e", mb.VARCHAR, 40)))
    images = [((1, "a"), (1, "b"))] if plain in (24, 31) else [(1, "a"), (2, "b")]
    body = table.rows_body(31 if plain in (24, 31) else 30, images)
    if not v2:                      # v1: no extra-data length after the flags
        body = body[:8] + body[10:]
    rows_at = (10 if v2 else 8) + 1 + (2 if plain in (24, 31) else 1)
    raw = packet(compressed, body[:rows_at] + mariadb_compressed(body[rows_at:]), end=99)
    (out,) = expand(raw, True)
    assert out == packet(plain, body, end=99)


def test_a_mariadb_event_with_another_algorithm_names_the_setting():
    # the compressed-body header byte: the flag (0x80), algorithm 1 (not zlib's 0), a 1-byte
    # length; then that length and the body
    header = 0x80 | 1 << 4 | 1
    raw = packet(165, mb.query("", "a")[:17] + bytes([header, 5]) + b"xxxxx")
    with pytest.raises(CompressedEventError, match="log_bin_compress=OFF"):
        expand(raw, True)


# -- the rule over event types ----------------------------------------------------------

def test_every_known_type_has_an_outcome_and_only_payloads_expand():
    assert set(TYPES) >= set(range(0, 43)) | set(range(160, 172))
    assert {t.code for t in TYPES.values() if t.outcome == EXPANDED} == {40, *range(165, 172)}
    assert {t.outcome for t in TYPES.values()} == {DECODED, EXPANDED, NO_ROWS, TABLE_LEVEL}


@pytest.mark.parametrize("code, flags, outcome, own", [
    (30, 0, DECODED, False),              # rows: the library's
    (42, 0, DECODED, True),               # tagged GTID: cachesync's
    (39, 0, DECODED, False),              # partial JSON update: the library's, diffs applied
    (20, 0, TABLE_LEVEL, True),           # pre-GA rows: never decoded
    (26, 0, TABLE_LEVEL, True),           # incident: the primary lost changes
    (29, 0x80, NO_ROWS, False),           # rows query (ignorable)
    (99, 0, TABLE_LEVEL, True),           # a type no server wrote yet: never skipped
    (99, 0x80, NO_ROWS, False),           # ... unless the server says it may be ignored
    (172, 0, TABLE_LEVEL, True),
])
def test_the_rule_over_event_types(code, flags, outcome, own):
    assert event_type(code, flags).outcome == outcome
    assert is_own(code, flags) is own


def test_an_undecoded_rows_event_names_its_table_id():
    flags, extra_len = (1).to_bytes(2, "little"), (2).to_bytes(2, "little")
    body = (1234).to_bytes(6, "little") + flags + extra_len + b"rest"
    event = own_event(packet(20, body, end=4321), True)
    assert event == UndecodedEvent(20, "PRE_GA_WRITE_ROWS_EVENT", 1234, 1_700_000_000, 1, 4321)
    unknown = own_event(packet(99, b"whatever", end=50), True)
    assert (unknown.table_id, unknown.name) == (None, "unknown event type 99")


@pytest.mark.parametrize("tag, gno", [("batch", 5), ("t", 1), ("a_long_tag_" * 2, 1 << 40)])
def test_a_tagged_gtid_event_is_parsed(tag, gno):
    event = own_event(packet(mb.GTID_TAGGED, mb.tagged_gtid(UUID, tag, gno), end=88), True)
    assert event.parsed == Gtid(MYSQL, f"{UUID}:{tag}", gno)
    assert (event.gtid, event.log_pos) == (f"{UUID}:{tag}:{gno}", 88)


def test_a_tagged_gtid_event_of_another_version_is_refused():
    with pytest.raises(ValueError):
        tagged = mb.tagged_gtid(UUID, "x", 1)
        parse_tagged_gtid(bytes([tagged[0] + 1]) + tagged[1:])   # the next version


def test_a_table_map_read_again_is_made_readable_as_the_first_time():
    """The connection remembers per table-map body whether ``tablemaps.readable`` rewrites
    it: a MySQL 9 map with a VECTOR column (real bytes) is rewritten every time it comes,
    an ordinary one is passed on as it is."""
    from cachesync.producer_outbox.binlog.framing import FramedConnection
    from cachesync.producer_outbox.binlog.tablemaps import readable
    from tests.support.realbinlog import file_bytes, split_events
    maps = [b"\0" + e for _, e in split_events(file_bytes("vector.binlog")) if e[4] == mb.TABLE_MAP]
    ordinary = b"\0" + mb.event(mb.TABLE_MAP, mb.Table(7, "app", "t", (
        mb.Column("id", mb.LONG),)).map_body(), log_pos=300)
    conn = object.__new__(FramedConnection)
    conn.checksum = True
    assert maps and all(readable(m, True) != m for m in maps)
    for raw in maps + maps:
        assert conn._readable_map(raw) == readable(raw, True)
    assert conn._readable_map(ordinary) is ordinary and conn._readable_map(ordinary) is ordinary
