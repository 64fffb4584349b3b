"""The server's foreign keys (information_schema), read at start and again after DDL.

``ForeignKeys`` holds the ``foreignkeys.CascadeGraph`` of every cascading foreign key that
reaches a mapped table, and whether the server logs the rows a cascade changes. MySQL 9.6+
can enforce foreign keys in the SQL layer (``innodb_native_foreign_keys=OFF``) and then logs
the cascaded rows (before the parent's); the setting is read, not the version. Where it is
absent (MariaDB, older MySQL) or unreadable, cascades are taken as unlogged and invalidated:
a second invalidation only costs a cache miss.
"""

from __future__ import annotations

import logging
from contextlib import closing
import re
from typing import Callable

import pymysql

from cachesync.producer_outbox.unlogged_changes.foreignkeys import UNKNOWN, CascadeGraph, ForeignKey
from cachesync.producer_outbox.decode.matched import SYSTEM_SCHEMAS
from cachesync.producer_outbox.binlog.statements import clean

log = logging.getLogger(__name__)

# KEY_COLUMN_USAGE lists a foreign key to an account with SELECT on its table;
# REFERENTIAL_CONSTRAINTS (the ON DELETE / ON UPDATE rules) only to one with another
# privilege on it (MariaDB): a rule not visible reads as UNKNOWN, taken as CASCADE.
FOREIGN_KEYS = (
    "SELECT k.constraint_schema, k.constraint_name, k.table_name, k.column_name, "
    "k.referenced_table_schema, k.referenced_table_name, k.referenced_column_name, "
    "rc.delete_rule, rc.update_rule "
    "FROM information_schema.key_column_usage k "
    "LEFT JOIN information_schema.referential_constraints rc "
    "ON rc.constraint_schema = k.constraint_schema AND rc.constraint_name = k.constraint_name "
    "AND rc.table_name = k.table_name "
    "WHERE k.referenced_table_name IS NOT NULL AND k.constraint_schema NOT IN ("
    + ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS) + ") "
    "ORDER BY k.constraint_schema, k.table_name, k.constraint_name, k.ordinal_position")
NATIVE_SETTING = "innodb_native_foreign_keys"
# DDL that can add, drop or change a foreign key, or the tables one names (comments removed
# first: tools such as gh-ost and mysqldump lead their statements with one)
_FK_DDL = re.compile(r"^(?:ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|CREATE\s+(?:OR\s+REPLACE\s+)?"
                     r"(?:TEMPORARY\s+)?TABLE|DROP\s+(?:TEMPORARY\s+)?TABLES?|RENAME\s+TABLES?|"
                     r"DROP\s+(?:SCHEMA|DATABASE))\b", re.I)


def keyed(mappings) -> Callable[[str, str], bool]:
    """The tables a cascade matters for: mapped, with key templates."""
    def mapped(db: str, table: str) -> bool:
        mapping = mappings.get(db, table)
        return mapping is not None and bool(mapping.keys)
    return mapped


def read_foreign_keys(conn) -> list[ForeignKey]:
    """Every foreign key of the server's non-system schemas (one round trip)."""
    with conn.cursor() as cur:
        cur.execute(FOREIGN_KEYS)
        rows = cur.fetchall()
    conn.commit()
    grouped: dict[tuple, dict] = {}
    for schema, name, table, column, ref_schema, ref_table, ref_column, on_del, on_upd in rows:
        fk = grouped.setdefault((schema, table, name), {
            "name": str(name), "child": (str(schema), str(table)), "child_columns": [],
            "parent": (str(ref_schema), str(ref_table)), "parent_columns": [],
            "on_delete": str(on_del or UNKNOWN), "on_update": str(on_upd or UNKNOWN)})
        fk["child_columns"].append(str(column))
        fk["parent_columns"].append(str(ref_column))
    return [ForeignKey(**{**f, "child_columns": tuple(f["child_columns"]),
                          "parent_columns": tuple(f["parent_columns"])})
            for f in grouped.values()]


def cascades_logged(conn) -> bool | None:
    """Whether the server writes the rows a cascade changes to the binlog: True when
    ``innodb_native_foreign_keys`` is OFF (SQL-layer foreign keys), False when it is ON,
    None when the server has no such setting or it cannot be read."""
    try:
        with conn.cursor() as cur:
            cur.execute(f"SHOW GLOBAL VARIABLES LIKE '{NATIVE_SETTING}'")
            row = cur.fetchone()
    except pymysql.err.MySQLError:
        return None
    return logged_by_setting(row[1] if row else None)


def logged_by_setting(value) -> bool | None:
    """``cascades_logged`` from the setting's value (None: absent)."""
    if value is None:
        return None
    text = str(value).strip().upper()
    if text in ("OFF", "0"):
        return True
    if text in ("ON", "1"):
        return False
    return None


class ForeignKeys:
    """The cascade graph of the mapped tables, reloaded after DDL (``version`` counts loads)."""

    def __init__(self, connect: Callable[[], object], mapped: Callable[[str, str], bool]):
        self._connect, self._mapped = connect, mapped
        self.graph = CascadeGraph((), mapped)
        self.logged: bool | None = None     # the server logs cascaded rows (see module)
        self.version = 0        # counts changes of what is known: derived plans are stale
        self.failures = 0       # reads that failed (WARNING each; a metric counts them)

    def load(self) -> None:
        """Read the foreign keys and the setting; a failure keeps what was known (WARNING and
        ``failures``). ``version`` moves only when what is known changed."""
        try:
            with closing(self._connect()) as conn:
                fks, logged = read_foreign_keys(conn), cascades_logged(conn)
        except pymysql.err.MySQLError as e:
            self.failures += 1
            log.warning("could not read the foreign keys from information_schema (%s): "
                        "cascades into mapped tables are invalidated as known before "
                        "(%d foreign key(s) known)", e, len(self.graph.foreign_keys))
            return
        graph, known = CascadeGraph(fks, self._mapped), (self.graph, self.logged)
        self.graph, self.logged = graph, logged
        if self.version and _same(known, (graph, logged)):
            return      # what compiled plans derived from holds; nothing new to announce
        self.version += 1
        log.info("foreign keys: %d read, %d cascading, %d cascade source table(s) of mapped "
                 "tables", len(fks), len(self.graph.foreign_keys), len(self.graph.sources))
        self.announce()

    def announce(self) -> None:
        """One WARNING per cascading foreign key into a mapped table (at load)."""
        for fk, tables in self.graph.into_mapped():
            if self.logged is True:
                log.info("foreign key %s: the server logs the rows it changes "
                         "(%s=OFF)", fk.describe(), NATIVE_SETTING)
                continue
            log.warning("foreign key %s changes rows of %s without logging them: cachesync "
                        "invalidates them from the parent's row events (fk_cascade)",
                        fk.describe(), ", ".join(f"{d}.{t}" for d, t in tables))

    def after_ddl(self, query: str) -> None:
        """Reload after a DDL statement that can add, drop or change a foreign key (or the
        tables one names): ALTER, CREATE, DROP and RENAME TABLE, DROP DATABASE."""
        if _FK_DDL.match(clean(query)):
            self.load()


def _same(a: tuple[CascadeGraph, bool | None], b: tuple[CascadeGraph, bool | None]) -> bool:
    """Whether two (graph, logged) loads cascade the same foreign keys from the same sources."""
    (ga, la), (gb, lb) = a, b
    return (ga.foreign_keys, ga.sources, la) == (gb.foreign_keys, gb.sources, lb)
