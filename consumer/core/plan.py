"""What a batch of events does to Redis.

Keys are rendered from the before AND the after image: an update that changes
``email`` must drop both ``user:email:old`` and ``user:email:new``; a delete has
only a before image. A NULL key column means no key exists for that template
(counted, never a crash).

Delete-mode tables (the default) turn into plain invalidations. Update-mode tables
turn into fenced writes: every key of the after image gets the new value, and a
key only the before image renders (the row moved away from it, or was deleted)
gets a delete that leaves a version tombstone behind. A key another row could render
too (``cachesync.schema.collisions``) is never written: it gets the tombstone instead,
so it can never hold another row's value.

An event that cannot be planned (a template or version/value column naming a missing
column, an unusable version) is poison and is dead-lettered, but the keys its other
templates render are still invalidated (``Plan.salvaged``), so a broken template never
leaves the row's other keys stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from cachesync import speedups
from cachesync.consumer.core.delivery import Delivery
from cachesync.consumer.core.writes import (KIND_DELETE, CacheWrite, merge_writes, render_value,
                                  version_text)
from cachesync.schema.collisions import ambiguous_key
from cachesync.schema.errors import PoisonError, UnknownTableError
from cachesync.schema.event import ABSENT, HEARTBEAT_KIND, INVALIDATE_ONLY, ChangeEvent
from cachesync.schema.mapping import KeyTemplate, MappingSet, MissingColumnError, TableMapping
from cachesync.schema.trust import check_explicit, check_rendered, is_allowed, is_reserved


@dataclass(slots=True)
class EventPlan:
    """What one event does: keys to invalidate, fenced writes, and what was skipped.

    Not frozen: a frozen dataclass's ``__init__`` costs several times more, and the
    engine builds one per event; nothing mutates a plan after ``event_keys``.
    """

    event: ChangeEvent
    keys: tuple[str, ...]                       # plain invalidations (delete mode, explicit keys)
    null_skips: int = 0                         # templates skipped for a NULL key column
    writes: tuple[CacheWrite, ...] = ()         # update mode
    double_delete_s: float | None = None        # delete mode: invalidate ``keys`` again later
    oversized: int = 0                          # values over max_value_bytes, invalidated instead
    unversioned: bool = False                   # NULL version column: invalidated, not written
    ambiguous: tuple[tuple[str, str], ...] = () # (key, why): another row's key too, invalidated
    unrenderable: int = 0                       # templates naming a missing column (salvaged plans)
    table: TableMapping | None = None           # table-level event: every key of this table
    unwatched: bool = False                     # an update of no watched column: nothing done


@dataclass
class Plan:
    """A batch's work: per-event detail and the poison found.

    ``keys`` and ``writes`` are what the whole batch does to Redis; the engine asks
    :func:`batch_keys` / :func:`batch_writes` for the events it claimed instead.
    """

    events: list[EventPlan] = field(default_factory=list)
    poison: list[tuple[Delivery | ChangeEvent, PoisonError]] = field(default_factory=list)
    # the renderable keys of poison events: invalidated (not claimed, so a replay of the
    # dead letter after the mapping is fixed still applies in full)
    salvaged: list[EventPlan] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return batch_keys(self.events)

    @property
    def writes(self) -> list[CacheWrite]:
        return batch_writes(self.events)

    @property
    def null_skips(self) -> int:
        return sum(e.null_skips for e in self.events)


def batch_keys(events: Iterable[EventPlan]) -> list[str]:
    """The events' invalidations, each key once, in first-seen order."""
    return list(dict.fromkeys(k for ep in events for k in ep.keys))


def batch_writes(events: Iterable[EventPlan]) -> list[CacheWrite]:
    """The events' fenced writes, only the newest per key (one Redis operation each)."""
    return merge_writes(w for ep in events for w in ep.writes)


