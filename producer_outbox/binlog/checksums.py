"""Binlog event checksums: an event whose CRC32 does not verify is never read (pure).

With ``binlog_checksum=CRC32`` every event the server sends ends in the CRC32 of its header
and body. The binlog library only logs a mismatch (and only when asked to), and the compiled
paths read the bytes directly, so both readers check each event below them, on the packet as
it arrives (``framing.FramedConnection.next_raw``; ``_speedups.scan_group`` and ``plain_run``
check in C and leave an event that fails to that path). An event that fails is not decoded
and nothing of it is published: ``verify`` raises ``BinlogChecksumError``, a FatalError whose
message names the event (type, size, stored and computed checksums) and, once the reader
adds it (``at``), its binlog position. The bytes were changed on the server's disk or on the
way; a restart reads the same event again from the checkpoint, which stays before it.

A FORMAT_DESCRIPTION event is the exception MySQL makes too: the server sets
LOG_EVENT_BINLOG_IN_USE_F in it while the file is open and clears it when the file is closed,
without rewriting the checksum, which is therefore the checksum of the event with the flag
cleared (``Log_event_footer::event_checksum_test`` clears it before computing).
"""

from __future__ import annotations

import zlib

from cachesync.producer_outbox.binlog.eventtypes import FORMAT_DESCRIPTION
from cachesync.producer_outbox.binlog.packets import BODY, CRC
from cachesync.schema.errors import FatalError

LOG_EVENT_BINLOG_IN_USE_F = 0x1   # common header flag: the file was still being written
_FLAGS = 18                       # the flags' low byte in a packet (OK byte + 17)
# One zlib.crc32 call per event, over the whole packet, without slicing it: the CRC32 of any
# bytes followed by their own CRC32 (little-endian) is this constant, and a crc32 started from
# _PAST_OK_BYTE is back at crc32's own start after the packet's leading 0 (OK) byte.
_RESIDUE = 0x2144DF1C
_PAST_OK_BYTE = 0x0F6A7026        # zlib.crc32(b"\0", _PAST_OK_BYTE) == 0


class BinlogChecksumError(FatalError):
    """A binlog event whose CRC32 does not verify: its bytes are not what the server wrote."""

    def __init__(self, event_type: int, size: int, end_pos: int, stored: int, computed: int,
                 where: str | None = None):
        self.event_type, self.size, self.end_pos = event_type, size, end_pos
        self.stored, self.computed, self.where = stored, computed, where
        at = f" at {where}" if where else (
            f" ending at position {end_pos}" if end_pos else "")
        super().__init__(
            f"binlog event{at} (type {event_type}, {size} bytes) fails its CRC32 checksum "
            f"(stored {stored:#010x}, computed {computed:#010x}): its bytes are not what the "
            "server wrote (damaged on the server's disk or on the way). Nothing of it was "
            "published and the checkpoint stays before it; check the file with `mysqlbinlog "
            "--verify-binlog-checksum` on the server, and the network path")

    def at(self, where: str) -> "BinlogChecksumError":
        """The same error naming the reader's position ``where`` (file:pos before the event)."""
        return BinlogChecksumError(self.event_type, self.size, self.end_pos, self.stored,
                                   self.computed, where)


def verify(raw: bytes) -> None:
    """Raises BinlogChecksumError when the event packet ``raw`` (OK byte, event, CRC32)
    fails its checksum; any other packet (an error or EOF packet, one too short to hold an
    event) is left to the reader."""
    if len(raw) < BODY + CRC or raw[0] != 0 or zlib.crc32(raw, _PAST_OK_BYTE) == _RESIDUE:
        return
    stored = int.from_bytes(raw[-CRC:], "little")
    computed = zlib.crc32(memoryview(raw)[1:-CRC])
    if raw[5] == FORMAT_DESCRIPTION and raw[_FLAGS] & LOG_EVENT_BINLOG_IN_USE_F:
        cleared = bytearray(raw[1:-CRC])
        cleared[_FLAGS - 1] &= ~LOG_EVENT_BINLOG_IN_USE_F
        computed = zlib.crc32(cleared)
        if computed == stored:
            return
    raise BinlogChecksumError(raw[5], len(raw) - 1, int.from_bytes(raw[14:18], "little"),
                              stored, computed)
