"""Update mode: the fenced writes an event turns into, and their version strings.

A version is a string that sorts like the row's history: the fencing script in
Redis compares versions as strings, so numbers are zero-padded to a fixed width
and datetimes always carry microseconds. With a ``version_column`` the column's
value comes first and the source position breaks ties (two updates in one second
of ``updated_at``); without it the source position alone is the version.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from cachesync.schema.errors import PoisonError
from cachesync.schema.event import ChangeEvent
from cachesync.schema.mapping import MissingColumnError, TableMapping
from cachesync.schema.values import canonical_text

VERSION_DIGITS = 24      # binlog versions reach 2**68 (file number << 56); 10**24 covers it
KIND_JSON, KIND_HASH, KIND_DELETE = "json", "hash", "del"
_DATETIME_TEXT = re.compile(r"(\d{4}-\d{2}-\d{2})(?: (\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?)?")


class BadVersionError(PoisonError):
    """The version column holds a value that has no order cachesync can compare."""

    def __init__(self, column: str, value: Any):
        super().__init__("bad_version", f"version column {column!r} holds {value!r} "
                                        f"({type(value).__name__}); expected a non-negative "
                                        "integer, a date or a datetime")


@dataclass(frozen=True)
class CacheWrite:
    """One fenced operation on one key: write ``value`` (json/hash) or delete with a tombstone.

    ``value`` is the JSON text for ``json``, a JSON array ``[field, value, ...]`` for
    ``hash``, and empty for ``del``. ``ttl_s`` is the value's TTL, or the tombstone's.
    """

    key: str
    kind: str
    version: str
    value: str
    ttl_s: int
    ttl_jitter: float
    table: str = ""          # "db.table" whose row it comes from (table-level fences)

    @property
    def source_version(self) -> str:
        """The source-position part of the version (the whole of it without a version column)."""
        return self.version.rsplit("/", 1)[-1]


def fence_by_table(writes: Iterable[CacheWrite], fences: Mapping[str, str]) -> list[CacheWrite]:
    """Writes of rows a later table-level event (truncate, drop, ...) wiped become deletes.

    ``fences`` maps "db.table" to the padded source version of the newest table-level
    event applied to it; an update replayed from before it must not bring a value back.
    """
    out = []
    for w in writes:
        fence = fences.get(w.table)
        if fence is not None and w.kind != KIND_DELETE and w.source_version <= fence:
            w = CacheWrite(w.key, KIND_DELETE, w.version, "", w.ttl_s, 0.0, w.table)
        out.append(w)
    return out


def padded(n: int) -> str:
    if n < 0:
        raise ValueError(f"negative version {n}")
    return f"{n:0{VERSION_DIGITS}d}"


def version_text(event: ChangeEvent, mapping: TableMapping) -> str | None:
    """The event's version for ``mapping``; None when the version column is NULL.

    Raises BadVersionError (poison) for a value without a usable order and
    MissingColumnError when the image lacks the column.
    """
    source = padded(event.version)
    column = mapping.version_column
    if column is None:
        return source
    image = event.after if event.after is not None else event.before
    if image is None or column not in image:
        raise MissingColumnError(f"version_column of {mapping.table}", column)
    value = image[column]
    if value is None:
        return None
    return f"{_column_order_text(column, value)}/{source}"


def _column_order_text(column: str, value: Any) -> str:
    if isinstance(value, bool):
        raise BadVersionError(column, value)
    if isinstance(value, int):
        if value < 0:
            raise BadVersionError(column, value)
        return padded(value)
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.strftime("%Y-%m-%dT00:00:00.000000")
    if isinstance(value, str):
        # DATETIME(n)/TIMESTAMP(n) arrive as the server's text (their fraction digits are
        # part of the key text), zero dates too; the order text is the same as a datetime's
        m = _DATETIME_TEXT.fullmatch(value)
        if m is not None:
            date, time, micro = m.groups()
            return f"{date}T{time or '00:00:00'}.{(micro or '').ljust(6, '0')}"
    raise BadVersionError(column, value)


def render_value(row: Mapping[str, Any], mapping: TableMapping) -> tuple[str, str]:
    """(kind, text) of the value update mode writes for ``row``.

    JSON keeps numbers, strings, booleans and NULL as they are; DECIMAL, dates and
    times become their canonical text and binary ``0x``-hex, as in keys. A hash gets
    one field per non-NULL column. Raises MissingColumnError for an absent column.
    """
    columns = mapping.value_columns or tuple(row)
    values = {}
    for column in columns:
        if column not in row:
            raise MissingColumnError(f"value_columns of {mapping.table}", column)
        values[column] = _plain(row[column])
    if mapping.value_format == KIND_HASH:
        flat: list[str] = []
        for column, value in values.items():
            if value is not None:
                flat += [column, value if isinstance(value, str) else json.dumps(value)]
        return KIND_HASH, json.dumps(flat, ensure_ascii=False, separators=(",", ":"))
    return KIND_JSON, json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)   # JSON has no NaN or infinity
    if isinstance(value, (dict, list)):          # a JSON column stays JSON
        return json.loads(json.dumps(value, default=canonical_text))
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return canonical_text(value)


# What the fenced-write script does with one entry (its return value per entry).
REFUSED, APPLIED, BACKWARDS = 0, 1, 2


def fence(stored: str | None, version: str) -> int:
    """The fenced-write decision for ``version`` over the ``stored`` one (None: none), as
    ``schema/lua/fenced_write.lua`` takes it.

    Older versions are refused: a replay, a late duplicate or a reordering. But when both
    carry a column version (``col/source``) and the incoming change is at a *newer* source
    position, the row's version column went backwards (5, then 3): the database no longer
    holds the cached value, so the key is invalidated (BACKWARDS) and the stored version
    kept, so older replays stay refused.
    """
    if stored is None or stored <= version:
        return APPLIED
    if "/" in stored and "/" in version and _source(version) > _source(stored):
        return BACKWARDS
    return REFUSED


def _source(version: str) -> str:
    return version.rsplit("/", 1)[1]


def merge_writes(writes: Iterable[CacheWrite]) -> list[CacheWrite]:
    """One write per key: the newest version wins, a later equal version replaces an earlier.

    The fencing script would refuse the older ones anyway; sending only the newest
    turns repeated updates of a hot key within a batch into one Redis operation. A write
    whose version went backwards (``fence``) is kept after the newest one, so the script
    sees it and invalidates the key instead of it being merged away.
    """
    newest: dict[str, list[CacheWrite]] = {}
    for w in writes:
        chain = newest.get(w.key)
        decision = APPLIED if chain is None else fence(chain[0].version, w.version)
        if decision == APPLIED:
            newest[w.key] = [w]
        elif decision == BACKWARDS:
            newest[w.key] = [chain[0], w]
    return [w for chain in newest.values() for w in chain]
