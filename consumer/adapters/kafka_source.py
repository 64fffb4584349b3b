"""Kafka source (consumer group, manual commits) and dead-letter publisher."""

from __future__ import annotations

import functools
import logging
import time
from typing import Mapping

from kafka import (ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer,
                   TopicPartition)
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import (CommitFailedError, FencedInstanceIdError, IllegalGenerationError,
                          KafkaError, RebalanceInProgressError, UnknownMemberIdError)
from kafka.structs import OffsetAndMetadata

from cachesync.consumer.core.flushes import unfinished
from cachesync.consumer.core.offsets import Record
from cachesync.runtime.kafka_login import refused_login_is_fatal
from cachesync.runtime.kafka_security import BOOTSTRAP_TIMEOUT_MS
from cachesync.schema.errors import ConfigError, FatalError, RetryableError

log = logging.getLogger(__name__)

TOPIC_WAIT_S = 60      # how long a consumer waits for its topic's metadata at start
TOPIC_POLL_S = 0.5

_REBALANCING = (CommitFailedError, RebalanceInProgressError, IllegalGenerationError,
                UnknownMemberIdError)

# kafka-python backs off reconnects up to 30 s by default, so a broker back from an
# outage sat idle for most of that. A client notices the broker back up to one backoff after
# it opened its port (the failover bench's DEBUG logs of a broker restart: the consumers and
# the tailer's producer reconnected 1.0-1.5 s after the port opened with 2 s), and its
# metadata refresh, which brings the partitions' new leader epoch the fetches wait for,
# keeps the same backoff even once a connection is up again (a consumer fetched 1.1 s after
# it had reconnected, with 1 s). Every change committed during a broker outage waits for
# that: the consistency lab's kill class asks each to be applied within 1 s of the broker
# serving again, and 500 ms took half of it. 100 ms: ten refused connects a second per
# client while the broker is down are still no reconnect storm (each is a local RST).
# The tailer's publisher uses the same (producer_outbox/publish/kafka_publisher.py).
RECONNECT_BACKOFF_MAX_MS = 100

# Asynchronous offset commits (consumer.offset_commit: async) not yet answered at most; one
# more waits for its reply, so a slow or failing coordinator slows the consumer down.
MAX_COMMITS_IN_FLIGHT = 5
# Asynchronous commits refused with a retriable error (the group coordinator moving or still
# loading, e.g. for seconds after a broker restart) leave the consumer applying, each batch's
# commit superseding the last; once they have failed this long without one confirmed, a commit
# waits for its reply (and a failure stops the batch), so an outage is never hidden for long.
# Only time spent committing counts: between two failed answers at most
# COMMIT_FAILURE_GAP_S, so the minutes a broker was down (nothing polled, nothing to commit)
# do not make the first commits after its return wait.
RETRIABLE_COMMIT_FAILURES_S = 30.0
COMMIT_FAILURE_GAP_S = 5.0
# close() waits this long at most for the offsets not yet confirmed to be committed
CLOSE_COMMIT_TIMEOUT_MS = 5000
# the shortest a held fetch waits (kafka-python's default): a short poll timeout, chosen for a
# quick stop, does not multiply the fetches an idle consumer sends
FETCH_WAIT_MIN_S = 0.5
# how long a poll that came back short waits for the rest of a tailer's flush it holds part
# of (schema.flushes): the other partitions' parts were sent in the same moment and come
# a fetch response later, well within this on one network
GATHER_S = 0.005

# kafka.assignment_strategy: cooperative-sticky (KIP-429) lets the members that stay keep
# consuming their partitions through a rebalance; the eager ones stop every member.
ASSIGNORS = {"cooperative-sticky": CooperativeStickyAssignor,
             "sticky": StickyPartitionAssignor, "range": RangePartitionAssignor,
             "roundrobin": RoundRobinPartitionAssignor}


