"""Foreign-key cascades the binlog does not carry: which mapped tables a row change reaches (pure).

When InnoDB enforces a foreign key (MariaDB, MySQL with ``innodb_native_foreign_keys`` ON,
the only kind before 9.6), the rows an ``ON DELETE``/``ON UPDATE`` ``CASCADE`` or ``SET NULL``
changes are never written to the binlog: only the parent's row is. The graph built here from
the server's foreign keys says, for a row change of any table, which mapped tables the cascade
changed (through tables that are not mapped, several levels deep, self-references included),
and which tables' row events the tailer must read for that (``sources``). ``SET DEFAULT``
(InnoDB rejects it) is treated as ``SET NULL``: the child's referencing columns change.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

Table = tuple[str, str]        # (db, table) as information_schema spells them

CASCADE, SET_NULL = "cascade", "set_null"
# a rule the account may not read (fkschema): taken as CASCADE, never as RESTRICT
UNKNOWN = "UNKNOWN"
_ACTIONS = {"CASCADE": CASCADE, "SET NULL": SET_NULL, "SET DEFAULT": SET_NULL, UNKNOWN: CASCADE}
DELETE, UPDATE = "delete", "update"


@dataclass(frozen=True)
class ForeignKey:
    """One foreign key: ``child.child_columns REFERENCES parent(parent_columns)``."""

    name: str
    child: Table
    child_columns: tuple[str, ...]
    parent: Table
    parent_columns: tuple[str, ...]
    on_delete: str = "RESTRICT"      # the server's words: CASCADE, SET NULL, RESTRICT, ...
    on_update: str = "RESTRICT"

    def action(self, op: str) -> str | None:
        """What a parent ``op`` (delete/update) does to the child rows: CASCADE, SET_NULL or
        None (RESTRICT, NO ACTION: the server refuses the change instead)."""
        return _ACTIONS.get((self.on_delete if op == DELETE else self.on_update).upper())

    @property
    def rules_known(self) -> bool:
        return UNKNOWN not in (self.on_delete.upper(), self.on_update.upper())

    @property
    def cascades(self) -> bool:
        return self.action(DELETE) is not None or self.action(UPDATE) is not None

    def describe(self) -> str:
        """``db.child(cols) -> db.parent(cols) ON DELETE x ON UPDATE y`` for reports."""
        return (f"{_name(self.child)}({', '.join(self.child_columns)}) -> "
                f"{_name(self.parent)}({', '.join(self.parent_columns)}) [{self.name}] "
                f"ON DELETE {self.on_delete.upper()} ON UPDATE {self.on_update.upper()}")


@dataclass(frozen=True)
class Hit:
    """A mapped table a cascade changed rows of; ``fk`` is the edge it was reached by, and
    ``depth`` 1 when that edge starts at the changed row's own table (the child rows then
    referenced the row's before image: their FK columns' keys render from it)."""

    table: Table
    fk: ForeignKey
    depth: int
    change: str                  # DELETE (the child rows were deleted) or UPDATE (rewritten)
    path: tuple[Table, ...]      # from the changed row's table to ``table``

    def describe(self) -> str:
        return " -> ".join(_name(t) for t in self.path) + f" ({self.change})"


# a change of a table: DELETE, or (UPDATE, the columns whose values changed)
Change = tuple[str, frozenset[str]]


class CascadeGraph:
    """The foreign keys that cascade, and what each table's changes reach among the tables
    ``mapped`` accepts. Table names compare case-insensitively."""

    def __init__(self, foreign_keys: Iterable[ForeignKey], mapped: Callable[[str, str], bool]):
        self.foreign_keys = tuple(fk for fk in foreign_keys if fk.cascades)
        self._mapped = mapped
        self._children: dict[Table, list[ForeignKey]] = {}
        for fk in self.foreign_keys:
            self._children.setdefault(_key(fk.parent), []).append(fk)
        self._reached: dict[tuple[Table, Change], tuple[Hit, ...]] = {}
        self._referenced = {parent: frozenset(c for fk in fks for c in fk.parent_columns)
                            for parent, fks in self._children.items()}
        self._sources = self._find_sources()

    @property
    def sources(self) -> frozenset[Table]:
        """(lower-cased) tables whose row changes can cascade into a mapped table."""
        return self._sources

    def is_source(self, db: str, table: str) -> bool:
        return (db.lower(), table.lower()) in self._sources

    def referenced(self, db: str, table: str) -> frozenset[str]:
        """The columns of ``table`` that cascading foreign keys reference."""
        return self._referenced.get((db.lower(), table.lower()), frozenset())

    def row_change(self, db: str, table: str, op: str, before: Mapping | None,
                   after: Mapping | None) -> Change | None:
        """What a logged row change of ``table`` can cascade as: a delete, an update of the
        referenced columns whose values differ (a column an image lacks counts as changed),
        or None (an insert, an update of other columns)."""
        if op == DELETE:
            return (DELETE, frozenset())
        if op != UPDATE or before is None or after is None:
            return None
        changed = frozenset(c for c in self.referenced(db, table)
                            if c not in before or c not in after or before[c] != after[c])
        return (UPDATE, changed) if changed else None

    def reached(self, db: str, table: str, change: Change) -> tuple[Hit, ...]:
        """The mapped tables a ``change`` of rows of ``table`` cascades into (each table once,
        at the smallest depth; per FK at depth 1), cached."""
        start = (db.lower(), table.lower())
        found = self._reached.get((start, change))
        if found is None:
            found = self._reached[(start, change)] = self._walk(start, change)
        return found

    def into_mapped(self) -> list[tuple[ForeignKey, tuple[Table, ...]]]:
        """Each cascading foreign key with the mapped tables a change of its parent's rows can
        reach through it (lint, doctor): only keys that reach one."""
        out = []
        for fk in self.foreign_keys:
            tables: dict[Table, None] = {}
            for op in (DELETE, UPDATE):
                if fk.action(op) is None:
                    continue
                for hit in self._walk_from(fk, op, (_key(fk.parent),)):
                    tables.setdefault(hit.table, None)
            if tables:
                out.append((fk, tuple(tables)))
        return out

    # -- the walk ---------------------------------------------------------------------
    def _walk(self, start: Table, change: Change) -> tuple[Hit, ...]:
        kind, columns = change
        hits: list[Hit] = []
        for fk in self._children.get(start, ()):
            if kind == UPDATE and not columns.intersection(fk.parent_columns):
                continue
            if fk.action(kind) is not None:
                hits += self._walk_from(fk, kind, (start,))
        return tuple(_first_per_table(hits))

    def _walk_from(self, first: ForeignKey, op: str, path: tuple[Table, ...]) -> list[Hit]:
        """Breadth first from the child rows ``first`` changes when its parent's rows see
        ``op``; each (table, change) visited once, so self-references and cycles end."""
        queue = deque([(first, op, path, 1)])
        seen: set = set()
        hits: list[Hit] = []
        while queue:
            fk, parent_op, trail, depth = queue.popleft()
            child = _key(fk.child)
            deleted = parent_op == DELETE and fk.action(DELETE) == CASCADE
            change: Change = ((DELETE, frozenset()) if deleted
                              else (UPDATE, frozenset(fk.child_columns)))
            trail = (*trail, child)
            if self._mapped(*fk.child):
                hits.append(Hit(fk.child, fk, depth, change[0], trail))
            if (child, change) in seen:
                continue
            seen.add((child, change))
            for nxt in self._children.get(child, ()):
                if change[0] == UPDATE and not change[1].intersection(nxt.parent_columns):
                    continue
                if nxt.action(change[0]) is not None:
                    queue.append((nxt, change[0], trail, depth + 1))
        return hits

    def _find_sources(self) -> frozenset[Table]:
        sources = set()
        for fk in self.foreign_keys:
            for op in (DELETE, UPDATE):
                if fk.action(op) is not None and self._walk_from(fk, op, (_key(fk.parent),)):
                    sources.add(_key(fk.parent))
        return frozenset(sources)


def _first_per_table(hits: list[Hit]) -> list[Hit]:
    """Depth-1 hits kept per foreign key (each renders its own keys); deeper ones once per
    table and change."""
    out: dict = {}
    for hit in hits:
        key = (hit.table, hit.fk) if hit.depth == 1 else (hit.table, hit.change)
        out.setdefault(key, hit)
    return list(out.values())


def _key(table: Table) -> Table:
    return (table[0].lower(), table[1].lower())


def _name(table: Table) -> str:
    return f"{table[0]}.{table[1]}"
