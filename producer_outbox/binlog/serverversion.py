"""The server version of a format description, as the binlog library can read it (pure).

python-mysql-replication (1.0.17) reads the server version text of a FORMAT_DESCRIPTION event
as the integers of its dot-separated parts before the first ``-``, and stops with a
ValueError, before the stream's first event, on a version whose parts are not all digits,
such as MySQL 5.1.34sp1's ``5.1.34sp1-enterprise-gpl-advanced-log``. MySQL reads only the
leading digits of each part (``do_server_version_split`` in libbinlogevents: 5, 1, 34), so
``readable`` rewrites the text that way (``5.1.34-enterprise-gpl-advanced-log``), for both
readers (``framing.FramedConnection``), and recomputes the checksum it carries (the stream's
checksum was verified before). Any other packet, a version the library reads as it is, or a
text whose parts do not each start with digits is returned unchanged.
"""

from __future__ import annotations

import re

from cachesync.producer_outbox.binlog.eventtypes import FORMAT_DESCRIPTION
from cachesync.producer_outbox.binlog.packets import BODY, CRC, sealed

_VERSION = slice(BODY + 2, BODY + 2 + 50)     # OK byte, header, binlog version (2), text (50)
_LEADING_DIGITS = re.compile(r"\d+")
_VERSION_PART = re.compile(r"\d+[0-9A-Za-z]*")     # leading digits, then letters or digits


def readable(raw: bytes, checksum: bool) -> bytes:
    """The FORMAT_DESCRIPTION packet ``raw`` with a version text the library can parse."""
    if len(raw) < _VERSION.stop or raw[0] != 0 or raw[5] != FORMAT_DESCRIPTION:
        return raw
    text = raw[_VERSION].split(b"\0")[0].decode("latin-1")
    numbers, dash, rest = text.partition("-")
    parts = numbers.split(".")
    if all(part.isdigit() for part in parts) or not all(_VERSION_PART.fullmatch(p) for p in parts):
        return raw          # read as it is, or not a version text at all: the library decides
    plain = ".".join(_LEADING_DIGITS.match(part).group() for part in parts)
    event = bytearray(raw[:-CRC] if checksum else raw)
    event[_VERSION] = (plain + dash + rest).encode("latin-1")[:50].ljust(50, b"\0")
    return sealed(event, checksum)