def event_keys(event: ChangeEvent, mappings: MappingSet) -> EventPlan:
    """Plan one event; raises UnknownTableError, MissingColumnError, BadVersionError or
    UntrustedKeyError (poison)."""
    if event.source.kind == HEARTBEAT_KIND:       # measures lag only: no table, no key
        return EventPlan(event, ())
    mapping = mappings.get(event.db, event.table)
    if mapping is None and not event.keys:
        raise UnknownTableError(event.qualified_table)
    if event.table_level:
        return EventPlan(event, (), table=mapping)
    explicit = tuple(event.keys)
    if explicit:
        check_explicit(event.qualified_table, explicit, mapping.explicit_keys if mapping else ())
    if mapping is None:
        return EventPlan(event, tuple(dict.fromkeys(explicit)))
    absent = event.extra.get(ABSENT) if event.extra else None
    # decided here, not in the tailer: the change is still published (replay, audit and a
    # later filter change see it), and one rule serves the python engine, Spark and direct.
    # A partial row image (columns marked absent) counts as changing every column.
    if event.op == "update" and not explicit and absent is None and mapping.filters_columns \
            and not mapping.watches(event.before, event.after):
        return EventPlan(event, (), unwatched=True)
    if not mapping.updates and not explicit and absent is None:   # the usual delete-mode row
        rendered = _compiled_invalidations(mapping, event)
        if rendered is not None:
            return EventPlan(event, *rendered, double_delete_s=mapping.double_delete_s)
    before, nulls_b = _render(mapping, event.before, _absent(absent, "before"))
    after, nulls_a = _render(mapping, event.after, _absent(absent, "after"))
    check_rendered(event, before, after)
    nulls = nulls_b + nulls_a
    if not mapping.updates:
        keys = tuple(dict.fromkeys([*explicit, *_keys(before), *_keys(after)]))
        return EventPlan(event, keys, nulls, double_delete_s=mapping.double_delete_s)
    unlogged = _absent(absent, "after" if event.after is not None else "before")
    version = None if mapping.version_column in unlogged else version_text(event, mapping)
    if version is None:                      # no order to fence with: invalidate instead
        keys = tuple(dict.fromkeys([*explicit, *_keys(before), *_keys(after)]))
        return EventPlan(event, keys, nulls, unversioned=True)
    if event.extra and event.extra.get(INVALIDATE_ONLY):   # no values came: fenced deletes
        writes = [_tombstone(k, version, mapping)
                  for k in dict.fromkeys([*_keys(before), *_keys(after)])]
        return EventPlan(event, tuple(dict.fromkeys(explicit)), nulls, tuple(writes), oversized=1)
    ambiguous = _ambiguous(mapping, event.after, after)
    writes, oversized = _update_writes(event, mapping, version, _keys(before), after, ambiguous)
    return EventPlan(event, tuple(dict.fromkeys(explicit)), nulls, tuple(writes),
                     oversized=oversized, ambiguous=ambiguous)


Rendered = list[tuple[KeyTemplate, str]]

# (head, field, tail) templates, str and int values; None for anything else. Not built or
# switched off: the general path renders every row
_built_keys = getattr(speedups(), "invalidation_keys", None)
_compiled_keys = _built_keys


def use_python(on: bool = True) -> None:
    """Render every row's keys in Python (``on``), or go back to the compiled renderer when
    built (and not switched off with CACHESYNC_NO_SPEEDUPS)."""
    global _compiled_keys
    _compiled_keys = None if on else _built_keys


def _keys(rendered: Rendered) -> list[str]:
    return [key for _, key in rendered]


def _absent(absent, image: str) -> frozenset[str]:
    """The columns an event's ``image`` did not log (``extra["absent"]``), none if unmarked."""
    return frozenset(absent.get(image, ())) if absent else frozenset()


def _render(mapping: TableMapping, image, absent: frozenset[str] = frozenset()
            ) -> tuple[Rendered, int]:
    """(template, key) of each template ``image`` renders, and how many were NULL-skipped;
    a template naming an ``absent`` column renders nothing (the producer invalidated the
    table for it). Raises MissingColumnError."""
    if image is None:
        return [], 0
    keys, nulls = [], 0
    for template in mapping.keys:
        if absent and not absent.isdisjoint(template.fields):
            continue
        key = template.render(image)
        if key is None:
            nulls += 1
        else:
            keys.append((template, key))
    return keys, nulls


