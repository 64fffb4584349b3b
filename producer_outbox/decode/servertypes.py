"""Column types the binlog does not name, read from the mapped tables' definitions.

MariaDB's INET4, INET6 and UUID columns reach the binlog as BINARY(4) and BINARY(16)
(the table map has no type name for them, even with binlog_row_metadata=FULL), yet their
server text is an address or a UUID, which is what an application builds its keys from.
The tailer reads these columns' types from information_schema at start and again after
each DDL statement that names a mapped table, so the key text follows ALTERs.
``keycolumns.column_spec`` uses a type only where the binlog's own description (BINARY
of that type's width) agrees.

The same reads find the MariaDB system-versioned tables and their period columns
(``versioning``), so ``ADD/DROP SYSTEM VERSIONING`` is followed as any ALTER is.
"""

from __future__ import annotations

import logging
from contextlib import closing
from typing import Callable, Iterable

import pymysql

from cachesync.producer_outbox.decode.keycolumns import ServerTypes
from cachesync.producer_outbox.binlog.statements import mapped_names
from cachesync.producer_outbox.decode.versioning import TIMESTAMP, TRX_ID, Versioning
from cachesync.schema.keytext import TEXT_FORM_TYPES

log = logging.getLogger(__name__)


class ColumnTypes:
    """``(db, table) -> ServerTypes`` of the mapped tables, reloaded when DDL names one."""

    def __init__(self, connect: Callable[[], object], tables: Iterable[tuple[str, str]]):
        self._connect = connect
        self._tables = [(db, t) for db, t in tables]
        self._types: dict[tuple[str, str], ServerTypes] = {}
        self._versioned: dict[tuple[str, str], Versioning] = {}
        self._unread: set[tuple[str, str]] = set()     # tables whose last read failed
        self.version = 0        # counts loads: what was derived from older types is stale
        self.failures = 0       # reads that failed (WARNING each; a metric counts them)

    def of(self, db: str, table: str) -> ServerTypes:
        """The table's types; read on first use for a table the settings do not name (one
        a table pattern matched)."""
        key = (db.lower(), table.lower())
        found = self._types.get(key)
        if found is None:
            self.load([(db, table)])
            found = self._types.get(key, ())
        return found

    def versioning(self, db: str, table: str) -> Versioning | None:
        """The table's system versioning (MariaDB), None for an ordinary table; read with
        the types (``of``)."""
        self.of(db, table)
        return self._versioned.get((db.lower(), table.lower()))

    def unread(self, db: str, table: str) -> bool:
        """Whether the table's last read failed: whether it is system-versioned, and which
        of its columns are INET4/INET6/UUID, is then unknown (``of`` reads it on first use)."""
        self.of(db, table)
        return (db.lower(), table.lower()) in self._unread

    def load(self, tables: Iterable[tuple[str, str]] | None = None) -> None:
        """Read the types of ``tables`` (default: every mapped table); a failure keeps the
        types known so far, marks the tables ``unread`` until a read succeeds, and is
        logged and counted (``failures``)."""
        pairs = list(self._tables if tables is None else tables)
        if not pairs:
            return
        self.version += 1
        try:
            with closing(self._connect()) as conn, conn.cursor() as cur:
                found, versioned = _query(cur, pairs), _versioned(cur, pairs)
        except pymysql.err.MySQLError as e:
            self.failures += 1
            log.warning("could not read the column types of %s from information_schema (%s): "
                        "until the next DDL naming the table reads them, its update-mode rows "
                        "are published invalidate-only (whether it is system-versioned is "
                        "unknown) and INET4/INET6/UUID key columns not known before render as "
                        "0x-hex", ", ".join(f"{d}.{t}" for d, t in pairs), e)
            for db, table in pairs:     # unknown ones are not asked again for every event
                self._types.setdefault((db.lower(), table.lower()), ())
                self._unread.add((db.lower(), table.lower()))
            return
        for db, table in pairs:
            key = (db.lower(), table.lower())
            self._types[key] = found.get(key, ())
            self._unread.discard(key)
            self._versioned.pop(key, None)
            if key in versioned:
                self._versioned[key] = versioned[key]

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


def _where(pairs: list[tuple[str, str]], prefix: str = "") -> tuple[str, list[str]]:
    clause = " OR ".join([f"({prefix}table_schema = %s AND {prefix}table_name = %s)"] * len(pairs))
    return f"({clause})", [v for pair in pairs for v in pair]


def _versioned(cur, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Versioning]:
    """The system-versioned tables of ``pairs`` and their period columns. Explicit ones are
    the columns generated AS ROW START / ROW END; the implicit ones (``ADD SYSTEM
    VERSIONING``) are not in information_schema.columns: row_start and row_end, TIMESTAMP(6),
    invisible."""
    where, args = _where(pairs, "t.")
    cur.execute("SELECT t.table_schema, t.table_name, c.column_name, c.generation_expression, "
                "c.data_type, c.extra "
                "FROM information_schema.tables t LEFT JOIN information_schema.columns c "
                "ON c.table_schema = t.table_schema AND c.table_name = t.table_name "
                "AND c.generation_expression IN ('ROW START', 'ROW END') "
                f"WHERE t.table_type = 'SYSTEM VERSIONED' AND {where}", args)
    period: dict[tuple[str, str], dict] = {}
    for schema, table, column, role, data_type, extra in cur.fetchall():
        found = period.setdefault((schema.lower(), table.lower()), {})
        if column is not None:
            found[role] = (column, (data_type or "").lower(), "INVISIBLE" in (extra or "").upper())
    return {key: _versioning(cols) for key, cols in period.items()}


def _versioning(cols: dict) -> Versioning:
    if "ROW START" not in cols or "ROW END" not in cols:    # implicit period columns
        return Versioning("row_start", "row_end", TIMESTAMP, frozenset({"row_start", "row_end"}))
    (start, kind, start_hidden), (end, _, end_hidden) = cols["ROW START"], cols["ROW END"]
    hidden = {c for c, h in ((start, start_hidden), (end, end_hidden)) if h}
    return Versioning(start, end, TRX_ID if kind == "bigint" else TIMESTAMP, frozenset(hidden))


def _query(cur, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], ServerTypes]:
    where, args = _where(pairs)
    kinds = sorted(TEXT_FORM_TYPES)
    cur.execute("SELECT table_schema, table_name, column_name, data_type "
                f"FROM information_schema.columns WHERE {where} AND data_type IN "
                f"({', '.join(['%s'] * len(kinds))})", args + kinds)
    out: dict[tuple[str, str], list] = {}
    for schema, table, column, data_type in cur.fetchall():
        out.setdefault((schema.lower(), table.lower()), []).append(
            (column.lower(), data_type.lower()))
    return {k: tuple(sorted(v)) for k, v in out.items()}
