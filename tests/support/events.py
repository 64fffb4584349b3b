"""Change events and records for unit tests of the consumer (pure: no service)."""

from __future__ import annotations

from cachesync.consumer.core.offsets import Record
from cachesync.schema.event import ChangeEvent, Source, encode


def event(msg_id: str, uid: int, table: str = "users", version: int = 1) -> ChangeEvent:
    """An update of ``shop.<table>`` row ``uid`` (before = after = ``{"id": uid}``)."""
    return ChangeEvent(msg_id, Source("binlog", "s", "0-1-1", 0.0), "shop", table, "update",
                       (("id", uid),), {"id": uid}, {"id": uid}, version)


def change(msg_id: str, uid: int, table: str = "users") -> bytes:
    """``event(...)`` encoded, as the tailer publishes it."""
    return encode(event(msg_id, uid, table))


def record(offset: int, value: bytes, partition: int = 0) -> Record:
    return Record("changes", partition, offset, b"k", value)
