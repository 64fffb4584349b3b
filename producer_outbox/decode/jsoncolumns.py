"""MySQL JSON columns in row events: the server's text, and partial JSON updates applied.

python-mysql-replication decodes a MySQL JSON column into a dict with bytes keys and
bytes strings, and reads only the first operation of a partial update's diff vector.
:func:`install_reader` replaces its JSON reader (once, at import, as ``keycolumns``
does for dates and strings) so that the library path gives what the fast path
(``fastrows``) gives: the column's text as ``CAST(col AS CHAR)`` prints it
(``mysqljson.column_text``), so keys and update-mode values carry the server's text.

With ``binlog_row_value_options=PARTIAL_JSON`` an UPDATE that changed a JSON column
with ``JSON_SET``/``JSON_REPLACE``/``JSON_REMOVE`` comes as a PARTIAL_UPDATE_ROWS_EVENT
whose after image of that column is a diff vector (``mysqljson.JsonDiffs``). In those
events the reader keeps each full JSON value's document (``mysqljson.JsonText``), and
:func:`resolve_partial` applies the diffs to the before image's document. Where the
before image lacks the column (``binlog_row_image`` MINIMAL or NOBLOB) or the diff does
not apply, the after value is unknown: :func:`unknown_after` marks it so, and the tailer
publishes the row as it publishes a partial row image (``producer_outbox.decode.partial``):
nothing lost when the mapping does not read the column, its keys invalidated without a
value when it is a value, the table invalidated when it is a key field.
"""

from __future__ import annotations

from dataclasses import replace

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.packet import BinLogPacketWrapper

from cachesync.producer_outbox.decode.mysqljson import (DiffRejected, JsonDiffs, JsonText, column_text,
                                                 apply_diffs, decode, decode_diffs)
from cachesync.producer_outbox.decode.images import RowImages

# The none_source of an after value that a partial JSON update left unknown.
UNKNOWN_AFTER = "partial JSON update of a column the before image lacks"


def _read_binary_json(self, size, is_partial):
    """Replaces ``BinLogPacketWrapper.read_binary_json``: the text of a full value, the
    diffs of a partial one, and, in a partial update event, full values that keep their
    document. Raises mysqljson.JsonError on bytes that are not binary JSON."""
    data = self.read(self.read_uint_by_size(size))
    if is_partial:
        return decode_diffs(data)
    if getattr(self, "event_type", None) == BINLOG.PARTIAL_UPDATE_ROWS_EVENT:
        return column_doc(data)
    return column_text(data)


# The library's own reader (a dict with bytes keys, one diff of a vector), kept for the
# benchmark's baseline (bench/mysqljson.py)
LIBRARY_READER = getattr(BinLogPacketWrapper.read_binary_json, "__wrapped_library__",
                         BinLogPacketWrapper.read_binary_json)
_read_binary_json.__wrapped_library__ = LIBRARY_READER


def column_doc(data: bytes) -> JsonText:
    """A JSON column's text that keeps its document (a partial update event's values)."""
    return JsonText.of(decode(data))


def install_reader() -> None:
    """Patch the library's JSON column reader (see the module). Idempotent."""
    BinLogPacketWrapper.read_binary_json = _read_binary_json


def resolve_partial(row: dict) -> tuple[dict, tuple[str, ...]]:
    """``row`` (an update row) with each JSON diff of its after image applied to the before
    image's document, and the JSON columns whose after value stays unknown (set to None,
    with the none_source ``UNKNOWN_AFTER``). The same row when there is no diff."""
    after = row["after_values"]
    partial = [c for c, v in after.items() if isinstance(v, JsonDiffs)]
    if not partial:
        return row, ()
    before = row.get("before_values") or {}
    values, sources, unknown = dict(after), dict(row.get("after_none_sources") or {}), []
    for column in partial:
        base = before.get(column)
        try:
            if not isinstance(base, JsonText):
                raise DiffRejected("the before image does not hold the column")
            values[column] = JsonText.of(apply_diffs(base.doc, after[column]))
        except DiffRejected:
            values[column], sources[column] = None, UNKNOWN_AFTER
            unknown.append(column)
    return {**row, "after_values": values, "after_none_sources": sources}, tuple(unknown)


def unknown_after(images: RowImages, unknown: tuple[str, ...]) -> RowImages:
    """``images`` (``images.known_images``) without the after values ``unknown`` names: never
    carried from the before image (the column changed), marked unknown instead."""
    if not unknown or images.after is None:
        return images
    after = {c: v for c, v in images.after.items() if c not in unknown}
    return replace(images, after=after, unknown_after=images.unknown_after | set(unknown))


# Installed at import, before any event is decoded (fastrows imports this module).
install_reader()
