"""Binlog tailer: the binlog source wired to the pipeline, after preflight.

``BinlogSource`` (binlog_source.py) reads the binlog and yields committed groups, its
rows turned into records by ``RowEncoder`` (rowevents.py); ``Pipeline`` (pipeline.py)
packs and sends them, tracks the acknowledgements and moves the checkpoint only past
groups Kafka fully acknowledged, so a crash at any point resumes at a group boundary and
re-publishes with the same deterministic ids; the consumer drops the duplicates.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from cachesync.runtime import startup
from cachesync.runtime.gc_pacing import paced
from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.binlog import settings as binlog_settings
from cachesync.producer_outbox.binlog_source import (STREAM_HEARTBEAT_S, BinlogSource,
                                                     by_position, current_position,
                                                     open_stream)
from cachesync.producer_outbox.unlogged_changes.cascades import Cascades
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog.dumpstream import reader_kind
from cachesync.producer_outbox.unlogged_changes.fkschema import ForeignKeys, keyed
from cachesync.producer_outbox.decode.matched import MatchedTables
from cachesync.runtime.mysql import MySQLParams, binlog_status
from cachesync.producer_outbox.decode.outbox_binlog import OutboxRouter
from cachesync.producer_outbox.publish.pipeline import DRAIN_TIMEOUT_S, Pipeline
from cachesync.producer_outbox.ports import CheckpointStore, Publisher
from cachesync.producer_outbox.binlog.preflight import ServerInfo, check_server
from cachesync.producer_outbox.publish.kafka_publisher import MAX_RECORD_BYTES
from cachesync.producer_outbox.encode.rowevents import RowEncoder
from cachesync.producer_outbox.decode.servertypes import ColumnTypes
from cachesync.producer_outbox.binlog.server_choice import check_resumable
from cachesync.producer_outbox.unlogged_changes.risks import read_risks
from cachesync.schema.mapping import MappingSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TailerOptions:
    """The ``tailer`` settings section as loaded, plus what the wiring decides (topic, filter).

    The settings are declared once, in TailerSettings, and read from ``settings``.
    """

    topic: str
    settings: TailerSettings = TailerSettings()
    # (db, table, row image) -> False drops the row; used to publish only this
    # tailer's own heartbeat row (cachesync.producer_outbox.binlog.heartbeat.own_rows_only)
    row_filter: Callable[[str, str, Mapping[str, Any]], bool] | None = None
    heartbeat_s: float = STREAM_HEARTBEAT_S
    start: Checkpoint | None = None     # tail from here instead of the stored checkpoint
    max_record_bytes: int = MAX_RECORD_BYTES    # a larger event goes out invalidate-only
    cluster: str = ""       # source.id: enters every message id (several clusters, one topic)
    # the tailer made its publisher (build_tailer): run() closes it when it ends, so a
    # restarted tailer leaves no producer (or producer process) behind
    owns_publisher: bool = False
    # sends unacknowledged this long stop the run with KafkaUnreachable (None: wait for Kafka)
    outage_after_s: float | None = None
    drain_timeout_s: float = DRAIN_TIMEOUT_S    # a clean stop waits this long for the last acks


class _Count:
    """A counter of one part of the tailer (``path``: dotted attributes from the tailer; 0
    before that part exists), read by metrics; ``name``: the part's name for it (default:
    the tailer's)."""

    def __init__(self, path: str, name: str | None = None):
        self._path, self._name = path.split("."), name

    def __set_name__(self, owner, name: str) -> None:
        self._name = self._name or name

    def __get__(self, tailer, owner=None):
        part = tailer
        for attribute in self._path:
            part = getattr(part, attribute)
            if part is None:
                return 0
        return getattr(part, self._name)