def _compiled_invalidations(mapping: TableMapping, event: ChangeEvent
                            ) -> tuple[tuple[str, ...], int] | None:
    """What the general path plans for a delete-mode row (its keys, each once, before's
    first, and the NULL-skipped templates), rendered by ``cachesync._speedups`` when it is
    built, every template names one column and the values are text or integers; None
    otherwise (a missing column or a reserved key included: the general path raises)."""
    singles = mapping.single_field_templates if _compiled_keys is not None else None
    if singles is None:
        return None
    return _compiled_keys(singles, event.before, event.after)


def _ambiguous(mapping: TableMapping, image, after: Rendered) -> tuple[tuple[str, str], ...]:
    """The after image's keys that another row could render too, with the reason."""
    out = []
    for template, key in after:
        why = ambiguous_key(key, template, mapping.keys, image)
        if why is not None:
            out.append((key, why))
    return tuple(out)


def _update_writes(event: ChangeEvent, mapping: TableMapping, version: str, before: list[str],
                   after: Rendered, ambiguous: tuple[tuple[str, str], ...]
                   ) -> tuple[list[CacheWrite], int]:
    writes, oversized = [], 0
    unsafe = {key for key, _ in ambiguous}
    keys = _keys(after)
    if event.after is not None and keys:
        kind, value = render_value(event.after, mapping)
        if len(value.encode("utf-8")) > mapping.max_value_bytes:
            oversized = 1
            unsafe.update(keys)
        writes += [_tombstone(k, version, mapping) if k in unsafe else
                   CacheWrite(k, kind, version, value, mapping.ttl_s, mapping.ttl_jitter,
                              mapping.table)
                   for k in keys]
    gone = [k for k in dict.fromkeys(before) if k not in keys]
    writes += [_tombstone(k, version, mapping) for k in gone]
    return writes, oversized


def _tombstone(key: str, version: str, mapping: TableMapping) -> CacheWrite:
    return CacheWrite(key, KIND_DELETE, version, "", mapping.tombstone_s, 0.0, mapping.table)


def split_at_tables(plans: list[EventPlan]) -> list[tuple[list[EventPlan], EventPlan | None]]:
    """The batch as (row events, then the table-level event after them or None) segments,
    so that rows before a truncate are applied before it and rows after it after it."""
    out, rows = [], []
    for ep in plans:
        if ep.table is None:
            rows.append(ep)
        else:
            out.append((rows, ep))
            rows = []
    if rows or not out:
        out.append((rows, None))
    return out


def plan_batch(items: Iterable[Delivery | ChangeEvent], mappings: MappingSet) -> Plan:
    """Plan each event of a batch; poison is set aside with the item it came in
    (given deliveries, the poison names its delivery: record, pack index, bytes), its
    renderable keys salvaged."""
    plan = Plan()
    for item in items:
        event = item.event if isinstance(item, Delivery) else item
        try:
            plan.events.append(event_keys(event, mappings))
        except PoisonError as e:
            plan.poison.append((item, e))
            salvaged = salvage(event, mappings)
            if salvaged is not None:
                plan.salvaged.append(salvaged)
    return plan


def salvage(event: ChangeEvent, mappings: MappingSet) -> EventPlan | None:
    """The invalidations a poison event still allows: every key any template renders from
    either image (skipping templates that name a missing column, counted), and its
    explicit keys the table allows; never a reserved key; None when there is none."""
    mapping = mappings.get(event.db, event.table)
    patterns = mapping.explicit_keys if mapping is not None else ()
    keys, nulls, unrenderable = [k for k in event.keys if is_allowed(k, patterns)], 0, 0
    images = [i for i in (event.before, event.after) if i is not None]
    for template in mapping.keys if mapping is not None else ():
        failed = False
        for image in images:           # a column dropped mid-stream: the before image may have it
            try:
                key = template.render(image)
            except MissingColumnError:
                failed = True
                continue
            nulls += key is None
            keys += [key] if key is not None and not is_reserved(key) else []
        unrenderable += failed
    if not keys and not unrenderable:
        return None
    return EventPlan(event, tuple(dict.fromkeys(keys)), nulls, unrenderable=unrenderable)
