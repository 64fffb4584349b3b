"""Format descriptions whose server version the binlog library cannot parse
(producer_outbox/binlog/serverversion.py), on the ones real servers wrote (shared realbinlog/).

MySQL 5.1.34sp1 wrote ``5.1.34sp1-enterprise-gpl-advanced-log`` (canal-parse-mysql-bin.*);
it is read as MySQL reads it (5.1.34). Every other file's format description is left as it
is. Streaming those files end to end is tests/unit/test_realbinlog.py.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import FormatDescriptionEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from cachesync.producer_outbox.binlog.checksums import verify
from cachesync.producer_outbox.binlog.serverversion import FORMAT_DESCRIPTION, readable
from tests.support import realbinlog as rb


def _fde(name: str) -> tuple[bytes, bool]:
    real = rb.RealFile(name, rb.split_events(rb.file_bytes(name)))
    return b"\x00" + real.events[0][1], real.checksum


class _Connection:
    """The control connection as the library's event classes ask it."""

    charset = "utf8"

    def _get_dbms(self) -> str:
        return "mysql"


def _library_reads(raw: bytes, checksum: bool) -> FormatDescriptionEvent:
    """The library's reading of the format description packet ``raw``."""
    wrapper = BinLogPacketWrapper(MysqlPacket(raw, "utf8"), {}, _Connection(), (0, 0, 0), checksum,
                                  frozenset((FormatDescriptionEvent,)), None, None, None, None,
                                  False, False, False, False, False, False, None)
    return wrapper.event


@pytest.mark.parametrize("name", ["canal-parse-mysql-bin.000001", "canal-parse-mysql-bin.000002"])
def test_a_version_with_letters_in_a_part_is_read_by_its_leading_digits(name):
    raw, checksum = _fde(name)
    with pytest.raises(ValueError):
        _library_reads(raw, checksum)
    event = _library_reads(readable(raw, checksum), checksum)
    assert event.mysql_version == (5, 1, 34)
    assert event.mysql_version_str == "5.1.34-enterprise-gpl-advanced-log"
    assert len(readable(raw, checksum)) == len(raw)


def test_the_checksum_is_recomputed_when_the_stream_carries_them():
    raw, _ = _fde("canal-parse-mysql-bin.000002")
    with_crc = raw + struct.pack("<I", zlib.crc32(raw[1:]))      # as if CRC32 were on
    out = readable(with_crc, True)
    verify(out)
    assert out[-4:] != with_crc[-4:] and out[:-4] == readable(raw, False)


@pytest.mark.parametrize("name", [n for n in rb.names() if not n.startswith("canal-")])
def test_every_other_real_format_description_is_left_as_it_is(name):
    raw, checksum = _fde(name)
    assert raw[5] == FORMAT_DESCRIPTION
    assert readable(raw, checksum) is raw


def test_other_packets_and_texts_that_are_no_version_are_left_as_they_are():
    fde, _ = _fde("canal-parse-mysql-bin.000002")
    for text in (b"\x0f" * 50, b"sp1.5.34-log", b"5..1-log", b"5.1.3 4-log"):
        other = fde[:22] + text.ljust(50, b"\0") + fde[72:]
        assert readable(other, False) is other
    for raw in (b"", b"\xff\x01\x02", b"\x00" + bytes(19), b"\x00" + bytes(4) + b"\x13" + bytes(80)):
        assert readable(raw, False) is raw
