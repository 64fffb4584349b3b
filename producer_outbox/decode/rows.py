"""Binlog row -> ChangeEvent, pure (the tailer feeds it decoded rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from cachesync.schema.event import (ENVELOPE_VERSION, HEARTBEAT_KIND, HEARTBEAT_TABLE, INVALIDATE_ONLY,
                                    TABLE_ENVELOPE_VERSION, ChangeEvent, Source, build_checked)
from cachesync.schema.ids import binlog_message_id, binlog_version, table_event_id


@dataclass(frozen=True)
class TxnContext:
    """The transaction a row belongs to: its id material and its ordering."""

    server: str
    position: str       # GTID, or "file:pos" of the transaction's first event
    ordinal: int        # GTID seq_no, or file_pos_ordinal(); grows with commit order
    commit_ts: float
    gtid: bool = False  # ``position`` is a GTID: unique across the servers that replicate it
    cluster: str = ""   # source.id: the cluster's name when several feed one topic

    @property
    def id_scope(self) -> str:
        """What message ids are unique within: a GTID names its transaction on every server
        that replicates it (the primary, a replica with log_slave_updates, a promoted
        replica), so ids derived from it alone are the same whichever one was read; a
        file:pos is only meaningful on the server that wrote it. Two clusters can write
        equal GTIDs (same domain and server id): ``source.id`` names the cluster then."""
        scope = "gtid" if self.gtid else self.server
        return f"{self.cluster}/{scope}" if self.cluster else scope


def pk_columns(primary_key: Any, image: Mapping[str, Any]) -> tuple[str, ...]:
    """Primary-key columns as python-mysql-replication reports them ("" / str / tuple).

    A table without a primary key is keyed by all its columns: still deterministic,
    and the mapping's templates decide the cache keys anyway.
    """
    if not primary_key:
        return tuple(image)
    if isinstance(primary_key, str):
        return (primary_key,)
    return tuple(primary_key)


def row_change(ctx: TxnContext, row_index: int, db: str, table: str, op: str,
               primary_key: Any, before: Mapping[str, Any] | None,
               after: Mapping[str, Any] | None) -> ChangeEvent:
    """Build the event for one row; the id depends only on (server, position, row_index)."""
    image = after if after is not None else before
    pk = tuple([(c, image[c]) for c in pk_columns(primary_key, image)])
    kind = HEARTBEAT_KIND if table == HEARTBEAT_TABLE else "binlog"
    source = build_checked(Source, {"kind": kind, "server": ctx.server,
                                    "position": ctx.position, "commit_ts": ctx.commit_ts,
                                    "row_index": row_index})
    return build_checked(ChangeEvent, {
        "id": binlog_message_id(ctx.id_scope, ctx.position, row_index), "source": source,
        "db": db, "table": table, "op": op, "pk": pk, "before": before, "after": after,
        "version": binlog_version(ctx.ordinal, row_index), "keys": (),
        "schema_version": ENVELOPE_VERSION, "extra": {}})


STATEMENT_EXCERPT = 200     # characters of the statement a table-level event carries


def table_change(ctx: TxnContext, index: int, partition: int, db: str, table: str,
                 reason: str, statement: str) -> ChangeEvent:
    """The copy, for ``partition``, of a table-level event (op ``truncate``)."""
    source = build_checked(Source, {"kind": "binlog", "server": ctx.server,
                                    "position": ctx.position, "commit_ts": ctx.commit_ts,
                                    "row_index": index})
    return build_checked(ChangeEvent, {
        "id": table_event_id(ctx.id_scope, ctx.position, index, partition), "source": source,
        "db": db, "table": table, "op": "truncate", "pk": (), "before": None, "after": None,
        "version": binlog_version(ctx.ordinal, index), "keys": (),
        "schema_version": TABLE_ENVELOPE_VERSION,
        "extra": {"reason": reason, "statement": statement[:STATEMENT_EXCERPT]}})


def needed_columns(mapping) -> frozenset[str] | None:
    """The columns the consumer reads for ``mapping`` (key fields; update mode also the value
    and version columns), or None: every column (update mode without ``value_columns``, or a
    table without key templates, such as the heartbeat, whose consumer reads its columns)."""
    if not mapping.keys or (mapping.updates and mapping.value_columns is None):
        return None
    if mapping.ignore_columns:          # the consumer compares every column but those
        return None
    cols = {f for t in mapping.keys for f in t.fields} | (mapping.watch_columns or set())
    if mapping.updates:
        cols.update(mapping.value_columns)
        if mapping.version_column:
            cols.add(mapping.version_column)
    return frozenset(cols)


def key_columns(mapping) -> frozenset[str]:
    """What an invalidate-only event keeps: the key fields and the version column."""
    cols = {f for t in mapping.keys for f in t.fields}
    if mapping.version_column:
        cols.add(mapping.version_column)
    return frozenset(cols)


def trimmed(event: ChangeEvent, keep: frozenset[str]) -> ChangeEvent:
    """``event`` with row images reduced to ``keep`` plus the primary key."""
    keep = keep | {c for c, _ in event.pk}
    return _with(event, before=trim_image(event.before, keep), after=trim_image(event.after, keep))


def invalidate_only(event: ChangeEvent, keep: frozenset[str], reason: str) -> ChangeEvent:
    """The keys-only form of an event too large for Kafka: the consumer invalidates its keys
    (update mode: fenced deletes) and writes no value. Envelope version 2, so a consumer that
    predates it dead-letters it instead of writing a partial value."""
    small = trimmed(event, keep)
    return _with(small, schema_version=TABLE_ENVELOPE_VERSION,
                 extra={**event.extra, INVALIDATE_ONLY: reason})


def with_extra(event: ChangeEvent, extra: Mapping[str, Any]) -> ChangeEvent:
    """``event`` with ``extra`` added to its ``extra``."""
    return _with(event, extra={**event.extra, **extra})


def trim_image(image, keep: frozenset[str]):
    """``image`` with only the columns in ``keep`` (None stays None)."""
    return None if image is None else {c: v for c, v in image.items() if c in keep}


def _with(event: ChangeEvent, **changes) -> ChangeEvent:
    return build_checked(ChangeEvent, {**event.__dict__, **changes})
