"""Partial row images: which columns a rows event did not log, and what the row still says (pure).

``binlog_row_image`` is a session variable: one session with ``MINIMAL``, ``NOBLOB`` (or
MariaDB's ``FULL_NODUP``) writes rows events whose images leave columns out, whatever
the global setting preflight checked. The event says which: one columns-present bitmap
per image (an update has two). Both decoders give a left-out column the value None,
which is not NULL, so the tailer reads the bitmaps, never the values, to tell them apart.

What the row still says, by the rule a replica applies such an event with: the before
image identifies the row; the after image sets the columns it carries and leaves the
others as they were. So a column an update's after image leaves out is unchanged, and
its after value is its before value when the before image has it. A column neither
image has is unknown: :class:`RowImages` names those, the event carries them (``extra``
key ``absent``) and the tailer invalidates what it cannot render at table level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from cachesync.schema.event import ABSENT  # noqa: F401 -- the event's mark, named here too

PARTIAL_IMAGE = "partial_row_image"     # the reason, in warnings, metrics and table events
UNKEYABLE = "unkeyable_row"             # a row whose Kafka key cannot be rendered
UNNAMED = "no_column_names"             # rows of a table map without column names
UNDECODABLE = "undecodable_rows"        # a rows event whose bytes cannot be decoded


def absent_columns(bitmap: bytes | None, names: Sequence[str]) -> frozenset[str]:
    """The columns of ``names`` (in table order) whose bit in a columns-present ``bitmap``
    is clear; none when there is no bitmap."""
    if bitmap is None:
        return frozenset()
    return frozenset(name for i, name in enumerate(names)
                     if i >> 3 >= len(bitmap) or not bitmap[i >> 3] >> (i & 7) & 1)


def event_absence(event, table) -> tuple[frozenset[str], frozenset[str]]:
    """(columns the before image left out, columns the after image left out) of a rows event
    of ``table`` (the library's ``Table``); an insert has no before image, a delete no after
    image. Cached on the table per bitmap: one event costs a dict lookup."""
    cache = table.__dict__.get("_absent")
    if cache is None:
        cache = table._absent = {}
    first = getattr(event, "columns_present_bitmap", None)
    second = getattr(event, "columns_present_bitmap2", None)
    key = (first, second)
    found = cache.get(key)
    if found is None:
        names = [c.name for c in table.columns]
        one, two = absent_columns(first, names), absent_columns(second, names)
        found = cache[key] = (one, two) if second is not None else (one, one)
    return found


@dataclass(frozen=True)
class RowImages:
    """One row's images with only the values the event knows, and the columns it does not."""

    before: dict | None
    after: dict | None
    unknown_before: frozenset[str] = frozenset()
    unknown_after: frozenset[str] = frozenset()

    def absent(self) -> dict[str, list[str]]:
        """The ``extra[ABSENT]`` of the row's event."""
        out = {}
        if self.before is not None:
            out["before"] = sorted(self.unknown_before)
        if self.after is not None:
            out["after"] = sorted(self.unknown_after)
        return out

    def unknown(self, columns: Iterable[str]) -> frozenset[str]:
        """Which of ``columns`` an image the row has does not know."""
        cols = frozenset(columns)
        out = frozenset()
        if self.before is not None:
            out |= cols & self.unknown_before
        if self.after is not None:
            out |= cols & self.unknown_after
        return out


def known_images(op: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                 absent: tuple[frozenset[str], frozenset[str]]) -> RowImages:
    """The row's images without the columns the event left out; an update's after image
    takes the before value of each column it left out (unchanged, see the module)."""
    absent_before, absent_after = absent
    if op == "insert":
        absent_before, absent_after = frozenset(), absent_after
    elif op == "delete":
        absent_before, absent_after = absent_before, frozenset()
    b = None if before is None else {c: v for c, v in before.items() if c not in absent_before}
    a = None if after is None else {c: v for c, v in after.items() if c not in absent_after}
    unknown_after = absent_after
    if op == "update" and b is not None and a is not None:
        carried = {c: b[c] for c in absent_after if c in b}
        a = {**carried, **a} if carried else a
        unknown_after = absent_after - carried.keys()
    return RowImages(b, a, absent_before if b is not None else frozenset(),
                     unknown_after if a is not None else frozenset())
