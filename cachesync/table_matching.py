"""Pattern entries against the live server: which tables each matches, and the view
``lint`` and ``explain`` check (one instantiated table per pattern)."""

from __future__ import annotations

from typing import Iterable

from cachesync.producer_outbox.decode.matched import EXISTING_TABLES
from cachesync.schema.mapping import TABLE_FIELDS, MappingSet, TableMapping, instantiate

# the name a pattern's templates are shown with when no table matches it (offline)
PLACEHOLDER_DB, PLACEHOLDER_TABLE = "db", "table"


def existing_tables(conn) -> list[tuple[str, str]]:
    """Every base table outside the server's own schemas, as (db, table)."""
    with conn.cursor() as cur:
        cur.execute(EXISTING_TABLES)
        return [(str(db), str(t)) for db, t in cur.fetchall()]


def matches_by_entry(mappings: MappingSet, existing: Iterable[tuple[str, str]]
                     ) -> dict[str, list[str]]:
    """tables: entry -> the existing tables it maps (an exact entry: itself when it
    exists); raises AmbiguousTableError when two patterns match one table."""
    existing = list(existing)
    have = {f"{db}.{t}" for db, t in existing}
    out = {name: [name] if name in have else [] for name in mappings.tables}
    out.update({p.text: [] for p, _ in mappings.patterns})
    for m in mappings.known(existing):
        out[m.pattern].append(m.table)
    return {k: sorted(v) for k, v in out.items()}


def lint_view(mappings: MappingSet, matched: dict[str, list[str]] | None) -> MappingSet:
    """The exact entries plus, per pattern, one table it matches (the first live one, or
    ``db.table`` offline), so every per-table check runs once per entry."""
    reps = {}
    for pattern, entry in mappings.patterns:
        names = (matched or {}).get(pattern.text) or [f"{PLACEHOLDER_DB}.{PLACEHOLDER_TABLE}"]
        rep = instantiate(entry, *names[0].split(".", 1))
        reps[rep.table] = rep
    return MappingSet({**reps, **mappings.tables})


def shard_findings(mappings: MappingSet, matched: dict[str, list[str]] | None, finding) -> list:
    """``shard-keys``: a pattern's template with neither {_db} nor {_table} renders the
    same key for two tables' rows with equal key columns; ``no-match`` live."""
    found = []
    for pattern, entry in mappings.patterns:
        tables = (matched or {}).get(pattern.text)
        if matched is not None and not tables:
            found.append(finding("no-match", pattern.text,
                                 "no existing table matches this entry (yet): check the "
                                 "pattern; a table created later is mapped from its first row"))
        if tables is not None and len(tables) < 2 and matched is not None:
            continue
        for t in entry.keys:
            if not set(TABLE_FIELDS) & set(t.fields):
                found.append(finding(
                    "shard-keys", pattern.text,
                    f"{t.text!r} names neither {{_db}} nor {{_table}}: rows of two matched "
                    f"tables with equal {', '.join('{%s}' % f for f in t.fields)} render the "
                    "same key, so a change in one shard invalidates (update mode: overwrites) "
                    "another's; fine only if those values are unique across all the tables "
                    "(a global id); otherwise add {_table} to the template"))
    return found


def filter_findings(mapping: TableMapping, finding) -> list:
    """``column-filter``: a filter that cannot take effect as written."""
    always = mapping.always_watched
    name = mapping.pattern or mapping.table
    if mapping.watch_columns is None and not mapping.ignore_columns:
        return []
    if always is None:
        return [finding("column-filter", name,
                        "update mode without value_columns writes every column, so every "
                        "column is watched: watch_columns/ignore_columns has no effect; list "
                        "value_columns to filter")]
    ignored = sorted(always & mapping.ignore_columns)
    if ignored:
        return [finding("column-filter", name,
                        f"ignore_columns lists {', '.join(ignored)}, which are always watched "
                        "(key template columns; update mode: value and version columns): "
                        "changes to them still invalidate")]
    return []
