"""What cachesync would do to Redis for a row change, and a linter for the mapping file.

``explain_event`` runs the consumer's own planner (``cachesync.consumer.core.plan.plan_batch``)
on a hand-made event and prints its plan, so what it shows is what the consumer
does, whichever modes the planner supports. ``lint`` looks for templates that could
leave keys behind:

* ``delete-path``: a delete (or a key-column change) whose old key is not touched,
  i.e. the planner rendered that template only from the after image;
* ``missing-column``: a template (or version/value column) naming a column the live
  table does not have (every event of it would be dead-lettered);
* ``no-ttl``: live keys matching a template that have no TTL, so a lost
  invalidation would keep them forever;
* ``ambiguous-key``, ``overlapping-keys``, ``ci-collation``, ``key-text-changed``: keys two rows
  can share, key columns MySQL compares case-insensitively, and key columns whose key text
  changed in this version (``cachesync.lint_keys``).

The checks are pure; the live data (columns, keys without TTL) is passed in by the
caller, see ``cachesync.lint_keys.live_column_types`` and ``keys_without_ttl``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from cachesync.consumer.core.plan import plan_batch
from cachesync.lint_keys import (ColumnTypes, check_binary_forms, check_collations,
                                 check_collisions, check_reserved)
from cachesync.schema.event import ChangeEvent, Source
from cachesync.schema.keys import lease_key
from cachesync.schema.mapping import KeyTemplate, MappingSet, TableMapping
from cachesync.schema.values import canonical_text, from_json
from cachesync.table_matching import filter_findings, lint_view, shard_findings

Planner = Callable[[Iterable[ChangeEvent], MappingSet], Any]
EXPLAIN_ID = "explain"


# -- explain ---------------------------------------------------------------------------
def make_event(table: str, op: str, before: Mapping | None, after: Mapping | None,
               version: int = 1) -> ChangeEvent:
    """A synthetic binlog event for ``db.table``; JSON-tagged values ({"$dt": ...}) decoded."""
    db, name = table.split(".", 1)
    before = _decoded(before)
    after = _decoded(after)
    # the planner renders keys from the images; the primary key only routes Kafka records
    return ChangeEvent(id=EXPLAIN_ID, source=Source("binlog", "explain", "explain", 0.0),
                       db=db, table=name, op=op, pk=(), before=before, after=after,
                       version=version)


def _decoded(row: Mapping | None) -> dict | None:
    return None if row is None else {k: from_json(v) for k, v in row.items()}


def infer_op(before: Mapping | None, after: Mapping | None) -> str:
    if before is not None and after is not None:
        return "update"
    return "insert" if after is not None else "delete"


def explain_event(event: ChangeEvent, mappings: MappingSet, planner: Planner = plan_batch
                  ) -> tuple[list[str], bool]:
    """Lines describing the Redis operations for ``event``, and whether it is poison."""
    plan = planner([event], mappings)
    if plan.poison:
        _, error = plan.poison[0]
        salvaged = [k for ep in getattr(plan, "salvaged", ()) for k in ep.keys]
        return [f"dead letter ({error.reason}): {error.detail}",
                *(f"UNLINK {key} {lease_key(key)}  (the row's other keys)" for key in salvaged)
                ], True
    ep = plan.events[0]
    lines = key_text_lines(event, mappings)
    lines += [f"UNLINK {key} {lease_key(key)}" for key in ep.keys]
    lines += [_write_line(w) for w in getattr(ep, "writes", ())]
    again = getattr(ep, "double_delete_s", None)
    if again and ep.keys:
        lines.append(f"UNLINK the keys above again after {again:g}s (double delete)")
    if getattr(ep, "unversioned", False):
        lines.append("note: the version column is NULL, so the keys are invalidated, not written")
    if getattr(ep, "oversized", 0):
        lines.append("note: the value exceeds max_value_bytes, so the keys are invalidated")
    lines += [f"note: {key} is invalidated, not written: {why}"
              for key, why in getattr(ep, "ambiguous", ())]
    if ep.null_skips:
        lines.append(f"skipped {ep.null_skips} template rendering(s): a key column is NULL")
    if getattr(ep, "unwatched", False):
        lines.append("no Redis operation: no watched column changed (watch_columns / "
                     "ignore_columns; counted in cachesync_consumer_unwatched_updates)")
    if not lines:
        lines.append("no Redis operation")
    return lines, False


def key_text_lines(event: ChangeEvent, mappings: MappingSet) -> list[str]:
    """``key text: column = 'text'`` for key fields whose value is not plain text or a
    whole number (dates, decimals, bytes...): the canonical text the keys use."""
    mapping = mappings.get(event.db, event.table)
    fields = dict.fromkeys(f for t in mapping.keys for f in t.fields) if mapping else {}
    out = []
    for image in (event.before, event.after):
        for name in fields:
            value = (image or {}).get(name)
            if value is not None and type(value) not in (str, int):
                line = f"key text: {name} = {canonical_text(value)!r}"
                out += [line] if line not in out else []
    return out


def _write_line(write) -> str:
    if write.kind == "del":
        return (f"fenced DEL {write.key} unless stored version > {write.version}; "
                f"tombstone for {write.ttl_s}s")
    value = write.value if len(write.value) <= 80 else write.value[:77] + "..."
    command = "HSET" if write.kind == "hash" else "SET"
    return (f"fenced {command} {write.key} unless stored version > {write.version}: {value}  "
            f"(TTL {write.ttl_s}s ±{write.ttl_jitter:.0%})")


def table_header(mapping: TableMapping) -> str:
    mode = getattr(mapping, "mode", "delete")
    return (f"{mapping.table}: mode {mode}, TTL {mapping.ttl_s}s ±{mapping.ttl_jitter:.0%}, "
            f"keys {', '.join(t.text for t in mapping.keys)}")


def parse_row(text: str | None, what: str) -> dict | None:
    """A JSON object from the command line; raises ValueError naming ``what``."""
    if text is None:
        return None
    try:
        row = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(row, dict):
        raise ValueError(f"{what} must be a JSON object of column: value")
    return row


# -- lint ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    check: str          # delete-path, missing-column, no-ttl, missing-table; lint_keys' checks
    table: str
    message: str

    def __str__(self) -> str:
        return f"{self.table}: [{self.check}] {self.message}"


def lint(mappings: MappingSet, columns: Mapping[str, set[str]] | None = None,
         no_ttl: Mapping[str, list[str]] | None = None, planner: Planner = plan_batch,
         types: ColumnTypes | None = None,
         matched: Mapping[str, list[str]] | None = None) -> list[Finding]:
    """Every finding for ``mappings`` (a pattern entry checked on one table it matches:
    ``matched``, entry -> live tables, None offline); ``columns`` (table -> live columns), ``no_ttl``
    (template -> sampled keys without TTL) and ``types`` (table -> column -> (data type,
    collation)) are the live data, None = not checked (collisions: checked assuming
    integer columns, see ``cachesync.lint_keys``)."""
    entries = mappings
    mappings = lint_view(entries, matched)
    found: list[Finding] = check_collisions(mappings, types, Finding)
    found += shard_findings(entries, matched, Finding)
    for mapping in mappings.tables.values():
        found += filter_findings(mapping, Finding)
        found += check_delete_path(mapping, mappings, planner)
        found += check_collations(mapping, types, Finding)
        found += check_binary_forms(mapping, types, Finding)
        found += check_reserved(mapping, types, Finding)
        if columns is not None:
            found += check_columns(mapping, columns.get(mapping.table))
        if no_ttl is not None:
            found += [Finding("no-ttl", mapping.table,
                              f"{len(no_ttl[t.text])} sampled key(s) matching {t.text!r} have no "
                              f"TTL (e.g. {', '.join(no_ttl[t.text][:3])}); a lost invalidation "
                              "would keep them forever: set a TTL when filling the cache")
                      for t in mapping.keys if no_ttl.get(t.text)]
    return found


def mapped_columns(mapping: TableMapping) -> list[str]:
    """Every column the mapping names: template fields, version and value columns."""
    names = [f for t in mapping.keys for f in t.fields]
    names += [c for c in (getattr(mapping, "version_column", None),) if c]
    names += list(getattr(mapping, "value_columns", None) or ())
    return list(dict.fromkeys(names))


def check_delete_path(mapping: TableMapping, mappings: MappingSet,
                      planner: Planner = plan_batch) -> list[Finding]:
    """Plan a delete and a change of every key column; each old key must be touched."""
    cols = mapped_columns(mapping)
    old = {c: f"old-{c}" for c in cols}
    new = {c: f"new-{c}" for c in cols}
    if getattr(mapping, "version_column", None):
        old[mapping.version_column], new[mapping.version_column] = 1, 2
    found = []
    for op, after in (("delete", None), ("update", new)):
        event = make_event(mapping.table, op, old, after)
        plan = planner([event], mappings)
        if plan.poison:
            found.append(Finding("delete-path", mapping.table,
                                 f"a synthetic {op} could not be planned: {plan.poison[0][1]}"))
            continue
        touched = set(_touched(plan.events[0]))
        for template in mapping.keys:
            key = template.render(old)
            if key not in touched:
                path = "delete" if op == "delete" else "key-column change"
                found.append(Finding("delete-path", mapping.table,
                                     f"the {path} path does not touch the old key of "
                                     f"{template.text!r} (it renders only from the after image): "
                                     "the old key stays until its TTL"))
    return found


def _touched(event_plan) -> list[str]:
    return [*event_plan.keys, *(w.key for w in getattr(event_plan, "writes", ()))]


def check_columns(mapping: TableMapping, live: set[str] | None) -> list[Finding]:
    if live is None:
        return [Finding("missing-table", mapping.table,
                        "the table does not exist (or the cachesync user cannot see it)")]
    lowered = {c.lower() for c in live}
    return [Finding("missing-column", mapping.table,
                    f"column {c!r} (named by {_named_by(mapping, c)}) is not in the live table; "
                    "every change of this table would be dead-lettered and its keys left behind")
            for c in mapped_columns(mapping) if c.lower() not in lowered]


def _named_by(mapping: TableMapping, column: str) -> str:
    texts = [repr(t.text) for t in mapping.keys if column in t.fields]
    return ", ".join(texts) or "the version/value columns"


# -- live data -------------------------------------------------------------------------
def keys_without_ttl(cache, template: KeyTemplate, sample: int) -> list[str]:
    """Up to ``sample`` keys the template renders (a CacheReader's SCAN, never KEYS) that
    have no TTL."""
    return cache.without_ttl(list(itertools.islice(cache.scan(template), sample)))
