"""The server's own text for each MySQL/MariaDB type, and row values made to render it.

An application builds cache keys from what its queries return; cachesync builds
them from the binlog. Both must give the same text, so the rule is: a key field
renders what the server returns for the column read as text (``CAST(col AS
CHAR)``, the text protocol's value). python-mysql-replication decodes some types
into values whose ``str`` differs from that text (a SET is a Python set, a
BINARY(n) loses its trailing pad bytes, a FLOAT is widened to a double, a
DATETIME(6) of a whole second drops its fraction, TIME is a timedelta, YEAR 0 is
1900, BIT is a string of '0'/'1'). The
tailer therefore passes every row image through :func:`key_values`, with one
:class:`ColumnSpec` per column built from the table map's metadata, before the
event is encoded; consumer, replay and explain then only see values whose
:func:`cachesync.schema.values.canonical_text` is the server's text.

Where the server has no text (binary strings, BIT, GEOMETRY) the forms are fixed
here and documented in the key-text table of the docs. MariaDB's INET4, INET6 and
UUID reach the binlog as BINARY(4/16); the tailer learns their type from the table's
definition (``producer_outbox.decode.servertypes``) and renders the server's text.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from cachesync.schema.sqlnames import quote

# Column kinds whose decoded value is converted (every other kind is left as decoded).
FLOAT, YEAR, DATETIME, TIMESTAMP, TIME = "float", "year", "datetime", "timestamp", "time"
BINARY, VARBINARY, SET, BIT = "binary", "varbinary", "set", "bit"
# MariaDB types the binlog carries as BINARY(4/16) (their in-memory bytes: a UUID in text
# order, not the segment-swapped order it is stored in); the table's definition names them
INET4, INET6, UUID = "inet4", "inet6", "uuid"
TEXT_FORM_TYPES = {INET4: 4, INET6: 16, UUID: 16}     # type -> bytes in the binlog
KINDS = frozenset({FLOAT, YEAR, DATETIME, TIMESTAMP, TIME, BINARY, VARBINARY, SET, BIT,
                   *TEXT_FORM_TYPES})

# DOUBLE text: fixed notation while the decimal point sits within this many digits of
# the first significant one, scientific beyond (what MariaDB's CAST prints).
_FIXED_MAX_DECPT = 15
_FIXED_MIN_DECPT = -14
FLOAT_DIGITS = 6                     # FLT_DIG: the server prints FLOAT to 6 significant digits
_EPOCH = dt.datetime(1970, 1, 1)     # a TIMESTAMP of 0 seconds is the zero timestamp
_EMPTY_SET = "empty set"             # python-mysql-replication's none_source of an empty SET


@dataclass(frozen=True)
class ColumnSpec:
    """What rendering one column needs from the table map: its kind and type parameters."""

    name: str
    kind: str                        # one of KINDS
    fsp: int = 0                     # DATETIME/TIMESTAMP/TIME fractional digits
    length: int = 0                  # BINARY(n): n bytes
    members: tuple[str, ...] = ()    # SET members in column-definition order


def key_values(row: Mapping[str, Any], none_sources: Mapping[str, str],
               specs: Sequence[ColumnSpec]) -> dict:
    """A copy of ``row`` whose values render the server's text; ``specs`` name the columns
    to convert (the others are copied as they are). Raises ValueError on a value its kind
    cannot hold (a corrupt event)."""
    out = dict(row)
    for spec in specs:
        if spec.name not in out:
            continue
        value = out[spec.name]
        if value is None:
            if spec.kind == SET and none_sources.get(spec.name) == _EMPTY_SET:
                out[spec.name] = ""          # the empty set is '' on the server, not NULL
            continue
        out[spec.name] = _CONVERT[spec.kind](value, spec)
    return out


# -- per kind ----------------------------------------------------------------------------

def _float(value: float, spec: ColumnSpec) -> float:
    """The double whose text is the FLOAT's 6 significant digits (1.1, not 1.100000023841858)."""
    return float(float_text(value))


def _year(value: Any, spec: ColumnSpec) -> Any:
    # The binlog stores YEAR as year - 1900, and YEAR 0 ('0000') as 0; 1900 is no YEAR.
    return "0000" if value == 1900 else value


def _datetime(value: Any, spec: ColumnSpec) -> Any:
    if isinstance(value, str):           # a zero or zero-part date, already its text
        return value
    return datetime_text(value, spec.fsp) if spec.fsp else value