class Tailer:
    """Reads the binlog from the stored checkpoint and publishes mapped tables' rows."""

    published = _Count("pipeline")          # rows handed to the publisher
    acked = _Count("pipeline")              # rows Kafka acknowledged
    table_events = _Count("pipeline")       # table-level changes (each to every partition)
    oversized = _Count("encoder")           # rows over the record limit: invalidate-only
    partial_rows = _Count("encoder")        # rows logged with a partial image
    unkeyable = _Count("encoder")           # rows whose key could not be rendered
    json_unknown = _Count("encoder")        # partial JSON updates whose after is unknown
    undecodable_rows = _Count("encoder")    # rows events not decoded: table invalidated
    versions_not_newer = _Count("source")   # GTIDs that did not advance the history
    undecoded_events = _Count("source")     # events with rows cachesync cannot decode
    # parent rows whose unlogged foreign-key cascade reached a mapped table, and the
    # table-level events cascades caused
    fk_cascade_rows = _Count("encoder.cascades", "cascade_rows")
    fk_cascade_tables = _Count("encoder.cascades", "cascade_tables")
    # outbox events published from the binlog (tailer.outbox_tables), and outbox rows
    # published without a payload or keys that were not valid JSON
    outbox_events = _Count("encoder.outbox", "events")
    outbox_invalid = _Count("encoder.outbox", "invalid")
    # 1 when this tailer's run stopped because Kafka acknowledged nothing for
    # tailer.kafka_outage_after_s
    kafka_outages = _Count("pipeline")

    @property
    def outage_applied(self) -> int:
        """Events applied to Redis directly after this tailer's run stopped for a Kafka
        outage (the direct runs cachesync.kafka_outage adds to ``outage_fallbacks``)."""
        return sum(direct.engine.stats.applied for direct in self.outage_fallbacks)

    @property
    def schema_read_failures(self) -> int:
        """Reads of the server's schema that failed: column types, foreign keys, and the
        unlogged-change check at start (binlog filters, grants)."""
        if self.encoder is None:
            return self._unlogged_check_failed
        types, cascades = self.encoder.types, self.encoder.cascades
        return (self._unlogged_check_failed + (types.failures if types is not None else 0)
                + (cascades.read_failures if cascades is not None else 0))

    def __init__(self, mysql: MySQLParams, publisher: Publisher, checkpoints: CheckpointStore,
                 mappings: MappingSet, options: TailerOptions):
        self._mysql, self._publisher, self._checkpoints = mysql, publisher, checkpoints
        self._mappings, self._opts = mappings, options
        self._matched = MatchedTables(mappings)    # exact and pattern-matched tables
        self.pipeline = Pipeline(publisher, checkpoints, options.topic, options.settings,
                                 outage_after_s=options.outage_after_s)
        # the run's read path (``_assemble``), for their counters
        self.encoder: RowEncoder | None = None
        self.source: BinlogSource | None = None
        self.outage_fallbacks: list = []    # direct runs after a Kafka outage (kafka_outage)
        self.unlogged_risks = 0     # what may change mapped tables unlogged (named at start)
        self._unlogged_check_failed = 0     # 1: that check could not run (WARNING)

    @property
    def committed(self) -> Checkpoint | None:
        return self.pipeline.committed

    def stop(self) -> None:
        self.pipeline.stop()

    def preflight(self) -> ServerInfo:
        """Check settings and grants; raises FatalError listing every problem."""
        return check_server(self._mysql.connect, replica=bool(self._opts.settings.source_hosts))

    def current_position(self) -> Checkpoint:
        """The server's current binlog position (after preflight); raises FatalError."""
        return current_position(self._mysql.connect, self.preflight())

    def match_existing(self) -> None:
        """The existing tables of the mapping's patterns (raises AmbiguousTableError)."""
        if self._matched.has_patterns:
            conn = self._mysql.connect(database=None)
            try:
                self._matched.load_existing(conn)
            finally:
                conn.close()

    def binlog_source(self, stream, info: ServerInfo, start: Checkpoint,
                      encoder: RowEncoder | None = None, reopen=None) -> BinlogSource:
        """The change source of ``stream`` (read from ``start``) with this tailer's mappings,
        its rows encoded by ``encoder`` (default: one without the server's column types,
        foreign keys and outbox tables); ``reopen`` as BinlogSource takes it."""
        self.encoder = encoder or RowEncoder(self._mappings, self._matched,
                                             row_filter=self._opts.row_filter,
                                             max_record_bytes=self._opts.max_record_bytes)
        self.source = BinlogSource(stream, info, start, self._mappings, self._matched,
                                   self.encoder, cluster=self._opts.cluster, reopen=reopen)
        return self.source

    def run(self) -> None:
        """Tail until stop(); raises RetryableError/FatalError when publishing fails. The
        checkpoint store, and the publisher if the tailer owns it, are closed at the end.
        The collector is paced for the loop while it runs (cachesync.runtime.gc_pacing)."""
        try:
            with paced():
                self._run()
        finally:
            self._close()

    def _run(self) -> None:
        info = self.preflight()
        startup.mark("preflight")
        reports = info.binlog_settings()
        log.info("%s", binlog_settings.summary(reports))
        for report in reports:
            log.debug("binlog setting %s", report.line())
        self.match_existing()
        self.unlogged_risks = self._name_unlogged(info)
        start = self._start_position(info)
        self.pipeline.start_at(start)
        source = self._assemble(info, start)
        startup.done("first binlog read")
        try:
            self.pipeline.run(source)
        finally:
            source.close()
            self.pipeline.drain(self._opts.drain_timeout_s)

    def _assemble(self, info: ServerInfo, start: Checkpoint) -> BinlogSource:
        """The read path, built in one place from the bottom up: the binlog stream (reader
        and framing), the row encoder with what the server says (column types, foreign
        keys, outbox tables), and the change source over both, which the pipeline runs."""
        encoder = RowEncoder(self._mappings, self._matched, row_filter=self._opts.row_filter,
                             max_record_bytes=self._opts.max_record_bytes,
                             outbox=self._outbox_router(info), types=self._column_types(),
                             cascades=self._cascades())
        t = self._opts.settings
        log.info("tailer starting at %s (server %s, tables %s, %s binlog reader)",
                 start.describe(), info.identity, ", ".join(m.table for m in self._mappings.entries),
                 reader_kind(t.reader))

        def opened(position: bool):
            # packs span transactions when the reader says it is idle (sent then, or after
            # tailer.pack_linger_ms while busy)
            return open_stream(self._mysql.client_options(), t.server_id, t.reader, info,
                               start, self._opts.heartbeat_s,
                               idle_wait_s=t.pack_linger_ms / 1000 if t.pack_rows > 1 else 0.0,
                               position=position, read_linger_s=t.read_linger_ms / 1000,
                               before_wait=self.pipeline.source_waits)
        # a stored checkpoint of this server: at its file and position, confirmed by its
        # GTID state (else by GTID, BinlogSource); an operator's start as given
        if self._opts.start is None and by_position(start, info):
            return self.binlog_source(opened(True), info, start, encoder,
                                      reopen=lambda: opened(False))
        return self.binlog_source(opened(False), info, start, encoder)

    def _column_types(self) -> ColumnTypes:
        """The mapped tables' column types, read now (and after DDL)."""
        types = ColumnTypes(self._mysql.connect, self._matched.statement_tables())
        types.load()
        return types

    def _cascades(self) -> Cascades:
        """The foreign keys that cascade into mapped tables, read now (and after DDL)."""
        keys = ForeignKeys(self._mysql.connect, keyed(self._mappings))
        keys.load()
        return Cascades(keys, self._mappings)

    def _start_position(self, info: ServerInfo) -> Checkpoint:
        """``options.start`` (re-tail from an operator's position), else the stored
        checkpoint, else (first start) the server's current position."""
        if self._opts.start is not None:
            log.warning("tailer re-tailing from %s, not from its stored checkpoint; "
                        "duplicates are skipped by the consumer's dedup store",
                        self._opts.start.describe())
            return replace(self._opts.start, server=info.identity)
        stored = self._checkpoints.load()
        check_resumable(stored, info.identity)
        return stored or current_position(self._mysql.connect, info)

    def _name_unlogged(self, info: ServerInfo) -> int:
        """WARNING for each way mapped tables may change without the binlog saying so
        (``unlogged``); how many. A server that does not answer is said, not fatal."""
        schemas = self._mappings.keyed_schemas()
        try:
            conn = self._mysql.connect(database=None)
            try:
                risks = read_risks(conn, info.flavor, schemas, binlog_status)
            finally:
                conn.close()
        except Exception as e:      # pymysql's errors: the check is advice, the tailer goes on
            self._unlogged_check_failed = 1
            log.warning("could not check for changes the binlog does not carry (binlog "
                        "filters, accounts that may set sql_log_bin=0): %s", e)
            return 0
        for risk in risks:
            log.warning("mapped tables may change without binlog events: %s (fix: %s)",
                        risk.line(), risk.fix)
        return len(risks)

    def _outbox_router(self, info: ServerInfo) -> OutboxRouter | None:
        """The router of tailer.outbox_tables, or None when none are configured."""
        names = self._opts.settings.outbox_table_names
        if not names:
            return None
        log.info("tailer publishing the outbox events of %s from the binlog",
                 ", ".join(sorted(f"{db}.{t}" for db, t in names)))
        conn = self._mysql.connect()
        try:    # the server's time zone offset: outbox ``created_at`` values are its local time
            with conn.cursor() as cur:
                cur.execute("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")
                utc_offset_s = float(cur.fetchone()[0])
        finally:
            conn.close()
        return OutboxRouter(names, info.identity, utc_offset_s, self._opts.max_record_bytes)

    def _close(self) -> None:
        owned = [self._publisher] if self._opts.owns_publisher else []
        if owned and self.pipeline.kafka_outages:
            # Kafka does not serve: what the publisher holds is read again, nothing waits
            # for it to give up its sends
            threading.Thread(target=self._close_parts, args=(owned, 0),
                             name="cachesync-publisher-close", daemon=True).start()
            owned = []
        self._close_parts([self._checkpoints, *owned])

    def _close_parts(self, parts: list, *args) -> None:
        for part in parts:
            try:
                close = getattr(part, "close", None)
                if close is not None:
                    close(*args)
            except Exception as e:     # closing must not hide why the tailer ended
                log.warning("tailer: closing %s failed: %s", type(part).__name__, e)
