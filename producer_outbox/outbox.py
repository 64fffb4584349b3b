"""The outbox writer API: an application emits events in its own MySQL transaction.

    with conn.cursor() as cur:
        cur.execute("UPDATE leaderboard SET ...")
    emit(conn, "leaderboard", board_id, "score_changed", {"board": board_id},
         keys=[f"leaderboard:{board_id}", "page:home"])
    conn.commit()          # business rows and the outbox row commit (or roll back) together

The relay (cachesync.producer_outbox.outbox_relay.relay) publishes committed rows to Kafka; the consumer
deletes the explicit ``keys`` that the mapping's ``explicit_keys`` for ``<db>.<aggregate_type>``
allows (and keys rendered from ``payload`` when that table has templates); it dead-letters
an event with any other key (cachesync.schema.trust). Everything is validated before the
INSERT, so a bad payload raises here and leaves the caller's transaction as it was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from cachesync.runtime.mysql import execute_script
from cachesync.schema import resource_text
from cachesync.schema.errors import CachesyncError
from cachesync.schema.event import ChangeEvent, Source
from cachesync.schema.ids import new_time_ordered_id
from cachesync.schema.keys import INTERNAL_PREFIX, kafka_key
from cachesync.schema.sqlnames import configured
from cachesync.schema.trust import is_reserved

OUTBOX_TABLE = "cachesync_outbox"
# Kafka's default message.max.bytes is 1 MiB; the envelope (ids, keys, source) needs
# room next to the payload, so payloads are capped below it.
MAX_PAYLOAD_BYTES = 900_000
MAX_AGGREGATE_TYPE, MAX_AGGREGATE_ID, MAX_EVENT_TYPE = 64, 191, 64
MAX_KEYS_BYTES = 60_000            # the cache_keys TEXT column holds 65,535 bytes
_SERVER_STATUS_IN_TRANS = 1        # MySQL protocol status flag: a transaction is open

_INSERT = ("INSERT INTO {table} (event_id, aggregate_type, aggregate_id, event_type, "
           "payload, cache_keys) VALUES (%s, %s, %s, %s, %s, %s)")


class OutboxError(CachesyncError, ValueError):
    """emit() refused its input; nothing was written and the transaction is untouched."""


@dataclass(frozen=True)
class OutboxRow:
    """One row of the outbox table as the relay reads it."""

    seq: int
    event_id: str
    aggregate_type: str
    aggregate_id: str
    event_type: str
    payload: str | None
    cache_keys: str | None
    created_ts: float          # created_at as seconds since the epoch
    attempts: int


def emit(conn, aggregate_type: str, aggregate_id: str | int, event_type: str,
         payload: Mapping[str, Any] | None, *, keys: Iterable[str] = (),
         table: str = OUTBOX_TABLE, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Insert one outbox event in ``conn``'s open transaction; returns its event id.

    Raises OutboxError (before any SQL) when the input is invalid or the connection
    is in autocommit mode outside a transaction; database errors propagate unchanged.
    """
    values = outbox_values(aggregate_type, aggregate_id, event_type, payload, keys,
                           max_payload_bytes)
    insert = _INSERT.format(table=_table_name(table))
    if conn.get_autocommit() and not conn.server_status & _SERVER_STATUS_IN_TRANS:
        raise OutboxError("emit() needs an open transaction: the connection is in autocommit "
                          "mode, so the outbox row would commit apart from the business rows")
    event_id = new_time_ordered_id()
    with conn.cursor() as cur:
        cur.execute(insert, (event_id, *values))
    return event_id


def _table_name(table: str) -> str:
    """``table`` or ``db.table``, checked and quoted; raises OutboxError for another name."""
    try:
        return configured(table)
    except ValueError as e:
        raise OutboxError(f"table: {e}") from None


