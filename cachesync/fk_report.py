"""What ``lint``, ``doctor`` and ``init`` say about foreign keys that cascade into mapped tables:
each one, and what cachesync does about it."""

from __future__ import annotations

from cachesync.producer_outbox.unlogged_changes.cascades import rendered_templates
from cachesync.producer_outbox.unlogged_changes.fkschema import (NATIVE_SETTING, cascades_logged,
                                                                 keyed, read_foreign_keys)
from cachesync.producer_outbox.unlogged_changes.foreignkeys import CascadeGraph, ForeignKey
from cachesync.schema.mapping import MappingSet

RULES_GRANT = ("GRANT REFERENCES ON <db>.* TO the cachesync user: MariaDB shows the ON DELETE/"
               "ON UPDATE rules only to an account with a privilege beyond SELECT")


def cascading_keys(conn, mappings: MappingSet) -> tuple[list[tuple[ForeignKey, tuple]], bool | None]:
    """(each cascading foreign key with the mapped tables it reaches, whether the server logs
    cascaded rows), as the tailer reads them."""
    graph = CascadeGraph(read_foreign_keys(conn), keyed(mappings))
    return graph.into_mapped(), cascades_logged(conn)


def what_cachesync_does(fk: ForeignKey, tables: tuple, logged: bool | None,
                        mappings: MappingSet) -> str:
    """One line: the key, the mapped tables it changes, and how they are kept fresh."""
    names = ", ".join(f"{d}.{t}" for d, t in tables)
    if logged is True:
        return (f"{fk.describe()}: the server logs the rows it changes ({NATIVE_SETTING}=OFF); "
                f"{names} follow from their own row events")
    child = mappings.get(*fk.child) if (fk.child[0].lower(), fk.child[1].lower()) in {
        (d.lower(), t.lower()) for d, t in tables} else None
    rendered = [t.text for t in rendered_templates(child, fk)] if child is not None else []
    how = ("keys rendered from the parent's row for " + ", ".join(rendered) + "; every other "
           "template" if rendered else "every template")
    rules = "" if fk.rules_known else " (rules not readable: taken as CASCADE)"
    return (f"{fk.describe()}{rules}: changes rows of {names} without logging them; cachesync "
            f"invalidates them from the parent's row events: {how} by a "
            f"table-level invalidation (fk_cascade, one scan per table at a time)")