def _timestamp(value: Any, spec: ColumnSpec) -> Any:
    if value == _EPOCH:                  # TIMESTAMP's range starts at 1970-01-01 00:00:01
        return zero_datetime_text(spec.fsp)
    return _datetime(value, spec)


def _time(value: Any, spec: ColumnSpec) -> Any:
    return time_text(value, spec.fsp) if isinstance(value, dt.timedelta) else value


def _binary(value: Any, spec: ColumnSpec) -> bytes:
    # The binlog strips BINARY(n)'s trailing 0x00 pad; the stored value has n bytes.
    raw = _bytes(value, spec)
    return raw + b"\0" * (spec.length - len(raw))


def _bytes(value: Any, spec: ColumnSpec) -> bytes:
    if isinstance(value, str):           # the library decodes an empty binary value to ''
        if value:
            raise ValueError(f"column {spec.name!r}: binary value decoded as text")
        return b""
    return bytes(value)


def _set(value: Any, spec: ColumnSpec) -> str:
    if isinstance(value, str):
        return value
    return ",".join(m for m in spec.members if m in value)


def _bit(value: Any, spec: ColumnSpec) -> int:
    return int(value, 2) if isinstance(value, str) else int(value)


def _fixed(value: Any, spec: ColumnSpec) -> bytes:
    """The column's bytes with the binlog's stripped trailing 0x00 put back."""
    raw = _bytes(value, spec)
    size = TEXT_FORM_TYPES[spec.kind]
    if len(raw) > size:
        raise ValueError(f"column {spec.name!r}: {len(raw)} bytes for a {spec.kind.upper()}")
    return raw + b"\0" * (size - len(raw))


def _inet4(value: Any, spec: ColumnSpec) -> str:
    return inet4_text(_fixed(value, spec))


def _inet6(value: Any, spec: ColumnSpec) -> str:
    return inet6_text(_fixed(value, spec))


def _uuid(value: Any, spec: ColumnSpec) -> str:
    return uuid_text(_fixed(value, spec))


_CONVERT: dict[str, Callable[[Any, ColumnSpec], Any]] = {
    FLOAT: _float, YEAR: _year, DATETIME: _datetime, TIMESTAMP: _timestamp, TIME: _time,
    BINARY: _binary, VARBINARY: _bytes, SET: _set, BIT: _bit,
    INET4: _inet4, INET6: _inet6, UUID: _uuid,
}


# -- texts -------------------------------------------------------------------------------

def double_text(value: float) -> str:
    """A DOUBLE as the server prints it: the shortest round-trip digits, fixed notation for
    decimal exponents -15 < e <= 15 (and a 17-digit number with a fraction just above),
    else ``1.5e16`` / ``1e-16``; zero is ``0``."""
    if not math.isfinite(value):
        return str(value)                # the server stores neither; keep a stable text
    if value == 0:
        return "0"
    digits, exponent = _digits(Decimal(repr(abs(value))))
    return ("-" if value < 0 else "") + _layout(digits, len(digits) + exponent)


def float_text(value: float) -> str:
    """A FLOAT as the server prints it: 6 significant digits, laid out as a DOUBLE."""
    if not math.isfinite(value) or value == 0:
        return double_text(value)
    digits, exponent = _digits(Decimal(f"{abs(value):.{FLOAT_DIGITS - 1}e}"))
    return ("-" if value < 0 else "") + _layout(digits, len(digits) + exponent)


def _digits(number: Decimal) -> tuple[str, int]:
    """Significant digits without trailing zeros, and the exponent of the last one."""
    sign, digits, exponent = number.as_tuple()
    text = "".join(map(str, digits))
    stripped = text.rstrip("0")
    return stripped, exponent + len(text) - len(stripped)


def _layout(digits: str, decpt: int) -> str:
    """``digits`` with the decimal point ``decpt`` places after the first (may be <= 0)."""
    n = len(digits)
    if _FIXED_MIN_DECPT <= decpt <= _FIXED_MAX_DECPT or _FIXED_MAX_DECPT < decpt < n:
        if decpt <= 0:
            return "0." + "0" * -decpt + digits
        if decpt >= n:
            return digits + "0" * (decpt - n)
        return digits[:decpt] + "." + digits[decpt:]
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{mantissa}e{decpt - 1}"


def decimal_text(value: Decimal) -> str:
    """A DECIMAL with exactly its scale's digits, never in exponent form (``0.0000000000``)."""
    text = format(value, "f")
    return text[1:] if text.startswith("-") and not value else text   # no '-0.00'


