"""Outbox events read from the binlog (Debezium's outbox event router pattern), pure.

With ``tailer.outbox_tables`` the tailer hands each row event of a listed table here
instead of publishing it as a row change: an INSERT becomes the outbox event the row
carries, the same record the polling relay would send for it (same event id, Kafka
key ``db.aggregate_type:aggregate_id``, payload, keys and ``version`` = seq), so a
consumer switching from the relay to the binlog sees each event under one id and its
dedup store drops whatever both publish. Deletes (the purge) and updates (the relay's
own bookkeeping, should one still run) carry no new event and are passed over.

Per-aggregate order is the binlog's commit order: one aggregate's events share a Kafka
key and a partition, and the tailer sends them in the order their transactions
committed, so a late commit is published when it commits and never skipped.
"""

from __future__ import annotations

import datetime
import json
import logging
from dataclasses import replace
from typing import Any, Iterable, Mapping, NamedTuple

from cachesync.producer_outbox.outbox import OutboxRow, event_kafka_key, to_event
from cachesync.schema.errors import FatalError
from cachesync.schema.event import encode

log = logging.getLogger(__name__)

COLUMNS = ("seq", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload",
           "cache_keys", "created_at")
_EPOCH = datetime.datetime(1970, 1, 1)


class OutboxRecord(NamedTuple):
    """One outbox event as the tailer sends it."""

    key: str                # db.aggregate_type:aggregate_id
    value: bytes            # the encoded ChangeEvent
    msg_id: str             # the row's event_id
    aggregate_type: str     # the event's table: its pack group


class OutboxRouter:
    """Turns the binlog rows of the configured outbox tables into outbox event records."""

    def __init__(self, tables: Iterable[tuple[str, str]], server: str, utc_offset_s: float = 0.0,
                 max_record_bytes: int | None = None):
        """``utc_offset_s``: the server's time zone offset (``created_at`` is its local time);
        an event over ``max_record_bytes`` goes out without its payload."""
        self._tables = frozenset(tables)
        self._server, self._utc_offset_s = server, utc_offset_s
        self._max_bytes = max_record_bytes
        self.events = 0          # outbox events built
        self.invalid = 0         # published without a payload or keys (not JSON, or too large)

    def covers(self, db: str, table: str) -> bool:
        return (db, table) in self._tables

    def records(self, db: str, table: str,
                images: Iterable[Mapping[str, Any]]) -> list[OutboxRecord]:
        """The records of inserted rows' images (deletes and updates carry no event).

        Raises FatalError when a row lacks an outbox column (the table is not an outbox).
        """
        out = []
        for image in images:
            row = self._row(db, table, image)
            out.append(OutboxRecord(event_kafka_key(row, db), self._value(row, db, table),
                                    row.event_id, row.aggregate_type))
        self.events += len(out)
        return out

    def _value(self, row: OutboxRow, db: str, table: str) -> bytes:
        """The encoded event; over the record limit, without its payload (keys still go)."""
        event = self._event(row, db, table)
        value = encode(event)
        if self._max_bytes is None or len(value) <= self._max_bytes:
            return value
        self.invalid += 1
        log.warning("outbox row %s (seq %d) of %s.%s is %d bytes encoded, over the %d-byte "
                    "Kafka record limit: published without its payload", row.event_id, row.seq,
                    db, table, len(value), self._max_bytes)
        return encode(replace(event, after=None))   # the keys as already checked and parsed

    def _row(self, db: str, table: str, image: Mapping[str, Any]) -> OutboxRow:
        missing = [c for c in COLUMNS if c not in image]
        if missing:
            raise FatalError(f"tailer.outbox_tables lists {db}.{table}, but its rows lack the "
                             f"outbox column(s) {', '.join(missing)}: it is not an outbox table "
                             "(see schema sql/outbox.sql)")
        return OutboxRow(int(image["seq"]), image["event_id"], image["aggregate_type"],
                         image["aggregate_id"], image["event_type"], image["payload"],
                         image["cache_keys"], self._epoch(image["created_at"]), 0)

    def _epoch(self, created_at: Any) -> float:
        """``created_at`` (the server's local time) as seconds since the epoch, as the
        relay's ``UNIX_TIMESTAMP(created_at)`` gives it."""
        if not isinstance(created_at, datetime.datetime):
            return 0.0     # a zero date (text): no creation time to measure lag from
        return (created_at - _EPOCH).total_seconds() - self._utc_offset_s

    def _event(self, row: OutboxRow, db: str, table: str):
        """to_event(row); a payload or keys that are not JSON (an INSERT that bypassed
        emit()) are left out, with a WARNING, and the rest of the event still goes out:
        its keys are invalidated, or with neither the consumer dead-letters it."""
        problems = _json_problems(row)
        if not problems:
            return to_event(row, db, self._server)
        self.invalid += 1
        log.warning("outbox row %s (seq %d) of %s.%s: %s; published without %s", row.event_id,
                    row.seq, db, table, "; ".join(f"{f} {why}" for f, why in problems.items()),
                    " and ".join(problems))
        return to_event(replace(row, **dict.fromkeys(problems)), db, self._server)


def _json_problems(row: OutboxRow) -> dict[str, str]:
    """{column: reason} for payload (a JSON object) and cache_keys (a JSON array of strings)
    when they are not what emit() writes."""
    problems = {}
    for field, ok in (("payload", _is_object), ("cache_keys", _is_string_list)):
        text = getattr(row, field)
        if text is None:
            continue
        try:
            value = json.loads(text)
        except ValueError as e:
            problems[field] = f"is not JSON ({e})"
            continue
        if not ok(value):
            problems[field] = f"is a JSON {type(value).__name__}, not what emit() writes"
    return problems


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(k, str) and k for k in value)
