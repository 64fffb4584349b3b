"""Which Redis keys a batch of events invalidates.

Keys are rendered from the before AND the after image: an update that changes
``email`` must drop both ``user:email:old`` and ``user:email:new``; a delete has
only a before image. A NULL key column means no key exists for that template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from schema.errors import PoisonError, UnknownTableError
from schema.event import ChangeEvent
from schema.mapping import MappingSet


@dataclass(frozen=True)
class EventPlan:
    """The keys one event invalidates (for reporting and lag metrics)."""

    event: ChangeEvent
    keys: tuple[str, ...]
    null_skips: int = 0


@dataclass
class Plan:
    """A batch's work: unique keys to delete, per-event detail, and the poison found."""

    keys: list[str] = field(default_factory=list)
    events: list[EventPlan] = field(default_factory=list)
    poison: list[tuple[ChangeEvent, PoisonError]] = field(default_factory=list)

    @property
    def null_skips(self) -> int:
        return sum(e.null_skips for e in self.events)


def event_keys(event: ChangeEvent, mappings: MappingSet) -> EventPlan:
    """Keys for one event; raises UnknownTableError or MissingColumnError (both poison)."""
    mapping = mappings.get(event.db, event.table)
    if mapping is None and not event.keys:
        raise UnknownTableError(event.qualified_table)
    keys: dict[str, None] = dict.fromkeys(event.keys)
    nulls = 0
    if mapping is not None:
        for image in (event.before, event.after):
            if image is None:
                continue
            for template in mapping.keys:
                key = template.render(image)
                if key is None:
                    nulls += 1
                else:
                    keys[key] = None
    return EventPlan(event, tuple(keys), nulls)


def plan_batch(events: Iterable[ChangeEvent], mappings: MappingSet) -> Plan:
    """Plan a batch; repeated keys collapse into one delete, poison is set aside."""
    plan = Plan()
    seen: dict[str, None] = {}
    for event in events:
        try:
            ep = event_keys(event, mappings)
        except PoisonError as e:
            plan.poison.append((event, e))
            continue
        plan.events.append(ep)
        seen.update(dict.fromkeys(ep.keys))
    plan.keys = list(seen)
    return plan