def fraction(micro: int, fsp: int) -> str:
    """``.ffffff`` cut to ``fsp`` digits ('' for fsp 0)."""
    return f".{micro:06d}"[:fsp + 1] if fsp else ""


def datetime_text(value: dt.datetime, fsp: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` and exactly ``fsp`` fractional digits."""
    if not fsp:
        return value.isoformat(" ", "seconds")
    return value.isoformat(" ", "microseconds")[:20 + fsp]    # 19 characters, '.', digits


def zero_datetime_text(fsp: int) -> str:
    return "0000-00-00 00:00:00" + fraction(0, fsp)


def time_text(value: dt.timedelta, fsp: int) -> str:
    """A TIME: ``[-]HH:MM:SS`` (hours up to 838) and exactly ``fsp`` fractional digits."""
    micro = value // dt.timedelta(microseconds=1)
    sign, micro = ("-" if micro < 0 else ""), abs(micro)
    seconds, micro = divmod(micro, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}{fraction(micro, fsp)}"


def inet4_text(raw: bytes) -> str:
    """An INET4 as MariaDB prints it: ``10.0.0.1``."""
    return ".".join(map(str, raw))


def inet6_text(raw: bytes) -> str:
    """An INET6 as MariaDB prints it (``Inet6::to_string``): lower-case hex words without
    leading zeros; the first longest run of zero words, even a single one, is ``::``; an
    IPv4-compatible (``::1.2.3.4``) or IPv4-mapped (``::ffff:1.2.3.4``) address ends in
    its dotted quad."""
    words = [raw[i] << 8 | raw[i + 1] for i in range(0, 16, 2)]
    gap_at, gap_len, run_at = -1, 0, -1
    for i, word in enumerate([*words, 1]):      # a sentinel closes a trailing run
        if word == 0 and run_at < 0:
            run_at = i
        elif word != 0 and run_at >= 0:
            if i - run_at > gap_len:
                gap_at, gap_len = run_at, i - run_at
            run_at = -1
    if gap_at == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        return ("::" if gap_len == 6 else "::ffff:") + inet4_text(raw[12:])
    head = ":".join(f"{w:x}" for w in words[:gap_at]) if gap_at >= 0 else None
    if head is None:
        return ":".join(f"{w:x}" for w in words)
    tail = ":".join(f"{w:x}" for w in words[gap_at + gap_len:])
    return f"{head}::{tail}"


def uuid_text(raw: bytes) -> str:
    """A UUID as MariaDB prints it: ``123e4567-e89b-12d3-a456-426614174000``."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# -- the same text read from the server (audit) ---------------------------------------------

_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_FLOAT_TYPES = frozenset({"float", "double", "real"})
_HEX_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                        "geometry", "point", "linestring", "polygon", "multipoint",
                        "multilinestring", "multipolygon", "geometrycollection"})


def server_text_sql(column: str, data_type: str) -> str:
    """A SELECT expression giving ``column``'s key text (its ``data_type`` from
    information_schema) as the server computes it, named after the column."""
    quoted = quote(column)
    kind = data_type.lower()
    if kind in _HEX_TYPES:
        expr = f"CONCAT('0x', LOWER(HEX({quoted})))"
    elif kind == "bit":
        expr = f"CAST({quoted} + 0 AS CHAR)"
    else:
        expr = f"CAST({quoted} AS CHAR)"
    return f"{expr} AS {quoted}"


def server_text_param_sql(data_type: str) -> str:
    """A placeholder for a value of a column of ``data_type`` given as its key text (as
    server_text_sql reads it), compared with the column itself so its index serves."""
    return "UNHEX(SUBSTRING(%s, 3))" if data_type.lower() in _HEX_TYPES else "%s"


def value_from_text(text: str | None, data_type: str) -> Any:
    """The value the tailer publishes for a column whose server text is ``text``: numbers as
    numbers (update-mode JSON keeps them), everything else its text. Raises ValueError on a
    number that is not one."""
    kind = data_type.lower()
    if text is None:
        return None
    if kind in _INTEGER_TYPES or kind == "bit" or (kind == "year" and text != "0000"):
        return int(text)
    if kind in _FLOAT_TYPES:
        return float(text)
    return text


def row_value(text: str | None, data_type: str) -> Any:
    """A column's text as MySQL reads it -> the value the tailer publishes for it (the
    consistency monitor, snapshot and prefill compare and write what the tailer would): JSON
    as its document, which is what the binlog carries, the rest by :func:`value_from_text`."""
    if text is not None and data_type.lower() == "json":
        return json.loads(text)
    return value_from_text(text, data_type)
