"""MariaDB system-versioned tables: their binlog rows as the current rows they mean (pure).

A system-versioned table keeps every version of a row; ``SELECT * FROM t`` returns only
the current ones, those whose ``row_end`` is at its type's maximum. The binlog logs
what the storage engine does, which is not what a reader of the table sees:

* MariaDB appends ``row_end`` to the primary and unique keys, so the table map's primary
  key names it: the event's pk, Kafka key and partition must use the declared key
  without it, or a row's current and history versions land in different partitions;
* an UPDATE logs the history row (the old values, ``row_end`` set to the update's time)
  as an insert beside the update of the current row;
* a DELETE logs an update that closes the row (``row_end`` from the maximum to now);
* ``DELETE HISTORY`` logs deletes of history rows only;
* the implicit period columns (``ADD SYSTEM VERSIONING``) are INVISIBLE: absent from
  ``SELECT *``, present in every row image.

:meth:`Versioning.current_row` turns a logged row into the change of the current row it
means, or None when it changes only history (no cached row changes).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Mapping

from cachesync.producer_outbox.binlog.statements import IDENT, unquote

TIMESTAMP, TRX_ID = "timestamp", "trx_id"
# row_end of a current row: TIMESTAMP(6)'s maximum (2106 from MariaDB 11.5 on 64-bit
# servers, 2038 before and on 32-bit ones), or the largest transaction id
# (transaction-precise versioning, BIGINT UNSIGNED).
TIMESTAMP_MAXIMA = frozenset({"2038-01-19 03:14:07.999999", "2106-02-07 06:28:15.999999"})
_MAXIMA_DATETIMES = frozenset(datetime.datetime.strptime(m, "%Y-%m-%d %H:%M:%S.%f")
                              for m in TIMESTAMP_MAXIMA)
TRX_ID_MAXIMUM = 2 ** 64 - 1


@dataclass(frozen=True)
class Versioning:
    """A system-versioned table's period columns (names as the binlog spells them)."""

    row_start: str
    row_end: str
    kind: str = TIMESTAMP                   # TIMESTAMP | TRX_ID: the period columns' type
    hidden: frozenset[str] = frozenset()    # period columns SELECT * leaves out (INVISIBLE)

    def is_current(self, image: Mapping[str, Any]) -> bool:
        """Whether ``image`` is a current row (its ``row_end`` at the type's maximum). An
        image without ``row_end`` (a partial image left it out) counts as current: its
        change is then published as logged, never dropped."""
        if self.row_end not in image:
            return True
        value = image[self.row_end]
        if self.kind == TRX_ID:
            return value == TRX_ID_MAXIMUM
        if isinstance(value, datetime.datetime):
            return value.replace(tzinfo=None) in _MAXIMA_DATETIMES
        return isinstance(value, str) and value in TIMESTAMP_MAXIMA

    def declared_key(self, primary_key: Any) -> Any:
        """The table map's primary key (python-mysql-replication's "" / str / tuple) without
        ``row_end``: the key the table was declared with."""
        if not primary_key or isinstance(primary_key, str):
            return primary_key
        kept = tuple(c for c in primary_key if c != self.row_end)
        return kept[0] if len(kept) == 1 else kept

    def visible(self, image: Mapping[str, Any] | None) -> dict | None:
        """``image`` without the columns ``SELECT *`` leaves out."""
        if image is None or not self.hidden:
            return None if image is None else dict(image)
        return {c: v for c, v in image.items() if c not in self.hidden}

    def current_row(self, op: str, before: Mapping[str, Any] | None,
                    after: Mapping[str, Any] | None) -> tuple[str, dict | None, dict | None] | None:
        """(op, before, after) of the current row a logged row changes, images as ``SELECT
        *`` returns them; None when the row is history only (the history row an UPDATE
        inserts, a ``DELETE HISTORY`` delete)."""
        was = before is not None and self.is_current(before)
        now = after is not None and self.is_current(after)
        if was and now:
            return "update", self.visible(before), self.visible(after)
        if was:                  # a DELETE closes the row; or a delete of a current row
            return "delete", self.visible(before), None
        if now:                  # an insert; or an update that made a row current again
            return "insert", None, self.visible(after)
        return None


# -- application-time periods ---------------------------------------------------------------

_PERIOD = re.compile(rf"PERIOD\s+FOR\s+({IDENT})\s*\(\s*({IDENT})\s*,\s*({IDENT})\s*\)", re.I)
_WITHOUT_OVERLAPS = re.compile(rf",\s*({IDENT})\s+WITHOUT\s+OVERLAPS\b", re.I)


def overlap_periods(create_table: str) -> tuple[tuple[str, str, str], ...]:
    """The application-time periods (name, start column, end column) that a ``WITHOUT
    OVERLAPS`` key of ``create_table`` (SHOW CREATE TABLE) uses: under such a key several
    rows share the other key columns, told apart by their period."""
    keyed = {unquote(m.group(1)).lower() for m in _WITHOUT_OVERLAPS.finditer(create_table)}
    out = []
    for m in _PERIOD.finditer(create_table):
        name, start, end = (unquote(g) for g in m.groups())
        if name.lower() != "system_time" and name.lower() in keyed:
            out.append((name, start, end))
    return tuple(out)
