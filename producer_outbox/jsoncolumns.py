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
not apply, the after value is unknown: :func:`unknown_effect` says what the row then
costs for a mapping (nothing, its keys invalidated without a value, or the table).
"""

from __future__ import annotations

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.packet import BinLogPacketWrapper

from cachesync.producer_outbox.mysqljson import (DiffRejected, JsonDiffs, JsonText, column_text,
                                                 apply_diffs, decode, decode_diffs)
from cachesync.producer_outbox.rows import needed_columns

# The none_source of an after value that a partial JSON update left unknown.
UNKNOWN_AFTER = "partial JSON update of a column the before image lacks"
# What an unknown after value costs (unknown_effect)
ROW, TABLE = "row", "table"


def _read_binary_json(self, size, is_partial):
    """Replaces ``BinLogPacketWrapper.read_binary_json``: the text of a full value, the
    diffs of a partial one, and, in a partial update event, full values that keep their
    document. Raises mysqljson.JsonError on bytes that are not binary JSON."""
    data = self.read(self.read_uint_by_size(size))
    if is_partial:
        return decode_diffs(data)
    if getattr(self, "event_type", None) == BINLOG.PARTIAL_UPDATE_ROWS_EVENT:
        return JsonText.of(decode(data))
    return column_text(data)


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


def unknown_effect(mapping, unknown: tuple[str, ...]) -> str | None:
    """What a row whose after image leaves ``unknown`` columns unknown costs for ``mapping``:
    None when the mapping reads none of them, ``ROW`` (invalidate the row's keys, write no
    value) when they are values only, ``TABLE`` when a key field is among them (the new
    key cannot be rendered, so the table's keys are invalidated)."""
    needed = needed_columns(mapping)
    hit = set(unknown) if needed is None else set(unknown) & needed
    if not hit:
        return None
    fields = {f for t in mapping.keys for f in t.fields}
    return TABLE if hit & fields else ROW


# Installed at import, before any event is decoded (fastrows imports this module).
install_reader()
