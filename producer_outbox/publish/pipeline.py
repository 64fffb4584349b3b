"""The producer pipeline: pack -> send -> acknowledge -> in-flight tracking -> checkpoint.

Any change source feeds it (``ports.ChangeSource``: the binlog source, a memory source in
tests). The checkpoint only moves past groups whose every record Kafka acknowledged
(``InflightTracker``), so a crash at any point resumes at a group boundary and re-publishes
with the same deterministic ids; the consumer drops the duplicates. A send that fails
after the publisher's retries stops the pipeline before the checkpoint passes it.

XA: a group the source marks ``Hold`` keeps its records here (``xa.XaGroup``) instead of
sending them; ``Prepared`` keeps it, still open in the tracker (which holds the checkpoint
before it), until ``Decide`` sends it or drops it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Callable

from kafka.errors import KafkaError

from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.publish.inflight import InflightTracker
from cachesync.producer_outbox.encode.packing import Pack, Packer
from cachesync.producer_outbox.ports import (Begin, ChangeSource, CheckpointStore, Commit,
                                             Decide, Group, Hold, Idle, Prepared, Publisher,
                                             Pulse, Record, Release, TableEvent, Unhold)
from cachesync.producer_outbox.publish.kafka_publisher import DELIVERY_TIMEOUT_MS, is_permanent
from cachesync.producer_outbox.decode.rows import STATEMENT_EXCERPT, TxnContext, table_change
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.producer_outbox.binlog.xa import Prepared as PreparedGroup, XaGroup
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.event import encode
from cachesync.schema.flushes import mark
from cachesync.schema.keys import kafka_key

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30        # a clean stop waits this long for the last acknowledgements
# A healthy Kafka client settles (acks or fails) every send within its delivery timeout;
# one that has not, this long after it, is wedged (kafka-python has been seen to keep
# batches forever after a broker restart): the pipeline gives it up.
DELIVERY_TIMEOUT_S = DELIVERY_TIMEOUT_MS / 1000
WEDGED_MARGIN_S = 30.0
# back-pressure: once tailer.max_inflight rows wait for Kafka, reading resumes when this share
# of them is left (not after the last one: after a broker outage the binlog behind the
# backlog is read while the backlog's acknowledgements come in)
RESUME_SHARE = 0.5
ROOM_WAIT_S = 0.5           # how often a wait for room checks for a failed or wedged client
OUTAGE_CHECK_S = 0.05       # how often a running pipeline checks for unacknowledged sends


class PublisherWedged(RetryableError):
    """Sends stayed unsettled past the publisher's delivery timeout plus a margin: the
    client is stuck; replace it and send again from the checkpoint (or the leases)."""


class KafkaUnreachable(RetryableError):
    """Sends stayed unacknowledged for the pipeline's ``outage_after_s``: Kafka does not
    serve the topic now. The checkpoint stays at what Kafka acknowledged; the tailer's
    ``tailer.on_kafka_outage`` says what happens until it serves again. ``lookback``: the
    checkpoint stored ``tailer.kafka_outage_lookback_s`` before the last acknowledgement (or
    the run's first), where applying the changes directly starts."""

    def __init__(self, message: str, lookback: Checkpoint | None = None):
        super().__init__(message)
        self.lookback = lookback


class Pipeline:
    """Publishes what a change source yields to ``topic`` and moves the checkpoint."""

    def __init__(self, publisher: Publisher, checkpoints: CheckpointStore, topic: str,
                 settings: TailerSettings = TailerSettings(),
                 clock: Callable[[], float] = time.monotonic,
                 outage_after_s: float | None = None):
        """``clock``: the wedged-publisher and outage checks'; ``outage_after_s``: raise
        KafkaUnreachable when sends stay unacknowledged this long (None: wait for Kafka)."""
        self._publisher, self._checkpoints, self._topic = publisher, checkpoints, topic
        self._clock = clock
        self._settings = settings
        self._pack_linger_s = settings.pack_linger_ms / 1000   # an open pack's longest wait
        self._tracker: InflightTracker[Checkpoint] = InflightTracker()
        self._packer = (Packer(settings.pack_rows, settings.pack_bytes)
                        if settings.pack_rows > 1 else None)
        self._partitions = 0          # the topic's partition count, read once per group
        self._partitions_read = -1.0  # when (monotonic), for packs spanning groups
        self._span = False            # packs span groups (the source signals idleness)
        # the flush header's process token and the last flush marked (schema.flushes)
        self._flush_token, self._flushes = os.urandom(4).hex(), 0
        self._lock = threading.Lock()  # acks arrive on the publisher's thread
        self._room = threading.Condition(self._lock)    # back-pressure: acks made room
        self._resume_at: int | None = None   # what a wait for room waits for (_unacked rows)
        # rows handed to the publisher and not acknowledged: the tracker's pending rows less
        # those counted in flight before their pack was sent (packs spanning groups)
        self._unacked = 0
        self._failure: Exception | None = None
        self._refused = False       # a send raised at once (buffer full, no metadata)
        self._unsaved: list = []    # acknowledged groups a store not in_order failed to save
        self._stop = threading.Event()
        # sends unsettled this long mean a wedged client (the publisher may say its timeout)
        self._settle_s = (getattr(publisher, "delivery_timeout_s", None)
                          or DELIVERY_TIMEOUT_S) + WEDGED_MARGIN_S
        self._wedged = False
        self.outage_after_s = outage_after_s
        # (clock, checkpoint) of the stores of the last kafka_outage_lookback_s and the one
        # before them (KafkaUnreachable.lookback)
        self._stored: deque[tuple[float, Checkpoint]] = deque()
        self.kafka_outages = 0      # 1: this pipeline stopped because Kafka did not acknowledge
        self._txn = None                            # the open group's tracker entry
        self._xa: XaGroup | None = None             # the open group is XA: records held
        self._prepared: dict[str, PreparedGroup] = {}    # xid -> group awaiting its decision
        self.published = 0      # rows handed to the publisher
        self.acked = 0          # rows Kafka acknowledged
        self.table_events = 0   # table-level changes published (each to every partition)
        self.committed: Checkpoint | None = None

    def stop(self) -> None:
        self._stop.set()

    def start_at(self, checkpoint: Checkpoint) -> None:
        """Store where the source starts (the first checkpoint of a run)."""
        self._checkpoints.save(checkpoint)
        self.committed = checkpoint
        self._remember(checkpoint)

    def run(self, source: ChangeSource) -> None:
        """Publish the source's changes until it ends or stop(); raises RetryableError or
        FatalError when publishing fails (the checkpoint stays before the failed record).
        The checkpoint is saved (every checkpoint_interval_s) and a stop seen at a Commit,
        a Pulse or an Idle (ports). Packs span groups when the source says when it is idle
        (``signals_idle``: it yields ``Idle``, where they are sent)."""
        self._span = self._packer is not None and getattr(source, "signals_idle", False)
        save_every, last_save = self._settings.checkpoint_interval_s, time.monotonic()
        check_outage = self.outage_after_s is not None
        last_check = last_save
        handlers = self._handlers()
        record = self._record
        for item in source.changes():
            if self._failure is not None:
                self._raise_if_failed()
            kind = type(item)
            if kind is Record:          # most items: no lookup
                record(item)
                continue
            handlers[kind](item)
            if kind is Pulse or kind is Commit or kind is Group or kind is Idle:
                # after each source event
                now = time.monotonic()
                if check_outage and now - last_check >= OUTAGE_CHECK_S:
                    last_check = now
                    self._raise_if_unreachable()
                if now - last_save >= save_every:
                    self.save_checkpoint()
                    last_save = time.monotonic()
                    self._raise_if_wedged()
                if self._stop.is_set():
                    break

    def _handlers(self) -> dict:
        nothing = lambda _item: None      # noqa: E731  (a Pulse: only the checks after it)
        return {Begin: self._begin, Record: self._record, TableEvent: self._table_event,
                Commit: self._commit, Group: self._group, Hold: self._hold,
                Release: self._release_one_phase, Unhold: self._unhold,
                Prepared: self._prepare, Decide: self._decide, Pulse: nothing,
                Idle: lambda _item: self.flush_packs()}

    # -- groups -------------------------------------------------------------------------
    def _begin(self, _item: Begin) -> None:
        self._read_partitions()
        with self._lock:
            self._txn = self._tracker.open(None)

    def _read_partitions(self) -> None:
        """The topic's partition count for the packs of the group starting: read at each
        group, or each second when packs span groups (they share one count: flushed first).
        Without packs it is read once, before the first group, when an outage limit is set:
        a publisher that cannot reach Kafka then stops the run within the limit
        (KafkaUnreachable) instead of leaving the first send to wait for its start."""
        if self._packer is None:
            if self.outage_after_s is not None and self._partitions_read < 0:
                self._partition_ids()
                self._partitions_read = time.monotonic()
            return
        if self._span:
            if time.monotonic() - self._partitions_read < 1.0:
                return
            self.flush_packs()
        self._partitions = len(self._partition_ids())
        self._partitions_read = time.monotonic()

    def _partition_ids(self) -> list[int]:
        """The topic's partitions. With ``outage_after_s`` the publisher waits that long for
        them, and no answer is an outage as unacknowledged sends are (KafkaUnreachable)."""
        if self.outage_after_s is None:
            return self._publisher.partitions(self._topic)
        try:
            return self._publisher.partitions(self._topic, timeout_s=self.outage_after_s)
        except RetryableError as e:
            self.kafka_outages = 1
            with self._lock:
                stalled = self._tracker.stalled_since()
            raise KafkaUnreachable(f"Kafka gave no metadata for the topic within "
                                   f"{self.outage_after_s:g}s: {e}", self._lookback(
                                       self._clock() - self.outage_after_s if stalled is None
                                       else stalled)) from e

    def _commit(self, item: Commit) -> None:
        self._close(item.checkpoint)

    def _group(self, item: Group) -> None:
        """A whole group of records. With packs spanning groups (the fast reader) its rows
        count as in flight before any enters a pack, and the group is opened and closed in
        one step; the checkpoint still waits for every one of them (the tracker). Otherwise
        as its Begin, Records and Commit."""
        if not self._span or self._xa is not None:
            self._begin(None)
            for record in item.records:
                self._record(record)
            self._close(item.checkpoint)
            return
        self._read_partitions()
        records = item.records
        with self._lock:
            txn = self._tracker.open(item.checkpoint)
            if records:
                self._tracker.sent(txn, len(records), self._idle_stamp())
            self._tracker.close(txn)
        add, limit, partitions = self._packer.add, self._settings.pack_bytes, self._partitions
        for db, table, key, value, msg_id in records:
            if len(value) > limit:      # alone, after every pack opened before
                self.flush_packs()
                self._send(key, value, msg_id, [(txn, 1)], 1, None, counted=True)
                continue
            full = add(db, table, key, value, msg_id, partitions, txn)
            if full is not None:
                self._send_pack(full, txn)
        if time.monotonic() - self._packer.opened_at >= self._pack_linger_s:
            self.flush_packs()

    def _close(self, checkpoint: Checkpoint, hold: bool = False) -> None:
        """End the open group; ``hold``: a prepared XA group stays open in the tracker."""
        if self._packer is not None and (not self._span or self._xa is not None or hold
                                         or time.monotonic() - self._packer.opened_at
                                         >= self._pack_linger_s):
            self.flush_packs(self._txn)
        if not hold:
            with self._lock:
                self._tracker.close(self._txn, checkpoint)
        self._txn = None

    # -- records ------------------------------------------------------------------------
    def _record(self, r: Record) -> None:
        """Send one encoded event, alone or in the pack of its (db, table, partition)."""
        txn = self._txn
        db, table, key, value, msg_id = r
        if self._packer is None:
            self._send(key, value, msg_id, txn, 1, None)
        elif len(value) > self._settings.pack_bytes:   # alone, after every pack opened before
            self.flush_packs(txn)
            self._send(key, value, msg_id, txn, 1, None)
        else:
            counted = txn if self._span and self._xa is None else None
            if counted is not None:     # a spanning pack: its rows are in flight from now on
                with self._lock:
                    self._tracker.sent(txn, 1, self._idle_stamp())
            full = self._packer.add(db, table, key, value, msg_id, self._partitions, counted)
            if full is not None:
                self._send_pack(full, txn)

    def _table_event(self, item: TableEvent) -> None:
        self._table_events([item.change], item.statement, item.ctx, item.index)

    def _table_events(self, changes: list[TableChange], statement: str, ctx: TxnContext,
                      index: int) -> None:
        """One table-level event per changed mapped table, a copy to every partition so that
        it is ordered after the table's earlier rows wherever they went."""
        self.flush_packs(self._txn)       # rows packed so far go first, in every partition
        partitions = self._partition_ids()
        for change in changes:
            if self._xa is not None:        # held: an overflow or late decision still names it
                self._xa.touch(change.db, change.table)
            log.warning("table-level change of %s.%s (%s): every cached key of the table will "
                        "be invalidated; statement: %s", change.db, change.table, change.reason,
                        statement[:STATEMENT_EXCERPT],
                        extra={"table": f"{change.db}.{change.table}"})
            for partition in partitions:
                event = table_change(ctx, index, partition, change.db, change.table,
                                     change.reason, statement)
                self._send(kafka_key(event.db, event.table, ()), encode(event), event.id,
                           self._txn, 1, partition, row=False)
            self.table_events += 1
            index += 1

    def flush_packs(self, txn=None) -> None:
        """Send every open pack (``txn``: the group of packs not counted yet); when they go
        to several partitions, the last one of each partition carries the flush header
        (schema.flushes), so that a consumer applies them as one batch."""
        if self._packer:
            packs = self._packer.drain()
            marks = self._flush_marks(packs)
            for i, pack in enumerate(packs):
                self._send_pack(pack, txn, marks.get(i))

    def _flush_marks(self, packs: list[Pack]) -> dict[int, bytes]:
        """{index of the last pack of each partition: the flush header} for ``packs``, when
        they touch two partitions or more (else nothing to gather)."""
        last = {pack.partition: i for i, pack in enumerate(packs)}
        if len(last) < 2:
            return {}
        self._flushes += 1
        value = mark(self._flush_token, self._flushes, last)
        return {i: value for i in last.values()}

    def _send_pack(self, pack: Pack, txn, flush: bytes | None = None) -> None:
        if pack.txns:      # rows of groups counted when they entered the pack
            self._send(pack.key, pack.record_value(), pack.msg_id, pack.txns, pack.rows,
                       pack.partition, counted=True, flush=flush)
        else:
            self._send(pack.key, pack.record_value(), pack.msg_id, txn, pack.rows,
                       pack.partition, flush=flush)

    def _send(self, key: str, value: bytes, msg_id: str, txn, rows: int,
              partition: int | None, row: bool = True, counted: bool = False,
              flush: bytes | None = None) -> None:
        """``counted``: ``txn`` is a pack's [group, rows] list, already counted; ``flush``:
        the record's flush header (schema.flushes)."""
        if self._xa is not None and not counted:    # an XA group: held until its XA COMMIT
            self._xa.hold((key, value, msg_id, rows, partition, row), rows)
            return
        if counted:
            with self._lock:
                self._unacked += rows
            on_ack = lambda: self._on_acks(txn)     # noqa: E731
        else:
            with self._lock:
                self._tracker.sent(txn, rows, self._idle_stamp())
                self._unacked += rows
            on_ack = lambda: self._on_ack(txn, rows)    # noqa: E731
        try:
            self._publisher.send(self._topic, key, value, msg_id, on_ack=on_ack,
                                 on_error=self._on_error, partition=partition, flush=flush)
        except KafkaError as e:   # e.g. buffer full / metadata timeout, raised synchronously
            self._refused = True
            if is_permanent(e):
                raise FatalError(f"Kafka refused a record for good ({type(e).__name__}: {e}); "
                                 "not retrying, the checkpoint stays before it") from e
            raise RetryableError(f"Kafka send failed: {e}") from e
        self.published += rows if row else 0
        if self._tracker.pending >= self._settings.max_inflight:
            self._await_room()
            self._raise_if_failed()

    def source_waits(self, alone: bool = False) -> None:
        """The source is about to wait for its server (``alone``: after a transaction that
        came alone, so idleness follows): a publisher that can (``serve_acks``) serves the
        acknowledgements that arrived on this thread now, instead of waking a thread of its
        own for each, and has that thread serve what is still in flight while the source
        waits."""
        serve = getattr(self._publisher, "serve_acks", None)
        if serve is not None:
            serve(alone)

    def _await_room(self) -> None:
        """Back-pressure: wait until the rows sent and not acknowledged are down to
        RESUME_SHARE of ``tailer.max_inflight``, a send failed, or a stop was asked; raises
        PublisherWedged when none was acknowledged for longer than a healthy client needs to
        settle them. (Rows of a group counted in flight before their pack is sent do not
        count here: a group far larger than the bound goes out a pack at a time.)"""
        resume_at = int(self._settings.max_inflight * RESUME_SHARE)
        while not self._stop.is_set():
            self.source_waits()     # the acknowledgements come on the publisher's thread
            with self._room:
                if self._unacked <= resume_at or self._failure is not None:
                    return
                self._resume_at = resume_at
                try:
                    self._room.wait(ROOM_WAIT_S)
                finally:
                    self._resume_at = None
            self._raise_if_unreachable()
            self._raise_if_wedged()

    # -- XA -----------------------------------------------------------------------------
    def _hold(self, _item: Hold) -> None:
        self.flush_packs()              # earlier groups' rows are not held
        self._xa = XaGroup(self._settings.xa_buffer_rows)

    def _unhold(self, _item: Unhold) -> None:
        self._xa = None

    def _release_one_phase(self, item: Release) -> None:
        """XA COMMIT ... ONE PHASE: what the group held goes out as part of it."""
        held, self._xa = self._xa, None
        if held is None:
            return
        if held.overflowed:
            log.warning("XA COMMIT ONE PHASE at %s: %d rows, over tailer.xa_buffer_rows; "
                        "invalidating its tables as a whole", item.ctx.position, held.rows)
            tables = dict.fromkeys([*held.tables, *item.tables])
            self._table_events([TableChange(db, t, "xa_overflow") for db, t in tables],
                               item.statement, item.ctx, item.index)
        else:
            self._release(held, self._txn)

    def _prepare(self, item: Prepared) -> None:
        held, txn = self._xa, self._txn
        self._close(item.checkpoint, hold=True)     # open packs join the held records
        held.xid = item.xid
        held.tables.update(dict.fromkeys(item.tables))   # beside the table-level events held
        self._prepared[item.xid] = PreparedGroup(held, txn, item.checkpoint)
        self._xa = None

    def _decide(self, item: Decide) -> None:
        prepared = self._prepared.pop(item.xid, None)
        if not item.commit:
            if prepared is not None:               # nothing of it is published
                with self._lock:
                    self._tracker.close(prepared.txn, prepared.checkpoint)
                log.info("XA ROLLBACK %s: %d held row(s) dropped", item.xid, prepared.group.rows)
            return
        if prepared is not None and not prepared.group.overflowed:
            self._release(prepared.group, prepared.txn)
        else:
            if prepared is None:    # prepared before this source's start position: rows unknown
                tables, reason = list(item.unknown_tables), "xa_unknown"
            else:                   # too large to hold: its tables are known
                tables, reason = list(prepared.group.tables), "xa_overflow"
            log.warning("XA COMMIT %s: %s; invalidating its tables as a whole", item.xid,
                        "prepared before the start position, rows unknown" if prepared is None
                        else f"{prepared.group.rows} rows, over tailer.xa_buffer_rows")
            self._table_events([TableChange(db, t, reason) for db, t in tables],
                               item.statement, item.ctx, item.index)
        if prepared is not None:
            with self._lock:
                self._tracker.close(prepared.txn, prepared.checkpoint)

    def _release(self, group: XaGroup, txn) -> None:
        """Send the records an XA group held, in their order, as part of ``txn``."""
        for key, value, msg_id, rows, partition, row in group.records:
            self._send(key, value, msg_id, txn, rows, partition, row)

    # -- acknowledgements and the checkpoint --------------------------------------------
    def _idle_stamp(self) -> float | None:
        """The time for a send that finds nothing in flight (the wedge check's start);
        None otherwise, so the hot path reads no clock. Called under the lock."""
        return None if self._tracker.pending else self._clock()

    def _on_ack(self, txn, rows: int) -> None:
        now = self._clock()
        with self._lock:
            self._tracker.acked(txn, rows, now)
            self.acked += rows
            self._unacked -= rows
            self._wake_if_room()

    def _on_acks(self, txns: list) -> None:
        now = self._clock()
        with self._lock:
            for txn, rows in txns:
                self._tracker.acked(txn, rows, now)
                self.acked += rows
                self._unacked -= rows
            self._wake_if_room()

    def _wake_if_room(self) -> None:
        """Under the lock, after acknowledgements: wake a wait for room they made room for."""
        if self._resume_at is not None and self._unacked <= self._resume_at:
            self._room.notify()

    @property
    def failed(self) -> bool:
        """A send failed (at once, or after the publisher's retries): what this pipeline
        sent since is in doubt, and its publisher is worth replacing."""
        return self._refused or self._wedged or self._failure is not None

    def _on_error(self, error: Exception) -> None:
        # Called on the publisher's I/O thread: record it; run() stops the pipeline
        # before the checkpoint can move past the failed send.
        with self._lock:
            self._failure = error
            self._room.notify()

    def _raise_if_failed(self) -> None:
        if self._failure is not None and is_permanent(self._failure):
            raise FatalError(f"Kafka refused a record for good ({type(self._failure).__name__}: "
                             f"{self._failure}); not retrying, the checkpoint stays before it. "
                             "Check the topic name, its ACLs and its max.message.bytes"
                             ) from self._failure
        if self._failure is not None:
            raise RetryableError(f"Kafka send failed after retries, stopping before the "
                                 f"checkpoint moves: {self._failure}") from self._failure

    def _raise_if_wedged(self) -> None:
        """Raises PublisherWedged when sends have been in flight with none acknowledged or
        failed for the delivery timeout plus WEDGED_MARGIN_S (logged as a WARNING: nothing
        else would say why output stopped). A slow transaction whose sends keep being
        acknowledged is progress, not a wedge."""
        now = self._clock()
        with self._lock:
            stalled, pending = self._tracker.stalled_since(), self._tracker.pending
        if stalled is None or now - stalled < self._settle_s:
            return
        self._wedged = True
        message = (f"the Kafka producer is wedged: {pending} send(s) neither acknowledged nor "
                   f"failed, none settled for {now - stalled:.0f}s (past its delivery timeout "
                   f"plus {WEDGED_MARGIN_S:.0f}s); closing it and sending them again with a "
                   "new producer")
        log.warning(message)
        raise PublisherWedged(message)

    def _raise_if_unreachable(self) -> None:
        """Raises KafkaUnreachable when sends have been in flight with none acknowledged for
        ``outage_after_s`` (never without it); acknowledgements waiting to be served on this
        thread (``source_waits``) are served before that is judged."""
        if self.outage_after_s is None or self._stalled_for() is None:
            return
        self.source_waits()
        stalled = self._stalled_for()
        if stalled is None:
            return
        stalled, waited, pending = stalled
        self.kafka_outages = 1
        raise KafkaUnreachable(f"Kafka acknowledged none of {pending} send(s) for "
                               f"{waited:.1f}s (limit {self.outage_after_s:g}s)",
                               self._lookback(stalled))

    def _stalled_for(self) -> tuple[float, float, int] | None:
        """(since when, how long, how many sends) sends have been in flight with none
        acknowledged, when that is ``outage_after_s`` or more; else None."""
        with self._lock:
            stalled, pending = self._tracker.stalled_since(), self._tracker.pending
        if stalled is None:
            return None
        waited = self._clock() - stalled
        return (stalled, waited, pending) if waited >= self.outage_after_s else None

    def save_checkpoint(self) -> None:
        """Store the progress acknowledged since the last save, if any: the newest checkpoint
        whose groups are all acknowledged (a store ``in_order``), else every acknowledged
        group, whatever the order (ports.CheckpointStore)."""
        if not self._checkpoints.in_order:
            self._save_each()
            return
        with self._lock:
            safe = self._tracker.advance()
        if safe is not None:
            self._checkpoints.save(safe)
            self.committed = safe
            self._remember(safe)

    def _remember(self, checkpoint: Checkpoint) -> None:
        """Keep the stores of the last ``kafka_outage_lookback_s`` (twice over, and a second:
        the last acknowledgement may be that much older than the last store) and the one
        before them."""
        if self.outage_after_s is None:
            return
        now, stored = self._clock(), self._stored
        stored.append((now, checkpoint))
        horizon = now - 2 * self._settings.kafka_outage_lookback_s - 1.0
        while len(stored) > 1 and stored[1][0] <= horizon:
            stored.popleft()

    def _lookback(self, last_ack: float) -> Checkpoint | None:
        """The checkpoint stored ``kafka_outage_lookback_s`` before ``last_ack`` (the oldest
        kept when the run is younger)."""
        before = last_ack - self._settings.kafka_outage_lookback_s
        found = None
        for at, checkpoint in self._stored:
            if found is not None and at > before:
                break
            found = checkpoint
        return found

    def _save_each(self) -> None:
        with self._lock:
            done = self._unsaved + self._tracker.take_acknowledged()
        self._unsaved = []
        if done:
            try:
                self._checkpoints.save_each(done)
            except Exception:
                self._unsaved = done        # not saved: handed again with the next save
                raise
            self.committed = done[-1]

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """On a stop: send the open packs, wait (up to ``timeout_s``) for acks, then store
        the last safe checkpoint. Nothing to wait for after a failed send or from a wedged
        client; a flush that times out is retryable (the next start sends from the
        checkpoint), so it never turns a restart into an exit. After KafkaUnreachable the
        sends in flight are given up at once: what they carry is read again."""
        if self._failure is None and not self._wedged and not self.kafka_outages:
            if self._span:      # counted rows; otherwise the open group's, not closed
                self.flush_packs()
            try:
                self._publisher.flush(timeout_s=timeout_s)
            except KafkaError as e:
                raise RetryableError(f"Kafka did not acknowledge the last sends within "
                                     f"{timeout_s:.0f}s of the stop: {e}") from e
        if self._failure is None:
            self.save_checkpoint()
