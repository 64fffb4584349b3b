"""Deliveries: each event decoded from a batch of records, with where it came from.

A record holds one event or a pack of them. Each event becomes a ``Delivery`` that
keeps its record and its index in the pack, so whatever happens to the event later
(poison, lag, counting) can name its origin and dead-letter its original bytes,
without parallel lists. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from cachesync.consumer.core.offsets import Record
from cachesync.schema.errors import DecodeError
from cachesync.schema.event import ChangeEvent, decode_record, pack_elements
from cachesync.schema.keys import kafka_key


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event and its origin: the record, and its index in the pack (None: not packed)."""

    event: ChangeEvent
    record: Record
    index: int | None = None

    @property
    def raw(self) -> bytes:
        """The event's bytes exactly as published (the record's, or its pack element's)."""
        return element_bytes(self.record, self.index)

    def dead_letter(self) -> Record:
        """What goes to the dead-letter topic for this event: its own bytes, key and id."""
        if self.index is None:
            return self.record
        e = self.event
        return pack_element(self.record, self.index, self.raw, e.id, kafka_key(e.db, e.table, e.pk))


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record, or one element of a pack, that is not an event: poison, as published."""

    record: Record              # for a pack element: the element as a record of its own
    error: DecodeError


@dataclass
class Decoded:
    """A batch of records decoded: the deliveries in record order and what was poison."""

    deliveries: list[Delivery] = field(default_factory=list)
    undecodable: list[Undecodable] = field(default_factory=list)
    consumed: int = 0           # events, plus records that could not be decoded at all
    widest: int = 0             # the most events one record held


def decode_records(records: Iterable[Record]) -> Decoded:
    """Decode every record; an unreadable record or pack element is set aside, never raised."""
    out = Decoded()
    for record in records:
        try:
            items = decode_record(record.value or b"")
        except DecodeError as e:
            out.consumed += 1
            out.undecodable.append(Undecodable(record, e))
            continue
        out.consumed += len(items)
        out.widest = max(out.widest, len(items))
        packed = len(items) > 1 or isinstance(items[0], DecodeError)
        for index, item in enumerate(items):
            where = index if packed else None
            if isinstance(item, DecodeError):
                element = pack_element(record, index, element_bytes(record, index))
                out.undecodable.append(Undecodable(element, item))
            else:
                out.deliveries.append(Delivery(item, record, where))
    return out


def element_bytes(record: Record, index: int | None) -> bytes:
    """The bytes of element ``index`` of a packed record (None: the whole record)."""
    if index is None:
        return record.value or b""
    return pack_elements(record.value or b"")[index]


def pack_element(record: Record, index: int, value: bytes, msg_id: str | None = None,
                 key: str | None = None) -> Record:
    """Element ``index`` of a packed record as a record of its own, for the dead-letter topic.

    Same origin (topic, partition, offset), the element's original bytes, a
    ``pack_index`` header, and the element's own key and ``id`` header when they are
    known (the record's ``id`` header names its first element, so it is not kept).
    """
    headers = [(k, v) for k, v in record.headers if k != "id"]
    if msg_id:
        headers.append(("id", msg_id.encode()))
    headers.append(("pack_index", str(index).encode()))
    return Record(record.topic, record.partition, record.offset,
                  record.key if key is None else key.encode(), value, tuple(headers),
                  record.timestamp_ms)