def resume_dropped_join(coordinator) -> bool:
    """Make kafka-python 3.0 finish a group join it would otherwise leave hanging; True if so.

    kafka-python drives JoinGroup/SyncGroup only while ``need_rejoin()`` holds. When a join
    started because the leader's metadata snapshot changed and a short ``poll()`` timed out
    mid-join, the snapshot is current again by the next poll, ``need_rejoin()`` turns False
    and the join in flight is never awaited: the member stays "rebalancing" with heartbeats
    off, fails every commit, and the broker expels it after the session timeout (seen as a
    consumer stuck for good, its partitions idle). Asking for a rejoin makes the next poll
    await that join (or send a fresh one if it already ended).
    """
    if not getattr(coordinator, "rejoining", False) or coordinator.need_rejoin():
        return False
    coordinator.request_rejoin()
    return True


def heartbeat_fenced(coordinator) -> bool:
    """True when kafka-python's heartbeat was refused as fenced (another consumer joined with
    this group_instance_id): the member is stable, not joining, yet its heartbeat is off.

    kafka-python only logs that case and switches the heartbeat off; an idle consumer would
    then sit in the group for good without noticing. Read under the coordinator's lock, which
    its join completion holds while it turns the heartbeat back on.
    """
    if coordinator is None:
        return False
    with coordinator._lock:
        return (coordinator.stable() and not coordinator.rejoining
                and not coordinator._heartbeat_enabled and not coordinator._heartbeat_closed)


def group_config(session_timeout_ms: int = 6_000, heartbeat_interval_ms: int = 2_000,
                 max_poll_interval_ms: int = 300_000, group_instance_id: str = "",
                 assignment_strategy: str = "cooperative-sticky") -> dict:
    """kafka-python's group membership settings; raises ConfigError for an unknown assignor.

    A ``group_instance_id`` makes the member static (KIP-345): it does not leave the group on
    close, and a restart under the same id within the session timeout gets its partitions
    back without any rebalance. A member that does not come back loses them after
    ``session_timeout_ms``.
    """
    if assignment_strategy not in ASSIGNORS:
        raise ConfigError(f"kafka.assignment_strategy: expected one of {sorted(ASSIGNORS)}, "
                          f"got {assignment_strategy!r}")
    return {"session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "max_poll_interval_ms": max_poll_interval_ms,
            "group_instance_id": group_instance_id or None,
            "partition_assignment_strategy": (ASSIGNORS[assignment_strategy],)}


