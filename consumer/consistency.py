"""The online consistency monitor's decisions (no I/O imports): what to sample, what a check
of one row found, and whether it is settled or must be looked at again.

A check reads the row (MySQL), the keys it renders (Redis), then the row again. What the
keys should hold is decided as the audit does (:mod:`cachesync.consumer.audit`): an
update-mode key must hold the value cachesync renders from the row; a delete-mode key may
be absent (readers refill it) or hold the application's fill, which is compared field by
field when it is a JSON object sharing columns with the row, and is "unverifiable"
otherwise. A key that disagrees is only *suspected*: the row may have changed a moment
ago and its invalidation still be on its way. It counts as stale only when a second
check, one lag window later, finds the same row and the key still disagreeing.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from cachesync.consumer.audit import (CONSISTENT, MISSING, STALE, UNVERIFIED, expected_entries,
                                      verdict)
from cachesync.schema.collisions import ambiguous_key
from cachesync.schema.mapping import TableMapping

UNVERIFIABLE = "unverifiable"   # a delete-mode value cachesync cannot compare with the row
UNSETTLED = "unsettled"          # the row changed at every attempt: no verdict
RESULTS = (CONSISTENT, STALE, MISSING, UNVERIFIABLE, UNSETTLED)
_SAMPLE_SPACE = 2 ** 32

Row = Mapping[str, Any]


def sampled(event_id: str, ratio: float) -> bool:
    """Whether the event with ``event_id`` is in the sample: a hash of the id, so every
    monitor (inside ``consume`` or ``cachesync monitor``) samples the same events."""
    if ratio >= 1:
        return True
    return zlib.crc32(event_id.encode("utf-8")) < ratio * _SAMPLE_SPACE


class RateLimit:
    """A token bucket: ``take()`` is True at most ``rate`` times per second (burst ``rate``)."""

    def __init__(self, rate: float, clock: Callable[[], float]):
        self._rate, self._clock = rate, clock
        self._tokens, self._at = max(rate, 1.0), clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(max(self._rate, 1.0), self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


@dataclass(frozen=True)
class Sample:
    """One row to check at ``due`` (epoch seconds). ``suspect`` is the row as a previous check
    saw it when a key disagreed (None: first look); ``attempt`` counts the looks so far."""

    table: str
    pk: tuple[tuple[str, Any], ...]
    due: float
    attempt: int = 0
    suspect: tuple | None = None


def keys_to_read(mapping: TableMapping, row: Row | None, pk: Mapping[str, Any]) -> list[str]:
    """The keys a check reads: those the current row renders (update mode: not the keys another
    row could render, which cachesync never writes); for a row that is gone, those its primary
    key alone renders (a key built from other columns may belong to another row by now)."""
    if row is None:
        return [k for t in mapping.keys if set(t.fields) <= set(pk)
                for k in [t.render(pk)] if k is not None]
    keys = []
    for template in mapping.keys:
        key = template.render(row)
        if key is None or (mapping.updates and ambiguous_key(key, template, mapping.keys, row)):
            continue
        keys.append(key)
    return list(dict.fromkeys(keys))


def judge(mapping: TableMapping, row: Row | None, cached: Mapping[str, Any]) -> dict[str, str]:
    """A verdict per key of ``cached`` (key -> value read from Redis, None when absent)."""
    if row is None:
        return {key: _gone_verdict(mapping, value) for key, value in cached.items()}
    expected = dict(expected_entries(row, mapping))
    out = {}
    for key, value in cached.items():
        found = verdict(mapping, expected[key], value)
        out[key] = UNVERIFIABLE if found == UNVERIFIED else found
    return out


def _gone_verdict(mapping: TableMapping, value: Any) -> str:
    """The row is deleted: its key must be absent. A delete-mode value that is not a JSON
    object may be the application's own "not found" marker, so it is unverifiable."""
    if value is None or value == {}:
        return MISSING
    if mapping.updates:
        return STALE
    try:
        return STALE if isinstance(json.loads(value), dict) else UNVERIFIABLE
    except (TypeError, ValueError):
        return UNVERIFIABLE


@dataclass(frozen=True)
class Step:
    """What to do after one look: ``count`` the verdicts, or ``recheck`` with ``sample``."""

    verdicts: dict[str, str] | None = None
    recheck: Sample | None = None


def next_step(sample: Sample, before: tuple | None, after: tuple | None,
              verdicts: dict[str, str], now: float, window_s: float, max_attempts: int) -> Step:
    """Decide after one look (the row read ``before`` and ``after`` the Redis read, as
    :func:`row_identity` tuples, judged against ``before``). Stale is only counted when the
    row stayed the same over a whole window and the key still disagrees; a row that kept
    changing through ``max_attempts`` looks is unsettled."""
    changed = before != after
    suspected = STALE in verdicts.values()
    if not changed and (not suspected or sample.suspect == before):
        return Step(verdicts=verdicts)
    # the row moved under the read, or a first suspicion, or the suspected row moved since
    attempt = sample.attempt + 1
    if attempt >= max_attempts:
        return Step(verdicts={key: UNSETTLED for key in verdicts})
    suspect = before if suspected and not changed else None
    return Step(recheck=Sample(sample.table, sample.pk, now + window_s, attempt, suspect))


def row_identity(row: Row | None) -> tuple | None:
    """A comparable form of a row read (None: no such row)."""
    return None if row is None else tuple(sorted((k, repr(v)) for k, v in row.items()))
