"""The tailer's view of which tables its mapping covers, patterns included.

Exact ``tables:`` entries are known at load. A pattern's tables are found three ways:
the tables that exist when the tailer starts (information_schema), a table's first
table map in the binlog (a shard created while the tailer runs: reported once at INFO,
no restart), and a name in a statement (a TRUNCATE or a RENAME into the pattern).
"""

from __future__ import annotations

import logging

from cachesync.schema.mapping import MappingSet, TableMapping

log = logging.getLogger(__name__)

# the tables a pattern may match: not the server's own schemas
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
EXISTING_TABLES = ("SELECT table_schema, table_name FROM information_schema.tables "
                   "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ("
                   + ", ".join(f"'{s}'" for s in SYSTEM_SCHEMAS) + ")")


class MatchedTables:
    """Exact and pattern-matched tables; reports each pattern-matched table once."""

    def __init__(self, mappings: MappingSet):
        self._mappings = mappings
        # tables a table-level event can concern: those with keys (not the heartbeat table)
        self._exact = [tuple(name.split(".", 1)) for name, m in mappings.tables.items() if m.keys]
        self._announced: set[str] = set()

    @property
    def has_patterns(self) -> bool:
        return bool(self._mappings.patterns)

    def load_existing(self, conn) -> list[TableMapping]:
        """Match the server's tables against the patterns (AmbiguousTableError when two
        match one table: a config error, exit 2); logs what each pattern matched."""
        if not self.has_patterns:
            return []
        with conn.cursor() as cur:
            cur.execute(EXISTING_TABLES)
            names = [(str(db), str(t)) for db, t in cur.fetchall()]
        conn.commit()
        found = self._mappings.known(names)
        for _, entry in self._mappings.patterns:
            tables = sorted(m.table for m in found if m.pattern == entry.table)
            self._announced.update(tables)
            log.info("tables entry %r matches %d table(s)%s", entry.table, len(tables),
                     (": " + ", ".join(tables[:20]) + (" ..." if len(tables) > 20 else ""))
                     if tables else "")
        return found

    def seen(self, mapping: TableMapping) -> bool:
        """A pattern-matched table's row event: reported once, when it is new (True)."""
        if mapping.pattern is None or mapping.table in self._announced:
            return False
        self._announced.add(mapping.table)
        log.info("table %s matches tables entry %r: now mapped (first seen in the binlog)",
                 mapping.table, mapping.pattern)
        return True

    def statement_tables(self) -> list[tuple[str, str]]:
        """The mapped tables a statement may name: exact entries and the pattern tables
        matched so far."""
        if not self.has_patterns:
            return self._exact
        return self._exact + [(m.db, m.name) for m in self._mappings.resolved() if m.keys]

    def matches(self, db: str, table: str) -> bool:
        """A (lower-cased) name in a statement belongs to a pattern."""
        return self.has_patterns and self._mappings.is_mapped_loosely(db, table)
