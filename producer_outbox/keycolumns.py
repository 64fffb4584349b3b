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
  that stopped the tailer for utf32); they are decoded big-endian.
"""

from __future__ import annotations

import datetime

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

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


def column_spec(column) -> ColumnSpec | None:
    """The spec of one library ``Column``, or None when its decoded value is already right."""
    t, name = column.type, column.name
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


def table_specs(table) -> tuple[ColumnSpec, ...]:
    """The specs of a library ``Table``, computed once per table map (kept on the object)."""
    specs = table.__dict__.get("_keyspecs")
    if specs is None:
        specs = table._keyspecs = tuple(s for s in map(column_spec, table.columns) if s)
    return specs


def kept_specs(table, keep: frozenset[str] | None) -> tuple[ColumnSpec, ...]:
    """``table_specs`` of the columns in ``keep`` only (None: every column), kept on the table."""
    if keep is None:
        return table_specs(table)
    cache = table.__dict__.get("_keptspecs")
    if cache is None:
        cache = table._keptspecs = {}
    specs = cache.get(keep)
    if specs is None:
        specs = cache[keep] = tuple(s for s in table_specs(table) if s.name in keep)
    return specs


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
        return zero_datetime_text(*parts, self._RowsEvent__read_fsp(column), column.fsp)
    return self._RowsEvent__add_fsp_to_time(value, column)


def text_codec(charset: str) -> str:
    """The Python codec of a MySQL charset name, as the server encodes it."""
    return _BIG_ENDIAN.get(charset.lower()) or RowsEvent.charset_to_encoding(charset)


def _read_string(self, size, column):
    """As the library's ``__read_string``, with :func:`text_codec` (bytes without a codec)."""
    raw = self.packet.read_length_coded_pascal_string(size)
    errors = "ignore" if self._ignore_decode_errors else "strict"
    if column.character_set_name is None:
        return raw.decode(errors=errors)
    try:
        return raw.decode(text_codec(column.character_set_name), errors)
    except LookupError:                  # no Python codec (e.g. binary): the bytes
        return raw


def install_readers() -> None:
    """Patch the library's DATE, DATETIME2 and string readers (see the module). Idempotent."""
    RowsEvent._RowsEvent__read_date = _read_date
    RowsEvent._RowsEvent__read_datetime2 = _read_datetime2
    RowsEvent._RowsEvent__read_string = _read_string


# Installed at import, before any event is decoded: fastrows reproduces the patched
# readers, so the library path must never run unpatched in a process that uses it.
install_readers()
