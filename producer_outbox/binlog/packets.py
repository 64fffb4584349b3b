"""A binlog event packet as the dump thread sends it, and how a rewritten one is sealed (pure).

A packet is the OK byte (0), the event's 19-byte common header (timestamp, type, server id,
size, end position, flags), its body and, with ``binlog_checksum=CRC32``, the CRC32 of
header and body. Where cachesync rewrites an event for the binlog library (a table map, a
server version, the plain events a compressed one stands for), ``reseal`` makes the header's
size match the new bytes and appends their checksum, as the server would have written them.
"""

from __future__ import annotations

import struct
import zlib

# the common header after the OK byte: timestamp, type, server id, size, end position, flags
COMMON_HEADER = struct.Struct("<IBIIIH")
BODY = 1 + COMMON_HEADER.size       # where the body starts: OK byte + common header
CRC = 4                             # the CRC32 ending each event of a checksummed stream
_U32 = struct.Struct("<I")
_SIZE_AT, _END_AT = 10, 14          # in the packet: OK byte, timestamp (4), type, server (4)


def reseal(packet: bytes | bytearray, checksum: bool, end: int | None = None) -> bytes:
    """``packet`` (OK byte, header, body; no checksum) with its header's size fixed, its end
    position set to ``end`` (None: kept), and its CRC32 appended when the stream carries
    checksums."""
    event = bytearray(packet)
    _U32.pack_into(event, _SIZE_AT, len(event) - 1 + (CRC if checksum else 0))
    if end is not None:
        _U32.pack_into(event, _END_AT, end)
    return sealed(event, checksum)


def sealed(packet: bytes | bytearray, checksum: bool) -> bytes:
    """``packet`` (no checksum) with its CRC32 appended when the stream carries checksums;
    its header as it is (a rewrite that kept the event's length)."""
    if not checksum:
        return bytes(packet)
    return bytes(packet) + _U32.pack(zlib.crc32(memoryview(packet)[1:]))
