"""Binlog tailer: python-mysql-replication -> ChangeEvent -> Kafka, checkpointed.

The checkpoint only moves past transactions whose every row Kafka acknowledged
(InflightTracker), so a crash at any point resumes at a transaction boundary and
re-publishes with the same deterministic ids; the consumer drops the duplicates.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pymysql
from kafka.errors import KafkaError
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (GtidEvent, HeartbeatLogEvent, MariadbGtidEvent,
                                      QueryEvent, RotateEvent, XidEvent)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cachesync.config import TailerSettings
from cachesync.producer_outbox.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.fastrows import decode_rows
from cachesync.producer_outbox.inflight import InflightTracker
from cachesync.producer_outbox.mysql import MySQLParams
from cachesync.producer_outbox.packing import Pack, Packer
from cachesync.producer_outbox.preflight import ServerInfo, check_server
from cachesync.producer_outbox.rows import TxnContext, row_change
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.event import encode
from cachesync.schema.gtid import GtidState, parse_gtid
from cachesync.schema.ids import file_pos_ordinal
from cachesync.schema.keys import kafka_key
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)

_ROW_EVENTS = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
STREAM_HEARTBEAT_S = 1.0    # the binlog stream's heartbeat period (the server's, not our row's)
_TXN_MARKERS = {"BEGIN", "COMMIT"}
# MySQL's GtidEvent ("uuid:gno") and MariaDB's ("domain-server-seq"); both open a transaction.
_GTID_EVENTS = (GtidEvent, MariadbGtidEvent)


@dataclass(frozen=True)
class TailerOptions:
    """The ``tailer`` settings section as loaded, plus what the wiring decides (topic, filter).

    The settings are declared once, in TailerSettings; the properties only read them.
    """

    topic: str
    settings: TailerSettings = TailerSettings()
    # (db, table, row image) -> False drops the row; used to publish only this
    # tailer's own heartbeat row (cachesync.producer_outbox.heartbeat.own_rows_only)
    row_filter: Callable[[str, str, Mapping[str, Any]], bool] | None = None
    heartbeat_s: float = STREAM_HEARTBEAT_S

    @property
    def replica_server_id(self) -> int:
        return self.settings.server_id

    @property
    def max_inflight(self) -> int:
        return self.settings.max_inflight

    @property
    def pack_rows(self) -> int:
        return self.settings.pack_rows

    @property
    def pack_bytes(self) -> int:
        return self.settings.pack_bytes

    @property
    def checkpoint_interval_s(self) -> float:
        return self.settings.checkpoint_interval_s


class Tailer:
    """Reads the binlog from the stored checkpoint and publishes mapped tables' rows."""

    def __init__(self, mysql: MySQLParams, publisher, checkpoints: MySQLCheckpointStore,
                 mappings: MappingSet, options: TailerOptions):
        self._mysql = mysql
        self._publisher = publisher
        self._checkpoints = checkpoints
        self._mappings = mappings
        self._opts = options
        self._tracker: InflightTracker[Checkpoint] = InflightTracker()
        self._packer = Packer(options.pack_rows, options.pack_bytes) if options.pack_rows > 1 else None
        self._partitions = 0          # the topic's partition count, read once per transaction
        self._lock = threading.Lock()
        self._failure: Exception | None = None
        self._stop = threading.Event()
        self.published = 0      # rows handed to the publisher
        self.acked = 0          # rows Kafka acknowledged
        self.committed: Checkpoint | None = None

    def stop(self) -> None:
        self._stop.set()

    def preflight(self) -> ServerInfo:
        """Check settings and grants; raises FatalError listing every problem."""
        return check_server(self._mysql.connect)

    def run(self) -> None:
        """Tail until stop(); raises RetryableError/FatalError when publishing fails."""
        info = self.preflight()
        start = self._checkpoints.load() or self._current_position(info)
        self._checkpoints.save(start)
        self.committed = start
        log.info("tailer starting at %s (server %s, tables %s)", start.describe(),
                 info.identity, ", ".join(self._mappings.tables))
        stream = self._open_stream(info, start)
        try:
            self._loop(stream, info, start)
        finally:
            stream.close()
            self._drain()

    def _open_stream(self, info: ServerInfo, start: Checkpoint) -> BinLogStreamReader:
        kwargs = {}
        if start.gtid is not None:
            # MariaDB: @slave_connect_state; MySQL: COM_BINLOG_DUMP_GTID with the GTID set.
            kwargs.update(is_mariadb=info.flavor == "mariadb", auto_position=start.gtid)
        else:
            kwargs.update(log_file=start.log_file, log_pos=start.log_pos, resume_stream=True,
                          is_mariadb=info.flavor == "mariadb")
        return BinLogStreamReader(
            connection_settings=self._mysql.client_options(),
            server_id=self._opts.replica_server_id, blocking=True,
            only_events=[*_GTID_EVENTS, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
                         *_ROW_EVENTS],
            only_schemas=list(self._mappings.schemas),
            only_tables=sorted({m.name for m in self._mappings.tables.values()}),
            slave_heartbeat=self._opts.heartbeat_s, **kwargs)

    def _current_position(self, info: ServerInfo) -> Checkpoint:
        """First start: begin at the server's current position (history is already cached)."""
        conn = self._mysql.connect()
        try:
            with conn.cursor() as cur:
                gtid = None
                if info.flavor == "mariadb":
                    cur.execute("SELECT @@gtid_binlog_pos")
                    gtid = cur.fetchone()[0]
                else:
                    cur.execute("SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed")
                    mode, executed = cur.fetchone()
                    if str(mode).upper() == "ON":
                        gtid = str(GtidState.parse(executed)) or None
                row = _binlog_status(cur)
        finally:
            conn.close()
        if row is None:
            raise FatalError("binary logging is off (SHOW BINARY LOG STATUS is empty): set log_bin")
        return Checkpoint(info.identity, gtid, row[0], int(row[1]))

    def _loop(self, stream: BinLogStreamReader, info: ServerInfo, start: Checkpoint) -> None:
        try:
            gtid_state = GtidState.parse(start.gtid)
        except ValueError as e:
            raise FatalError(f"stored checkpoint has an unreadable GTID state: {e}") from e
        txn = ctx = None
        row_index = 0
        last_save = time.monotonic()

        def close_txn():
            if self._packer is not None:
                for pack in self._packer.drain():
                    self._send_pack(pack, txn)
            cp = Checkpoint(info.identity, str(gtid_state) or None,
                            stream.log_file, stream.log_pos)
            with self._lock:
                self._tracker.close(txn, cp)
            if cp.gtid is not None:
                # python-mysql-replication reconnects on its own from auto_position;
                # keep it at the last transaction boundary so a dropped connection
                # resumes here instead of replaying everything since start.
                stream.auto_position = cp.gtid

        for event in stream:
            self._raise_if_failed()
            if isinstance(event, _GTID_EVENTS):
                if txn is not None:
                    # Every event group ends in XID, COMMIT or DDL. A new GTID
                    # with one open means the stream was cut and replayed (the library
                    # reconnects silently): restart from the stored checkpoint rather
                    # than declare half a transaction done.
                    raise RetryableError(f"binlog stream broke inside transaction {ctx.position}")
                gtid = parse_gtid(event.gtid)
                gtid_state.add(gtid)
                ctx = TxnContext(info.identity, str(gtid), gtid.ordinal, float(event.timestamp))
                txn, row_index = self._tracker_open(), 0
            elif type(event) in _ROW_EVENTS:
                if ctx is None:  # no GTID: the transaction starts at its first row event
                    position = f"{stream.log_file}:{stream.log_pos}"
                    ctx = TxnContext(info.identity, position,
                                     file_pos_ordinal(stream.log_file, stream.log_pos),
                                     float(event.timestamp))
                    txn, row_index = self._tracker_open(), 0
                row_index = self._publish_rows(event, ctx, txn, row_index)
            elif isinstance(event, (XidEvent, QueryEvent)):
                text = _query_text(event) if isinstance(event, QueryEvent) else "COMMIT"
                if text not in _TXN_MARKERS:
                    # DDL: its own event group. Row decoding keeps working because
                    # binlog_row_metadata=FULL puts column names in every table map.
                    log.info("DDL in binlog: %s", text[:200])
                if text != "BEGIN" and txn is not None:
                    close_txn()
                    txn = ctx = None
            if time.monotonic() - last_save >= self._opts.checkpoint_interval_s:
                self._save_checkpoint()
                last_save = time.monotonic()
            if self._stop.is_set():
                break

    def _tracker_open(self):
        if self._packer is not None:
            self._partitions = len(self._publisher.partitions(self._opts.topic))
        with self._lock:
            return self._tracker.open(None)

    def _publish_rows(self, event, ctx: TxnContext, txn, row_index: int) -> int:
        op = _ROW_EVENTS[type(event)]
        # only_schemas x only_tables also admits unmapped pairs (billing.users when
        # app.users and billing.invoices are mapped); those rows are not ours.
        if self._mappings.get(event.schema, event.table) is None:
            return row_index
        rows = decode_rows(event)      # the per-table fast decoder, or None: the library's
        for row in rows if rows is not None else event.rows:
            if op == "update":
                before, after = row["before_values"], row["after_values"]
            elif op == "insert":
                before, after = None, row["values"]
            else:
                before, after = row["values"], None
            if self._opts.row_filter is not None and not self._opts.row_filter(
                    event.schema, event.table, after if after is not None else before):
                row_index += 1       # ids of the rows that follow do not depend on the filter
                continue
            change = row_change(ctx, row_index, event.schema, event.table, op,
                                event.primary_key, before, after)
            row_index += 1
            key = kafka_key(change.db, change.table, change.pk)
            if self._packer is None:
                self._send(key, encode(change), change.id, txn, 1, None)
            else:
                full = self._packer.add(change.db, change.table, key, encode(change), change.id,
                                        self._partitions)
                if full is not None:
                    self._send_pack(full, txn)
        return row_index

    def _send_pack(self, pack: Pack, txn) -> None:
        self._send(pack.key, pack.record_value(), pack.msg_id, txn, pack.rows, pack.partition)

    def _send(self, key: str, value: bytes, msg_id: str, txn, rows: int,
              partition: int | None) -> None:
        with self._lock:
            self._tracker.sent(txn, rows)
        try:
            self._publisher.send(self._opts.topic, key, value, msg_id,
                                 on_ack=lambda: self._on_ack(txn, rows), on_error=self._on_error,
                                 partition=partition)
        except KafkaError as e:   # e.g. buffer full / metadata timeout, raised synchronously
            raise RetryableError(f"Kafka send failed: {e}") from e
        self.published += rows
        if self._tracker.pending >= self._opts.max_inflight:
            self._publisher.flush()
            self._raise_if_failed()

    def _on_ack(self, txn, rows: int) -> None:
        with self._lock:
            self._tracker.acked(txn, rows)
            self.acked += rows

    def _on_error(self, error: Exception) -> None:
        # Called on the Kafka I/O thread: record it; the main loop stops the tailer
        # before the checkpoint can move past the failed send.
        self._failure = error

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise RetryableError(f"Kafka send failed after retries, stopping before the "
                                 f"checkpoint moves: {self._failure}") from self._failure

    def _save_checkpoint(self) -> None:
        with self._lock:
            safe = self._tracker.advance()
        if safe is not None:
            self._checkpoints.save(safe)
            self.committed = safe

    def _drain(self) -> None:
        """On a clean stop: wait for acks, then store the last safe checkpoint."""
        if self._failure is None:
            self._publisher.flush(timeout_s=30)
        if self._failure is None:
            self._save_checkpoint()


_ER_PARSE_ERROR = 1064


def _binlog_status(cur):
    """(file, position, ...) of the server's binlog: SHOW BINARY LOG STATUS (MySQL >= 8.2;
    8.4 removed SHOW MASTER STATUS), else SHOW MASTER STATUS (MariaDB, older MySQL)."""
    try:
        cur.execute("SHOW BINARY LOG STATUS")
    except pymysql.err.ProgrammingError as e:
        if not e.args or e.args[0] != _ER_PARSE_ERROR:
            raise
        cur.execute("SHOW MASTER STATUS")
    return cur.fetchone()


def _query_text(event: QueryEvent) -> str:
    query = event.query
    return (query.decode("utf-8", "replace") if isinstance(query, bytes) else query).strip()