class KafkaSource:
    """A kafka-python consumer in a group; offsets are committed only explicitly.

    With ``async_commit`` (the default) ``commit`` sends the offsets and returns:
    kafka-python's IO thread sends the request at once, in order with the ones before it,
    and nobody waits for the reply (kafka-python hands it to ``_CommitTracker.answered`` in
    a later poll or commit, on the consumer's thread). The engine calls ``commit`` only
    after a batch's cache writes and dedup confirm, so the order of effects is the
    synchronous one; what changes is what a crash
    can leave: the offsets of the last few batches not yet committed, which are delivered
    again and skipped as duplicates by the dedup store (as after any crash before a commit).
    A commit goes synchronous again, and raises on failure, after an asynchronous one
    failed with an error that is not retriable, once retriable failures (a coordinator that
    moved or is still loading) went on for ``RETRIABLE_COMMIT_FAILURES_S`` without a
    confirmed commit, or while ``MAX_COMMITS_IN_FLIGHT`` are unanswered; ``close`` commits
    what is not confirmed yet for the partitions still assigned.

    With ``commit_interval_s``, a commit within that time of the last request sent only
    records its offsets; the next commit or poll after the interval sends them all in one
    request (at the head of the binlog every commit is its own batch, and an offset commit
    per batch was a broker request per commit). A crash then delivers up to that much more
    again, skipped as duplicates; the offsets of a partition revoked before they went out
    are its next owner's to deliver again, likewise; ``close`` sends them.
    """

    def __init__(self, bootstrap_servers: str, topic: str, group_id: str,
                 *, auto_offset_reset: str = "earliest", client_id: str = "cachesync-consumer",
                 group: dict | None = None, security: Mapping | None = None,
                 async_commit: bool = True, commit_interval_s: float = 0.0,
                 fetch_wait_s: float | None = None, client: str = "kafka-python",
                 clock=time.monotonic):
        """``group``: :func:`group_config` (its defaults when None); ``security``: the
        client's security options (cachesync.runtime.kafka_security.client_security);
        ``commit_interval_s``: offsets committed within this time of the last commit sent
        wait and go out together (see the class); ``fetch_wait_s``: how long the broker
        holds a fetch that finds no record (kafka-python's ``fetch_max_wait_ms``), at least
        FETCH_WAIT_MIN_S (that when None; ``security``'s consumer properties may set it);
        ``client``: ``kafka.client`` (librdkafka through rdkafka_source.RdKafkaConsumer, or
        kafka-python's KafkaConsumer; ``auto`` picks, cachesync.runtime.librdkafka)."""
        self._instance = (group or {}).get("group_instance_id")
        self._commits = _CommitTracker(async_commit)
        self._interval_s, self._clock = commit_interval_s, clock
        self._sent_at: float | None = None      # when the last commit request went out
        try:
            with refused_login_is_fatal(bootstrap_servers):
                self._consumer = self._connect(bootstrap_servers, client, self.options(
                    group_id, client_id, auto_offset_reset, group, security, fetch_wait_s))
            self._await_partitions(topic)
            self._consumer.subscribe([topic], listener=_Forget(self._commits))
        except KafkaError as e:
            raise RetryableError(f"Kafka unavailable at {bootstrap_servers}: {e}") from e

    @staticmethod
    def options(group_id: str, client_id: str, auto_offset_reset: str, group: dict | None,
                security: Mapping | None, fetch_wait_s: float | None) -> dict:
        """The consumer's kafka-python options: cachesync's, the group's, then ``security``'s
        (the security options and pass-through properties, which win)."""
        tunable = dict(max_partition_fetch_bytes=4 * 1024 * 1024,
                       # what one poll can hold at most, whatever the records pack (50 MB by
                       # default)
                       fetch_max_bytes=16 * 1024 * 1024,
                       reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                       bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
                       # kafka-python's own sensors, recorded per request and record and read
                       # by nothing here
                       metrics_enabled=False)
        if fetch_wait_s is not None:
            # A record arriving ends the wait at once (fetch_min_bytes 1), so this only says
            # how often an idle consumer asks again. The group's heartbeats and offset
            # commits go over a connection of their own, so they never queue behind a held
            # fetch; what does is a fetch of partitions newly assigned on that broker (and a
            # metadata refresh), started when the held one returns.
            tunable["fetch_max_wait_ms"] = int(max(FETCH_WAIT_MIN_S, fetch_wait_s) * 1000)
        return {"group_id": group_id, "client_id": client_id, "enable_auto_commit": False,
                "auto_offset_reset": auto_offset_reset, "isolation_level": "read_committed",
                **(group if group is not None else group_config()),
                **tunable, **(security or {})}

    def _connect(self, bootstrap_servers: str, client: str, options: dict):
        """The client's consumer: librdkafka's (whose ``records`` becomes this source's
        ``_fetch``) or kafka-python's."""
        from cachesync.consumer.adapters import rdkafka_source
        chosen, why = rdkafka_source.choose(client, options)
        log.info("Kafka consumer on %s (%s)", chosen, why)
        if chosen == "librdkafka":
            admin = {k: v for k, v in options.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
            consumer = rdkafka_source.RdKafkaConsumer(
                bootstrap_servers, rdkafka_source.librdkafka_config(options),
                evict=functools.partial(rdkafka_source.evict_member, bootstrap_servers,
                                        options["group_id"], admin))
            self._fetch = consumer.records
            return consumer
        return KafkaConsumer(bootstrap_servers=bootstrap_servers.split(","), **options)

    def _await_partitions(self, topic: str) -> None:
        """Block until the broker reports the topic's partitions.

        Joining the group before that (a broker that just started) yields an empty
        assignment that can stay empty; raises RetryableError after TOPIC_WAIT_S.
        """
        deadline = time.monotonic() + TOPIC_WAIT_S
        while not self._consumer.partitions_for_topic(topic):
            if time.monotonic() > deadline:
                raise RetryableError(f"topic {topic!r} has no partitions after {TOPIC_WAIT_S}s; "
                                     "does it exist?")
            log.info("waiting for metadata of topic %s", topic)
            time.sleep(TOPIC_POLL_S)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting up to ``timeout_s`` for the first; a poll
        that came back short with part of a tailer's flush waits up to GATHER_S more for
        its other partitions' parts (``_gather``)."""
        if self._commits.due and self._interval_over():
            self._send(self._commits.due)
        try:
            records = self._fetch(max_records, timeout_s)
            if records and len(records) < max_records:
                records = self._gather(records, max_records)
            return records
        except FencedInstanceIdError as e:
            raise self._fenced(e) from e
        except KafkaError as e:
            raise RetryableError(f"Kafka poll failed: {e}") from e

    def _gather(self, records: list[Record], max_records: int) -> list[Record]:
        """``records`` and the rest of the flushes they hold part of, from this consumer's
        partitions (``consumer.core.flushes.unfinished``), polled for up to GATHER_S.

        At the head of the binlog one tailer read goes out as one produce request per
        partition it touches, and comes back here as as many fetch responses: applied
        one by one, each would cost a batch (a Redis round trip, an offset commit, two
        wake-ups); gathered, the read is one batch again."""
        owned = getattr(self._consumer, "owned", self._consumer.assignment)
        missing = unfinished(records, owned)
        if not missing:
            return records
        deadline = self._clock() + GATHER_S
        while missing and len(records) < max_records:
            left = deadline - self._clock()
            if left <= 0:
                break
            more = self._fetch(max_records - len(records), left)
            if not more:
                break
            records = records + more
            missing = unfinished(records, owned)
        return records

    def _fetch(self, max_records: int, timeout_s: float) -> list[Record]:
        """The records of one poll of the client (kafka-python's errors raised as they are)."""
        polled = self._consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        coordinator = getattr(self._consumer, "_coordinator", None)
        if self._instance and heartbeat_fenced(coordinator):
            raise self._fenced(FencedInstanceIdError("heartbeat refused as fenced"))
        if resume_dropped_join(coordinator):
            log.info("kafka-python left a group join unfinished; finishing it on the next poll")
        out = []
        for records in polled.values():
            for r in records:
                out.append(Record(r.topic, r.partition, r.offset, r.key, r.value,
                                  tuple(r.headers or ()), r.timestamp))
        return out

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``offsets`` ({(topic, partition): next offset}), asynchronously when the
        source commits that way and nothing is wrong, together with later ones when the
        last commit went out less than ``commit_interval_s`` ago (see the class)."""
        commits = self._commits
        if commits.fenced is not None:
            raise self._fenced(commits.fenced)
        for (t, p), o in offsets.items():
            tp = TopicPartition(t, p)
            commits.due[tp] = max(o, commits.due.get(tp, -1))
        if self._interval_over():
            self._send(commits.due)

    def _interval_over(self) -> bool:
        return self._sent_at is None or self._clock() - self._sent_at >= self._interval_s

    def _send(self, due: dict) -> None:
        """One commit request for the ``due`` offsets, which it empties once sent."""
        commits = self._commits
        # only the partitions this member still owns: a poll since the batch was read may
        # have handed some to another member (the overlapped engine polls ahead), whose
        # offsets a late commit would move back (the batch's work is done: its records,
        # delivered to the new owner, are skipped as duplicates)
        assigned = self._consumer.assignment()
        tps = {tp: OffsetAndMetadata(o, "", -1) for tp, o in due.items() if tp in assigned}
        for tp, o in commits.refused.items():   # refused by a rebalance, not covered yet
            if tp in assigned and tp not in tps:
                tps[tp] = OffsetAndMetadata(o, "", -1)
        if not tps:
            due.clear()
            return
        if not commits.may_go_async():
            self._commit_sync(tps)
        else:
            try:
                self._consumer.commit_async(tps, callback=commits.answered)
            except FencedInstanceIdError as e:
                # kafka-python raises it here (before running any callback) once an earlier
                # asynchronous commit was refused as fenced
                commits.fenced = e
                raise self._fenced(e) from e
            except KafkaError as e:
                raise RetryableError(f"Kafka offset commit failed: {e}") from e
            commits.sent(tps)
        due.clear()
        self._sent_at = self._clock()

    def _commit_sync(self, tps: dict, timeout_ms: int | None = None) -> None:
        try:
            self._consumer.commit(tps, timeout_ms=timeout_ms)
        except FencedInstanceIdError as e:
            raise self._fenced(e) from e
        except _REBALANCING as e:
            # The group is rebalancing (or did): only a poll() can finish it, so retrying
            # the commit here would spin.
            _lost_to_rebalance(e)
        except KafkaError as e:
            raise RetryableError(f"Kafka offset commit failed: {e}") from e
        else:
            self._commits.confirmed(tps)

    def close(self) -> None:
        """Commit the offsets not confirmed yet (for the partitions still assigned), then
        close the consumer; a commit that fails here is only logged (see the class)."""
        try:
            pending = self._commits.unconfirmed(self._consumer.assignment())
            pending.update(self._commits.waiting(self._consumer.assignment()))
            if pending and self._commits.fenced is None:
                self._commit_sync(pending, CLOSE_COMMIT_TIMEOUT_MS)
        except (KafkaError, RetryableError, FatalError) as e:
            log.warning("the last offsets were not committed before closing (%s); a restart "
                        "delivers those records again and skips them as duplicates", e)
        finally:
            self._consumer.close(autocommit=False)

    def _fenced(self, error: Exception) -> FatalError:
        return FatalError(f"another consumer joined the group with kafka.group_instance_id "
                          f"{self._instance!r}; each consumer needs its own id ({error})")


def _lost_to_rebalance(error: Exception | str) -> None:
    """A commit the group refused because it is rebalancing (or did): whoever owns the
    partitions next re-reads those records from the last committed offset and skips them
    as duplicates."""
    log.warning("offset commit lost to a rebalance; duplicates will be skipped: %s", error)


class _CommitTracker:
    """What the source's offset commits asked for and what the broker confirmed, per
    partition. Asynchronous commits are answered (``answered``) on the consumer's thread,
    inside a later poll or commit. ``forget`` runs on kafka-python's IO thread (the rebalance
    listener), while the consumer's thread waits in the poll or close that drives the
    rebalance, so the two never touch the tracker at once and it needs no lock."""

    def __init__(self, async_commit: bool, clock=time.monotonic):
        self.async_commit = async_commit
        self._clock = clock
        # how long asynchronous commits have been failing with retriable errors, none
        # confirmed (None: the last one answered was confirmed), and the last failure's time
        self.failing_for: float | None = None
        self._last_failure = 0.0
        self.due: dict[TopicPartition, int] = {}         # offsets to commit, not sent yet
        self.asked: dict[TopicPartition, int] = {}       # newest offset sent, per partition
        self.done: dict[TopicPartition, int] = {}        # newest offset confirmed
        self.in_flight = 0
        self.failed: Exception | None = None    # the last asynchronous commit's error
        self.fenced: Exception | None = None
        # offsets of asynchronous commits a rebalance refused, until a later commit of the
        # partition covers them (then nothing was lost) or the partition is revoked
        self.refused: dict[TopicPartition, int] = {}

    def may_go_async(self) -> bool:
        return (self.async_commit and self.failed is None
                and self.in_flight < MAX_COMMITS_IN_FLIGHT
                and (self.failing_for is None or self.failing_for < RETRIABLE_COMMIT_FAILURES_S))

    def sent(self, tps: dict) -> None:
        self.in_flight += 1
        for tp, meta in tps.items():
            self.asked[tp] = meta.offset

    def confirmed(self, tps: dict) -> None:
        self.failed = None
        self._recovered()
        for tp, meta in tps.items():
            self.asked[tp] = max(self.asked.get(tp, -1), meta.offset)
            self._done(tp, meta.offset)

    def _done(self, tp: TopicPartition, offset: int) -> None:
        self.done[tp] = max(self.done.get(tp, -1), offset)
        if self.refused.get(tp, offset + 1) <= offset:
            del self.refused[tp]      # a later commit covered the refused one

    def answered(self, tps: dict, response) -> None:
        """kafka-python's callback: ``response`` is the reply or the commit's exception."""
        self.in_flight = max(0, self.in_flight - 1)
        if not isinstance(response, BaseException):
            self._recovered()
            for tp, meta in tps.items():
                self._done(tp, meta.offset)
        elif isinstance(response, FencedInstanceIdError):
            self.fenced = response
        elif isinstance(response, _REBALANCING):
            # e.g. kafka-python's cooperative protocol rejoining right after the first
            # assignment: the next commit of the partition (or close's) covers it, and only
            # a partition revoked before that loses it (``forget`` says so)
            for tp, meta in tps.items():    # (a partition forgotten since is not ours)
                if tp in self.asked and self.done.get(tp, -1) < meta.offset:
                    self.refused[tp] = max(self.refused.get(tp, -1), meta.offset)
            log.info("an asynchronous offset commit was refused during a rebalance (%s); the "
                     "next commit of the partitions covers it", response)
        elif getattr(response, "retriable", False):
            now = self._clock()
            if self.failing_for is not None:
                self.failing_for += min(now - self._last_failure, COMMIT_FAILURE_GAP_S)
                log.debug("asynchronous offset commit failed again: %s", response)
            else:
                self.failing_for = 0.0
                log.warning("asynchronous offset commit failed (%s); applying goes on and the "
                            "next batch's commit covers it (a commit waits for its reply once "
                            "they have failed for %g s)", response, RETRIABLE_COMMIT_FAILURES_S)
            self._last_failure = now
        else:
            self.failed = response
            log.warning("asynchronous offset commit failed (%s); the next commit waits for its "
                        "reply", response)

    def _recovered(self) -> None:
        if self.failing_for is not None:
            log.info("offset commits confirmed again after %.1f s of retriable failures",
                     self.failing_for + min(self._clock() - self._last_failure,
                                            COMMIT_FAILURE_GAP_S))
            self.failing_for = None

    def unconfirmed(self, assigned) -> dict:
        """The offsets sent but not confirmed, of the ``assigned`` partitions."""
        return {tp: OffsetAndMetadata(o, "", -1) for tp, o in self.asked.items()
                if tp in assigned and self.done.get(tp, -1) < o}

    def waiting(self, assigned) -> dict:
        """The offsets not sent yet (commit_interval_s), of the ``assigned`` partitions."""
        return {tp: OffsetAndMetadata(o, "", -1) for tp, o in self.due.items()
                if tp in assigned}

    def forget(self, partitions) -> None:
        """Partitions this member no longer owns: their offsets are the next owner's."""
        lost = [tp for tp in partitions if tp in self.refused]
        if lost:
            _lost_to_rebalance(f"{len(lost)} revoked partition(s) with a refused commit not "
                               "covered by a later one")
        for tp in partitions:
            self.due.pop(tp, None)
            self.asked.pop(tp, None)
            self.done.pop(tp, None)
            self.refused.pop(tp, None)