def outbox_values(aggregate_type, aggregate_id, event_type, payload, keys,
                  max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> tuple:
    """Validate emit()'s input; returns the column values after event_id or raises OutboxError."""
    aggregate_id = str(aggregate_id) if isinstance(aggregate_id, int) else aggregate_id
    _check_name("aggregate_type", aggregate_type, MAX_AGGREGATE_TYPE)
    _check_name("aggregate_id", aggregate_id, MAX_AGGREGATE_ID)
    _check_name("event_type", event_type, MAX_EVENT_TYPE)
    payload_text = _payload_text(payload, max_payload_bytes)
    keys_text = _keys_text(keys)
    return aggregate_type, aggregate_id, event_type, payload_text, keys_text


def _check_name(field: str, value: Any, limit: int) -> None:
    if not isinstance(value, str) or not value:
        raise OutboxError(f"{field} must be a non-empty string, got {value!r}")
    if len(value.encode("utf-8")) > limit:
        raise OutboxError(f"{field} is longer than {limit} bytes: {value[:40]!r}...")


def _payload_text(payload: Any, limit: int) -> str | None:
    if payload is None:
        return None
    if not isinstance(payload, Mapping):
        raise OutboxError(f"payload must be a JSON object (a dict) or None, "
                          f"got {type(payload).__name__}")
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise OutboxError(f"payload is not JSON-serialisable: {e}") from e
    size = len(text.encode("utf-8"))
    if size > limit:
        raise OutboxError(f"payload is {size:,} bytes of JSON; the limit is {limit:,} bytes "
                          f"(max_payload_bytes, below Kafka's default 1 MiB message.max.bytes)")
    return text


def _keys_text(keys: Iterable[str]) -> str | None:
    if isinstance(keys, str):
        raise OutboxError("keys must be a list of strings, not one string")
    keys = list(dict.fromkeys(keys))
    bad = [k for k in keys if not isinstance(k, str) or not k]
    if bad:
        raise OutboxError(f"keys must be non-empty strings, got {bad[0]!r}")
    reserved = [k for k in keys if is_reserved(k)]
    if reserved:
        raise OutboxError(f"key {reserved[0]!r} is under {INTERNAL_PREFIX!r}, cachesync's own "
                          "keys; the consumer would dead-letter the event")
    if not keys:
        return None
    text = json.dumps(keys, ensure_ascii=False)
    if len(text.encode("utf-8")) > MAX_KEYS_BYTES:
        raise OutboxError(f"keys take {len(text.encode('utf-8')):,} bytes of JSON; "
                          f"the limit is {MAX_KEYS_BYTES:,}")
    return text


def ensure_outbox_table(conn, table: str = OUTBOX_TABLE) -> None:
    """Create the outbox table in ``conn``'s current database if missing (idempotent); raises
    OutboxError for a table name that is not an identifier (before any SQL)."""
    create = "CREATE TABLE IF NOT EXISTS {} ("
    script = resource_text("sql/outbox.sql")
    execute_script(conn, script.replace(create.format(OUTBOX_TABLE),
                                        create.format(_table_name(table))))


def to_event(row: OutboxRow, db: str, server: str) -> ChangeEvent:
    """The ChangeEvent of an outbox row: table = aggregate type, pk = aggregate id."""
    return ChangeEvent(
        id=row.event_id,
        source=Source("outbox", server, str(row.seq), row.created_ts, 0),
        db=db, table=row.aggregate_type, op="update",
        pk=(("aggregate_id", row.aggregate_id),),
        before=None,
        after=json.loads(row.payload) if row.payload is not None else None,
        version=row.seq,   # grows with insertion order, per aggregate as overall
        keys=tuple(json.loads(row.cache_keys)) if row.cache_keys else (),
        extra={"event_type": row.event_type},
    )


def event_kafka_key(row: OutboxRow, db: str) -> str:
    """``db.aggregate_type:aggregate_id``: one aggregate's events share a partition."""
    return kafka_key(db, row.aggregate_type, (("aggregate_id", row.aggregate_id),))
