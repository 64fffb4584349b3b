"""JSON encoding of row values that survives a round trip.

Binlog rows carry bytes, Decimals, dates and times; JSON has none of them.
Each is written as a one-key object tagged with ``$``-type so the consumer sees
exactly the value the tailer saw (key rendering depends on it).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any

from cachesync.schema import keytext

_TAG_BYTES = "$b64"
_TAG_DECIMAL = "$dec"
_TAG_DATETIME = "$dt"
_TAG_DATE = "$date"
_TAG_TIME = "$time"
_TAG_TIMEDELTA = "$td"
_TAG_SET = "$set"


def to_json(value: Any) -> Any:
    """Return a JSON-safe form of one column value; raises TypeError if unsupported."""
    if type(value) is dt.datetime:         # the commonest tagged type: no isinstance chain
        return {_TAG_DATETIME: value.isoformat()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {_TAG_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {_TAG_DECIMAL: str(value)}
    if isinstance(value, dt.datetime):
        return {_TAG_DATETIME: value.isoformat()}
    if isinstance(value, dt.date):
        return {_TAG_DATE: value.isoformat()}
    if isinstance(value, dt.time):
        return {_TAG_TIME: value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {_TAG_TIMEDELTA: value.total_seconds()}
    if isinstance(value, (set, frozenset)):
        return {_TAG_SET: sorted(value)}
    if isinstance(value, dict):  # MySQL JSON column
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    raise TypeError(f"cannot encode column value of type {type(value).__name__}")


def from_json(value: Any) -> Any:
    """Inverse of :func:`to_json`; raises ValueError on a malformed tag."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, payload), = value.items()
        decoder = _DECODERS.get(tag)
        if decoder is not None:
            return decoder(payload)
    return {k: from_json(v) for k, v in value.items()}


_DECODERS = {
    _TAG_BYTES: lambda p: base64.b64decode(p.encode("ascii"), validate=True),
    _TAG_DECIMAL: decimal.Decimal,
    _TAG_DATETIME: dt.datetime.fromisoformat,
    _TAG_DATE: dt.date.fromisoformat,
    _TAG_TIME: dt.time.fromisoformat,
    _TAG_TIMEDELTA: lambda p: dt.timedelta(seconds=p),
    _TAG_SET: frozenset,
}


def canonical_text(value: Any) -> str:
    """Render one value as key text: the server's own text for the column (the tailer made
    the values say it, see ``cachesync.schema.keytext``), the same on every side.

    Documented forms where the server has none: bytes (BINARY, VARBINARY, BLOB, GEOMETRY)
    become ``0x``-hex, a BIT its unsigned number. Raises ValueError for NULL.
    """
    kind = type(value)
    if kind is str:                        # the common key columns: no isinstance chain
        return value
    if kind is int:
        return str(value)
    if value is None:
        raise ValueError("NULL has no key text")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return keytext.double_text(value)
    if isinstance(value, decimal.Decimal):
        return keytext.decimal_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "0x" + bytes(value).hex()
    if isinstance(value, dt.datetime):
        return keytext.datetime_text(value, 6 if value.microsecond else 0)
    if isinstance(value, dt.timedelta):
        return keytext.time_text(value, 6 if value.microseconds else 0)
    if isinstance(value, (set, frozenset)):   # events of older tailers: a stable order
        return ",".join(sorted(value))
    if isinstance(value, (dict, list)):       # MySQL's binary JSON, as MySQL prints it
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "),
                          default=canonical_text)
    return str(value)