class _Forget(ConsumerRebalanceListener):
    """Drops revoked or lost partitions from the commit tracker, so that ``close`` never
    commits an offset of a partition another member now owns (which would move it back).
    A commit already sent for them went out before the rebalance's JoinGroup, on the same
    connection to the coordinator; one that fails leaves duplicates for the next owner."""

    def __init__(self, commits: _CommitTracker):
        self._commits = commits

    def on_partitions_revoked(self, revoked):
        self._commits.forget(revoked)

    def on_partitions_assigned(self, assigned):
        pass

    def on_partitions_lost(self, lost):
        self._commits.forget(lost)


class KafkaDeadLetters:
    """Publishes poison records with their reason and origin; the value is the original bytes.

    The producer is made by the first ``flush`` that has a dead letter to send: most
    consumers never dead-letter anything, and an idle producer is a network thread, a
    connection and metadata refreshes in every consumer process.
    """

    def __init__(self, bootstrap_servers: str, topic: str, security: Mapping | None = None):
        self._bootstrap, self._topic, self._security = bootstrap_servers, topic, security
        self._producer: KafkaProducer | None = None
        self._pending: list = []   # ((record, reason, detail), future, or None: not sent yet)

    def send(self, record: Record, reason: str, detail: str) -> None:
        log.warning("dead-lettering %s/%d/%d: %s", record.topic, record.partition,
                    record.offset, reason, extra={"partition": record.partition})
        self._pending.append(((record, reason, detail), None))

    def _send(self, record: Record, reason: str, detail: str):
        return self._connected().send(self._topic, key=record.key, value=record.value,
                                      headers=dead_letter_headers(record, reason, detail))

    def _connected(self) -> KafkaProducer:
        """The producer, made on first use; raises RetryableError while Kafka is unreachable,
        FatalError if it refuses the login."""
        if self._producer is None:
            try:
                with refused_login_is_fatal(self._bootstrap):
                    self._producer = KafkaProducer(
                        bootstrap_servers=self._bootstrap.split(","), acks="all",
                        enable_idempotence=True, client_id="cachesync-dlq",
                        **{"reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
                           **(self._security or {})})
            except KafkaError as e:
                raise RetryableError(f"Kafka unavailable at {self._bootstrap} for dead letters: "
                                     f"{e}") from e
        return self._producer

    def flush(self) -> None:
        """Block until every dead letter is acknowledged; raises RetryableError otherwise.

        Failed sends stay pending and are sent again by the next flush, so a retried
        batch cannot commit its offsets past a poison record that never reached the DLQ.
        """
        if not self._pending:
            return
        for i, (letter, future) in enumerate(self._pending):
            if future is None:
                try:
                    self._pending[i] = (letter, self._send(*letter))
                except KafkaError as e:    # no metadata in time, buffer full: sent again later
                    raise RetryableError(f"dead letter not sent: {e}") from e
        self._producer.flush(timeout=30)
        failed = []
        for letter, future in self._pending:
            try:
                future.get(timeout=0)
            except KafkaError as e:
                failed.append((letter, e))
        self._pending = [(letter, None) for letter, _ in failed]
        if failed:
            raise RetryableError(f"{len(failed)} dead letter(s) not acknowledged: {failed[0][1]}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)


def dead_letter_headers(record: Record, reason: str, detail: str) -> list[tuple[str, bytes]]:
    """reason, detail, the origin (topic, partition, offset, and pack_index) and attempts.

    ``attempts`` counts how often this message was dead-lettered: a replayed dead
    letter carries its headers back to the change topic, so a second failure says 2.
    The message id header is kept, so a replay is deduplicated like the original.
    """
    previous = record.header("attempts")
    attempts = int(previous) + 1 if previous and previous.isdigit() else 1
    headers = [("reason", reason.encode()), ("detail", detail[:1000].encode("utf-8", "replace")),
               ("origin", f"{record.topic}/{record.partition}/{record.offset}".encode()),
               ("topic", record.topic.encode()), ("partition", str(record.partition).encode()),
               ("offset", str(record.offset).encode()), ("attempts", str(attempts).encode())]
    for name in ("id", "pack_index"):    # pack_index: which element of a packed record
        value = record.header(name)
        if value is not None:
            headers.append((name, value))
    return headers
