"""Column types the binlog does not name, read from the mapped tables' definitions.

MariaDB's INET4, INET6 and UUID columns reach the binlog as BINARY(4) and BINARY(16)
(the table map has no type name for them, even with binlog_row_metadata=FULL), yet their
server text is an address or a UUID, which is what an application builds its keys from.
The tailer reads these columns' types from information_schema at start and again after
each DDL statement that names a mapped table, so the key text follows ALTERs.
``keycolumns.column_spec`` uses a type only where the binlog's own description (BINARY
of that type's width) agrees.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import pymysql

from cachesync.producer_outbox.keycolumns import ServerTypes
from cachesync.producer_outbox.statements import mapped_names
from cachesync.schema.keytext import TEXT_FORM_TYPES

log = logging.getLogger(__name__)


class ColumnTypes:
    """``(db, table) -> ServerTypes`` of the mapped tables, reloaded when DDL names one."""

    def __init__(self, connect: Callable[[], object], tables: Iterable[tuple[str, str]]):
        self._connect = connect
        self._tables = [(db, t) for db, t in tables]
        self._types: dict[tuple[str, str], ServerTypes] = {}
        self.version = 0        # counts loads: what was derived from older types is stale

    def of(self, db: str, table: str) -> ServerTypes:
        """The table's types; read on first use for a table the settings do not name (one
        a table pattern matched)."""
        key = (db.lower(), table.lower())
        found = self._types.get(key)
        if found is None:
            self.load([(db, table)])
            found = self._types.get(key, ())
        return found

    def load(self, tables: Iterable[tuple[str, str]] | None = None) -> None:
        """Read the types of ``tables`` (default: every mapped table); a failure keeps the
        types known so far and is logged (keys then render as before: 0x-hex)."""
        pairs = list(self._tables if tables is None else tables)
        if not pairs:
            return
        self.version += 1
        try:
            found = _query(self._connect, pairs)
        except pymysql.err.MySQLError as e:
            log.warning("could not read the column types of %s from information_schema (%s): "
                        "INET4/INET6/UUID key columns render as 0x-hex until the next DDL "
                        "naming the table", ", ".join(f"{d}.{t}" for d, t in pairs), e)
            for db, table in pairs:     # unknown ones are not asked again for every event
                self._types.setdefault((db.lower(), table.lower()), ())
            return
        for db, table in pairs:
            self._types[(db.lower(), table.lower())] = found.get((db.lower(), table.lower()), ())

    def track(self, db: str, table: str) -> None:
        """A mapped table found later (a pattern's new table): its types read now, and again
        after each DDL that names it."""
        if (db, table) not in self._tables:
            self._tables.append((db, table))
            self.load([(db, table)])

    def after_ddl(self, query: str, default_db: str | None) -> None:
        """Reload the mapped tables a DDL statement names."""
        named = mapped_names(query, default_db, [*self._tables, *self._types])
        if named:
            self.load(named)


def _query(connect, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], ServerTypes]:
    where = " OR ".join(["(table_schema = %s AND table_name = %s)"] * len(pairs))
    kinds = sorted(TEXT_FORM_TYPES)
    conn = connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_schema, table_name, column_name, data_type "
                        f"FROM information_schema.columns WHERE ({where}) AND data_type IN "
                        f"({', '.join(['%s'] * len(kinds))})",
                        [v for pair in pairs for v in pair] + kinds)
            rows = cur.fetchall()
    finally:
        conn.close()
    out: dict[tuple[str, str], list] = {}
    for schema, table, column, data_type in rows:
        out.setdefault((schema.lower(), table.lower()), []).append(
            (column.lower(), data_type.lower()))
    return {k: tuple(sorted(v)) for k, v in out.items()}
