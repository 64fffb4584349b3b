"""Row images as key text needs them: python-mysql-replication's values, corrected per column.

Both decoders (``fastrows`` and the library's ``event.rows``) return the library's
values; :func:`key_images` then applies ``cachesync.schema.keytext.key_values`` with
the column specs of the event's table map, so both paths give the same images.

Two things cannot be corrected afterwards, so :func:`install_readers` patches the
library's readers (``fastrows`` reproduces the patched ones), once, at import:

* zero dates: the library returns None for a DATE or DATETIME with a zero part
  ('0000-00-00', '2020-00-15'), indistinguishable from NULL; they become the server's text;
* utf16, utf32 and ucs2 text: the server stores them big-endian, the library decodes
  them with Python's codec of that name (little-endian: wrong text, or an exception
  that stopped the tailer for utf32); they are decoded big-endian;
* negative TIME with a fraction: the library adds the stored fraction before applying
  the sign (``-00:00:00.000001`` read as ``-00:00:00.999999``); :func:`time2_delta` reads
  it as the server does.
"""

from __future__ import annotations

import datetime

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from cachesync.runtime.library_adapter import (add_fsp_to_time, ignores_decode_errors,
                                                       read_fsp, replace_value_readers)
from cachesync.schema import keytext
from cachesync.schema.keytext import ColumnSpec, key_values

_TEMPORAL = {FIELD_TYPE.DATETIME2: keytext.DATETIME, FIELD_TYPE.DATETIME: keytext.DATETIME,
             FIELD_TYPE.TIMESTAMP2: keytext.TIMESTAMP, FIELD_TYPE.TIMESTAMP: keytext.TIMESTAMP,
             FIELD_TYPE.TIME2: keytext.TIME, FIELD_TYPE.TIME: keytext.TIME}
# MySQL charsets whose Python codec of the same name (or none) is not the server's encoding
_BIG_ENDIAN = {"utf16": "utf-16-be", "utf32": "utf-32-be", "ucs2": "utf-16-be"}
_TEXT_TYPES = (FIELD_TYPE.STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB)
_IMAGES = (("values", "none_sources"), ("before_values", "before_none_sources"),
           ("after_values", "after_none_sources"))


def column_spec(column, server_type: str | None = None) -> ColumnSpec | None:
    """The spec of one library ``Column``, or None when its decoded value is already right.

    ``server_type``: the column's type in the table's definition where the binlog does
    not name it (MariaDB INET4/INET6/UUID, ``servertypes``); used only when the binlog's
    own description (BINARY of that type's width) agrees."""
    t, name = column.type, column.name
    if server_type in keytext.TEXT_FORM_TYPES and _is_binary_of(
            column, keytext.TEXT_FORM_TYPES[server_type]):
        return ColumnSpec(name, server_type)
    if t == FIELD_TYPE.FLOAT:
        return ColumnSpec(name, keytext.FLOAT)
    if t == FIELD_TYPE.YEAR:
        return ColumnSpec(name, keytext.YEAR)
    if t in _TEMPORAL:
        return ColumnSpec(name, _TEMPORAL[t], fsp=getattr(column, "fsp", 0) or 0)
    if t == FIELD_TYPE.SET:
        return ColumnSpec(name, keytext.SET, members=tuple(column.set_values or ()))
    if t == FIELD_TYPE.BIT:
        return ColumnSpec(name, keytext.BIT)
    if t == FIELD_TYPE.GEOMETRY:
        return ColumnSpec(name, keytext.VARBINARY)
    if t in _TEXT_TYPES:
        return _text_spec(column)
    return None


def _text_spec(column) -> ColumnSpec | None:
    charset = (column.character_set_name or "").lower()
    if charset == "binary":
        if column.type == FIELD_TYPE.STRING:          # BINARY(n): fixed width, 0x00-padded
            return ColumnSpec(column.name, keytext.BINARY, length=column.max_length)
        return ColumnSpec(column.name, keytext.VARBINARY)
    return None


def _is_binary_of(column, size: int) -> bool:
    return (column.type == FIELD_TYPE.STRING and column.max_length == size
            and (column.character_set_name or "").lower() == "binary")


ServerTypes = tuple[tuple[str, str], ...]     # (lower-cased column, type), hashable


def table_specs(table, types: ServerTypes = ()) -> tuple[ColumnSpec, ...]:
    """The specs of a library ``Table`` given the ``types`` the binlog does not name,
    computed once per table map and types (kept on the object)."""
    cache = table.__dict__.get("_keyspecs")
    if cache is None or cache[0] != types:
        named = dict(types)
        specs = tuple(s for s in (column_spec(c, named.get((c.name or "").lower()))
                                  for c in table.columns) if s)
        cache = table._keyspecs = (types, specs, {})
    return cache[1]


