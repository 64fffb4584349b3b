"""Compressed binlog events turned back into the plain events they stand for (pure).

* MySQL ``binlog_transaction_compression=ON``: a TRANSACTION_PAYLOAD_EVENT (40) holds every
  event of one transaction after its GTID (BEGIN, table maps, rows, XID), zstd-compressed,
  after a header of (type, length, value) fields: payload size (1), compression type (2:
  0 zstd, 255 none), uncompressed size (3), end mark (0). Type and length are
  length-encoded integers, and so is the value inside its ``length`` bytes (``fc c0 03``
  is 960: MySQL's Transaction_payload_event writes every field with net_store_length). The inner events carry no
  checksum and end position 0 (MySQL copies them from the transaction cache).
* MariaDB ``log_bin_compress=ON``: QUERY_COMPRESSED_EVENT (165) is a query event whose
  statement text is compressed; the compressed row events (166-168 for the v1 layout,
  169-171 for v2) are row events whose row data, after the column bitmaps, is compressed.
  A compressed part starts with one byte 0x80 | n (algorithm 0 = zlib in bits 4-6), then
  the uncompressed length in n bytes, big-endian, then the zlib stream.

``expand`` returns the packet payloads (OK byte, 19-byte header, body, CRC32 when the
stream carries checksums) the readers then read like any other, so the inner events go
through the same table-map, XA, statement and packing logic as uncompressed ones.
Raises ``CompressedEventError`` (a ValueError) for bytes it cannot decompress.
"""

from __future__ import annotations

import struct
import zlib

import zstandard

from cachesync.producer_outbox.binlog.eventtypes import (EXPANDED_TYPES, TRANSACTION_PAYLOAD,
                                                         length_encoded)
from cachesync.producer_outbox.binlog.packets import BODY, COMMON_HEADER, CRC, reseal

_QUERY, _QUERY_COMPRESSED = 2, 165
_HEADER = COMMON_HEADER.size
_ZSTD, _NONE = 0, 255
# compressed type -> (plain type, post-header length, extra-data length field follows)
_MARIADB = {165: (_QUERY, 13, False),
            166: (23, 8, False), 167: (24, 8, False), 168: (25, 8, False),
            169: (30, 10, True), 170: (31, 10, True), 171: (32, 10, True)}
_UPDATES = frozenset((167, 170))


class CompressedEventError(ValueError):
    """A compressed event whose bytes cannot be decompressed or split exactly."""


def expandable(raw: bytes) -> bool:
    """Whether the packet ``raw`` is a compressed event ``expand`` turns into plain ones."""
    return len(raw) > 5 and raw[0] == 0 and raw[5] in EXPANDED_TYPES


def expand(raw: bytes, checksum: bool) -> list[bytes]:
    """The plain events a compressed event packet stands for, as packets (module doc)."""
    body = raw[BODY:len(raw) - CRC] if checksum else raw[BODY:]
    if raw[5] == TRANSACTION_PAYLOAD:
        return _payload_events(raw, body, checksum)
    return [_mariadb_event(raw, body, checksum)]


def _payload_events(raw: bytes, body: bytes, checksum: bool) -> list[bytes]:
    fields, data = _payload_fields(body)
    kind = fields.get(2, _ZSTD)
    if kind == _ZSTD:
        try:
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except zstandard.ZstdError as e:
            raise CompressedEventError(f"transaction payload: zstd: {e}") from e
    elif kind != _NONE:
        raise CompressedEventError(
            f"transaction payload compressed with type {kind}, which cachesync cannot "
            "decompress (it reads zstd): set binlog_transaction_compression=OFF")
    if 3 in fields and fields[3] != len(data):
        raise CompressedEventError(f"transaction payload: {len(data)} bytes uncompressed, "
                                   f"the event says {fields[3]}")
    outer_end = struct.unpack_from("<I", raw, 14)[0]
    events, at = [], 0
    while at < len(data):
        if len(data) - at < _HEADER:
            raise CompressedEventError("transaction payload ends inside an event header")
        size = struct.unpack_from("<I", data, at + 9)[0]
        if size < _HEADER or at + size > len(data):
            raise CompressedEventError(f"transaction payload: inner event of {size} bytes at "
                                       f"{at} of {len(data)}")
        events.append(data[at:at + size])
        at += size
    # inner events end at position 0 (the position stays at the payload's start) except the
    # last, which ends where the payload ends: a checkpoint after it is after the transaction
    return [reseal(b"\x00" + e, checksum, outer_end if i == len(events) - 1 else 0)
            for i, e in enumerate(events)]


def _payload_fields(body: bytes) -> tuple[dict[int, int], bytes]:
    fields, at = {}, 0
    while True:
        if at >= len(body):
            raise CompressedEventError("transaction payload header has no end mark")
        kind, at = _lenenc(body, at)
        if kind == 0:
            return fields, body[at:]
        length, at = _lenenc(body, at)
        if at + length > len(body):
            raise CompressedEventError("transaction payload header field cut short")
        value, used = _lenenc(body[at:at + length], 0) if length else (0, 0)
        if used != length:
            raise CompressedEventError(f"transaction payload header field {kind} of "
                                       f"{length} bytes holds a {used}-byte value")
        fields[kind] = value
        at += length


def _mariadb_event(raw: bytes, body: bytes, checksum: bool) -> bytes:
    etype = raw[5]
    plain, post_header, extra = _MARIADB[etype]
    at = post_header
    if etype == _QUERY_COMPRESSED:
        db_len, status_len = body[8], struct.unpack_from("<H", body, 11)[0]
        at += status_len + db_len + 1
    else:
        if extra:
            at += struct.unpack_from("<H", body, 8)[0] - 2
        columns, at = _lenenc(body, at)
        at += ((columns + 7) >> 3) * (2 if etype in _UPDATES else 1)
    packet = bytearray(raw[:BODY])
    packet[5] = plain
    return reseal(packet + body[:at] + _zlib_part(body[at:]), checksum)


def _zlib_part(data: bytes) -> bytes:
    if not data:
        raise CompressedEventError("compressed event without its compressed part")
    width, algorithm = data[0] & 0x07, (data[0] >> 4) & 0x07
    if algorithm != 0:
        raise CompressedEventError(f"compressed event with algorithm {algorithm} (MariaDB "
                                   "writes zlib, 0): set log_bin_compress=OFF")
    size = int.from_bytes(data[1:1 + width], "big")
    try:
        out = zlib.decompress(data[1 + width:])
    except zlib.error as e:
        raise CompressedEventError(f"compressed event: zlib: {e}") from e
    if len(out) != size:
        raise CompressedEventError(f"compressed event: {len(out)} bytes uncompressed, "
                                   f"the event says {size}")
    return out


def _lenenc(data: bytes, at: int) -> tuple[int, int]:
    try:
        return length_encoded(data, at)
    except ValueError as e:
        raise CompressedEventError(str(e)) from None
