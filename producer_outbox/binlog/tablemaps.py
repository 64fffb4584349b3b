"""Table maps the binlog library can read: newer metadata made readable before it sees them (pure).

python-mysql-replication (1.0.17) knows the optional-metadata types of MySQL 8.0 (1 to 12)
and the column types before MySQL 9. A table map of a newer server stops it, even for a table
no mapping names: an optional-metadata type it does not know raises ValueError, and a
``VECTOR`` column (type 242, MySQL 9.0) has a metadata byte it does not read, which shifts
everything after it. ``readable`` returns the table-map packet rewritten as a reader that
follows MySQL's format would read it, for both readers (``framing.FramedConnection``):

* optional metadata is a list of (type, length-encoded length, value) fields: MySQL's format
  lets a reader skip the types it does not know (``Table_map_log_event`` in
  libs/mysql/binlog/event/rows_event.h; go-mysql's ``decodeOptionalMeta`` and Debezium's
  ``TableMapEventMetadataDeserializer`` skip them too), so fields of types above 12 (such
  as 13, the VECTOR dimensionality of MySQL 9.0) are dropped;
* a ``VECTOR`` column is stored as a BLOB is (its metadata the length's byte count, 4; the
  value that length, then the bytes), so it is declared as a GEOMETRY column, which the
  library reads the same way as bytes, without a character set: its value is its bytes.

Any other packet, or one these rules do not need to change, is returned as it is. Bytes
that do not parse as a table map are returned as they are too: the library's reading then
raises its decode error.
"""

from __future__ import annotations

from cachesync.producer_outbox.binlog.eventtypes import TABLE_MAP, length_encoded
from cachesync.producer_outbox.binlog.packets import BODY, CRC, reseal

VECTOR, GEOMETRY = 242, 255
LAST_KNOWN_METADATA = 12        # VISIBILITY: the last optional-metadata type the library reads
_POST_HEADER = 8                # table id (6), flags (2)


def readable(raw: bytes, checksum: bool) -> bytes:
    """The table-map packet ``raw`` as the library can read it (module doc)."""
    try:
        parts = _parts(raw, checksum)
    except (IndexError, ValueError):
        return raw
    if parts is None:
        return raw
    head, types, middle, fields = parts
    kept = [f for f in fields if f[0] <= LAST_KNOWN_METADATA]
    if VECTOR not in types and len(kept) == len(fields):
        return raw
    types = bytes(GEOMETRY if t == VECTOR else t for t in types)
    return reseal(head + types + middle + b"".join(f[1] for f in kept), checksum)


def _parts(raw: bytes, checksum: bool):
    """(bytes up to the column types, the types, the bytes up to the optional metadata, the
    optional metadata fields as (type, their bytes)), or None for another packet."""
    if len(raw) <= BODY or raw[0] != 0 or raw[5] != TABLE_MAP:
        return None
    end = len(raw) - (CRC if checksum else 0)
    at = BODY + _POST_HEADER
    at += 1 + raw[at] + 1                   # schema name and its NUL
    at += 1 + raw[at] + 1                   # table name and its NUL
    count, at = length_encoded(raw, at)
    types = raw[at:at + count]
    head, at = raw[:at], at + count
    meta_len, meta_at = length_encoded(raw, at)
    optional = meta_at + meta_len + (count + 7) // 8
    if len(types) != count or optional > end:
        return None
    middle, fields, at = raw[at:optional], [], optional
    while at < end:
        kind = raw[at]
        length, value_at = length_encoded(raw, at + 1)
        if value_at + length > end:
            return None
        fields.append((kind, raw[at:value_at + length]))
        at = value_at + length
    return head, types, middle, fields