def kept_specs(table, keep: frozenset[str] | None, types: ServerTypes = ()
               ) -> tuple[ColumnSpec, ...]:
    """``table_specs`` of the columns in ``keep`` only (None: every column), kept on the table."""
    specs = table_specs(table, types)
    if keep is None:
        return specs
    kept = table._keyspecs[2]
    found = kept.get(keep)
    if found is None:
        found = kept[keep] = tuple(s for s in specs if s.name in keep)
    return found


def key_images(row: dict, specs: tuple[ColumnSpec, ...]) -> dict:
    """``row`` (a decoder's row dict) with each image corrected; the same dict when no
    column needs it. Raises ValueError on a value its column cannot hold."""
    if not specs:
        return row
    out = dict(row)
    for values, sources in _IMAGES:
        if values in row:
            out[values] = key_values(row[values], row.get(sources) or {}, specs)
    return out


# -- zero dates ---------------------------------------------------------------------------

def zero_date_text(year: int, month: int, day: int) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}"


def zero_datetime_text(year: int, month: int, day: int, hour: int, minute: int, second: int,
                       micro: int, fsp: int) -> str:
    return (f"{zero_date_text(year, month, day)} {hour:02d}:{minute:02d}:{second:02d}"
            + keytext.fraction(micro, fsp))


def _read_date(self):
    """As the library's ``__read_date``, but a date Python cannot hold is its text, not None."""
    t = self.packet.read_uint24()
    year, month, day = t >> 9 & 0x7FFF, t >> 5 & 15, t & 31
    try:
        return datetime.date(year, month, day)
    except ValueError:                   # '0000-00-00', '2020-00-15', ALLOW_INVALID_DATES
        return zero_date_text(year, month, day)


def _read_datetime2(self, column):
    """As the library's ``__read_datetime2``, but a datetime Python cannot hold is its text."""
    data = self.packet.read_int_be_by_size(5)
    ym = data >> 22 & 0x1FFFF
    parts = (ym // 13, ym % 13, data >> 17 & 31, data >> 12 & 31, data >> 6 & 63, data & 63)
    try:
        value = datetime.datetime(*parts)
    except ValueError:                   # zero parts, or an invalid date the server allowed
        return zero_datetime_text(*parts, read_fsp(self, column), column.fsp)
    return add_fsp_to_time(self, value, column)


# TIME2 (MySQL/MariaDB ``my_time_packed_from_binary``): 3 bytes of integer part offset by
# 0x800000, then 0-3 bytes of fraction; a negative time with a fraction stores the
# integer part one lower and the fraction as its complement.
_TIMEF_INT_OFS = 0x800000
_FRAC_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
_FRAC_SCALE = {0: 0, 1: 10000, 2: 100, 3: 1}      # stored fraction unit (by bytes) in microseconds


def time2_delta(int_raw: int, frac_raw: int, fsp: int) -> datetime.timedelta:
    """A TIME2 value from its unsigned big-endian integer part and fraction, as the server
    reads it (``-00:00:00.000001`` included)."""
    intpart, nbytes = int_raw - _TIMEF_INT_OFS, _FRAC_BYTES[fsp]
    frac = frac_raw
    if nbytes in (1, 2) and intpart < 0 and frac:
        intpart, frac = intpart + 1, frac - (1 << 8 * nbytes)
    packed = (intpart << 24) + frac * _FRAC_SCALE[nbytes]
    tmp = abs(packed)
    hms, micro = tmp >> 24, tmp & 0xFFFFFF
    delta = datetime.timedelta(hours=hms >> 12 & 1023, minutes=hms >> 6 & 63,
                               seconds=hms & 63, microseconds=micro)
    return -delta if packed < 0 else delta


def _read_time2(self, column):
    """As the library's ``__read_time2``, but a negative time's fraction is the server's."""
    nbytes = _FRAC_BYTES.get(column.fsp, 0)
    raw = self.packet.read(3 + nbytes)
    return time2_delta(int.from_bytes(raw[:3], "big"), int.from_bytes(raw[3:], "big"),
                       column.fsp if column.fsp in _FRAC_BYTES else 0)


def text_codec(charset: str) -> str:
    """The Python codec of a MySQL charset name, as the server encodes it."""
    return _BIG_ENDIAN.get(charset.lower()) or RowsEvent.charset_to_encoding(charset)


def _read_string(self, size, column):
    """As the library's ``__read_string``, with :func:`text_codec` (bytes without a codec)."""
    raw = self.packet.read_length_coded_pascal_string(size)
    errors = "ignore" if ignores_decode_errors(self) else "strict"
    if column.character_set_name is None:
        return raw.decode(errors=errors)
    try:
        return raw.decode(text_codec(column.character_set_name), errors)
    except LookupError:                  # no Python codec (e.g. binary): the bytes
        return raw


def install_readers() -> None:
    """Patch the library's DATE, DATETIME2, TIME2 and string readers (see the module).
    Idempotent."""
    replace_value_readers(_read_date, _read_datetime2, _read_string, _read_time2)


# Installed at import, before any event is decoded: fastrows reproduces the patched
# readers, so the library path must never run unpatched in a process that uses it.
install_readers()
