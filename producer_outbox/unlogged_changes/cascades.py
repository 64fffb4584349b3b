"""The invalidations a foreign-key cascade needs, from the parent's row events.

A part of :class:`cachesync.producer_outbox.encode.rowevents.RowEncoder`. For each row of a
cascade source (``fkschema.ForeignKeys``: a table whose deletes or key updates cascade into
a mapped table, mapped or not) that is deleted or whose referenced columns change, every
mapped table the cascade reaches (``foreignkeys.CascadeGraph.reached``) is invalidated:

* the keys of templates that use only the foreign key's columns, rendered from the parent's
  image (a delete event of the child table whose before image holds just those columns, the
  others marked ``absent``: the consumer renders only those templates); exact and cheap, for
  the child rows that referenced the parent row directly;
* every other template, and every table two or more levels below, by a table-level event
  (``reason: fk_cascade``), once per transaction and table; the consumer coalesces the scans
  of one table.

Counted (``cascade_rows``, ``cascade_tables``), a WARNING per table-level event (pipeline).
"""

from __future__ import annotations

from cachesync.producer_outbox.unlogged_changes.foreignkeys import DELETE, UPDATE, Hit
from cachesync.producer_outbox.decode.images import ABSENT
from cachesync.producer_outbox.ports import Record, TableEvent
from cachesync.producer_outbox.decode.rows import TxnContext, row_change, with_extra
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import MappingSet

FK_CASCADE = "fk_cascade"
CASCADE_EXTRA = "cascade"       # extra of a rendered child event: "db.parent via fk name"


class Cascades:
    """Turns the rows of cascade sources into the invalidations of the tables below them."""

    def __init__(self, foreign_keys, mappings: MappingSet):
        """``foreign_keys``: a ``fkschema.ForeignKeys`` (graph, logged, version)."""
        self._fks, self._mappings = foreign_keys, mappings
        self._txn: tuple = (None, set())     # (txn context, tables invalidated in it)
        self._plans: tuple = (None, {})      # (foreign-key version, hit -> _plan)
        self.cascade_rows = 0       # parent rows whose change cascaded into a mapped table
        self.cascade_tables = 0     # table-level events a cascade caused

    @property
    def version(self) -> int:
        return self._fks.version

    @property
    def read_failures(self) -> int:
        """Reads of the foreign keys that failed (each a WARNING)."""
        return self._fks.failures

    def after_ddl(self, query: str) -> None:
        self._fks.after_ddl(query)

    def covers(self, db: str, table: str) -> bool:
        """Whether this table's rows can cascade into a mapped table the server does not log."""
        fks = self._fks
        return fks.logged is not True and fks.graph.is_source(db, table)

    def rows(self, ctx: TxnContext, db: str, table: str, op: str, images, index: int,
             out: list) -> int:
        """The invalidations of ``images`` ((before, after) per row) appended to ``out``;
        returns the next row index."""
        graph = self._fks.graph
        for before, after in images:
            change = graph.row_change(db, table, op, before, after)
            hits = graph.reached(db, table, change) if change is not None else ()
            if not hits:
                continue
            self.cascade_rows += 1
            for hit in hits:
                index = self._hit(ctx, db, table, hit, before, after, index, out)
        return index

    def undecodable(self, ctx: TxnContext, db: str, table: str, index: int, out: list) -> int:
        """A rows event of ``table`` whose rows cannot be decoded: any of them may have been
        deleted or re-keyed, so every mapped table a delete or key update of ``table`` reaches
        is invalidated as a whole. Returns the next row index."""
        graph = self._fks.graph
        referenced = graph.referenced(db, table)
        for change in ((DELETE, frozenset()), (UPDATE, referenced)):
            for hit in graph.reached(db, table, change):
                if self._mappings.get(*hit.table) is not None:
                    index = self._whole_table(ctx, f"{db}.{table}", hit, index, out)
        return index

    def _hit(self, ctx, db, table, hit: Hit, before, after, index: int, out: list) -> int:
        mapping, exact, fields = self._plan(hit)
        values = _parent_values(hit, before, after) if exact else []
        for image in values:
            index = self._rendered(ctx, hit, fields, image, index, out)
        # a template the parent's image cannot render, or no value to render it from
        if not exact or exact < len(mapping.keys) or not values:
            index = self._whole_table(ctx, f"{db}.{table}", hit, index, out)
        return index

    def _plan(self, hit: Hit) -> tuple:
        """(the child's mapping, how many of its templates the parent's image renders, the
        fields its events carry) of a hit: the same for every row, so worked out once per
        foreign-key load."""
        if self._plans[0] != self._fks.version:
            self._plans = (self._fks.version, {})
        key = (hit.table, hit.fk, hit.depth)
        plan = self._plans[1].get(key)
        if plan is None:
            mapping = self._mappings.get(*hit.table)    # the graph reaches mapped tables only
            keys = mapping.keys if mapping is not None else ()
            fields = {f for t in keys for f in t.fields}
            if keys and mapping.version_column:
                fields.add(mapping.version_column)
            exact = len(rendered_templates(mapping, hit.fk)) if keys and hit.depth == 1 else 0
            plan = self._plans[1][key] = (mapping, exact, frozenset(fields))
        return plan

    def _rendered(self, ctx, hit: Hit, fields: frozenset, image: dict, index: int,
                  out: list) -> int:
        """A delete event of the child table keyed by the referencing columns only."""
        absent = sorted(fields - image.keys())
        db, table = hit.table
        change = row_change(ctx, index, db, table, DELETE, tuple(image), image, None)
        change = with_extra(change, {ABSENT: {"before": absent, "after": []},
                                     CASCADE_EXTRA: f"{hit.path[0][0]}.{hit.path[0][1]} via "
                                                    f"{hit.fk.name}"})
        out.append(Record(db, table, kafka_key(db, table, change.pk), encode(change), change.id))
        return index + 1

    def _whole_table(self, ctx, parent: str, hit: Hit, index: int, out: list) -> int:
        """One table-level event per transaction and table."""
        if self._txn[0] is not ctx:
            self._txn = (ctx, set())
        if hit.table in self._txn[1]:
            return index
        self._txn[1].add(hit.table)
        self.cascade_tables += 1
        what = (f"foreign-key cascade from {parent}: {hit.describe()} via {hit.fk.name}; "
                "the server does not log the rows it changed")
        out.append(TableEvent(ctx, index, TableChange(*hit.table, FK_CASCADE), what))
        return index + 1


def rendered_templates(mapping, fk) -> list:
    """The key templates of ``fk``'s child table that use only the foreign key's columns: a
    cascade renders them exactly from the parent's row; every other one is invalidated at
    table level."""
    columns = set(fk.child_columns)
    return [t for t in mapping.keys if set(t.fields) <= columns]


def _parent_values(hit: Hit, before, after) -> list[dict]:
    """The child's referencing values the parent's images give (depth 1 only): the before
    image's (the rows that referenced it), and for an update the after image's too (the rows
    an ON UPDATE CASCADE moved there). None when a value is missing or NULL."""
    out = []
    for image in (before, after if hit.change == UPDATE and after is not None else None):
        if image is None:
            continue
        values = [image.get(p) for p in hit.fk.parent_columns]
        if any(v is None for v in values):
            continue
        found = dict(zip(hit.fk.child_columns, values))
        if found not in out:
            out.append(found)
    return out
