"""The Kafka source on librdkafka (the confluent-kafka package).

``KafkaSource``'s group membership, manual offset commits (asynchronous, coalesced, tracked
by its ``_CommitTracker``) and error handling, with librdkafka's C client fetching
(``KafkaSource(client=...)``): at the
head of the binlog every commit is its own fetch response, and kafka-python spends about a
millisecond of CPU on each (its I/O thread and the hand-offs to the consumer's thread);
librdkafka fetches on threads of its own, outside the GIL, and ``consume`` hands a batch
over in one call. :class:`RdKafkaConsumer` is the part of kafka-python's ``KafkaConsumer``
that ``KafkaSource`` uses, on librdkafka, with librdkafka's errors raised as kafka-python's
classes; ``kafka.client`` says which client a consumer uses (``cachesync.runtime.librdkafka``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping

from kafka import TopicPartition
from kafka import errors as kerrors

from cachesync.consumer.core.offsets import Record
from cachesync.runtime import librdkafka
from cachesync.schema.errors import FatalError

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 5.0
# librdkafka waits this long before fetching a partition again after a fetch error (500 ms
# by default): a broker back from an outage is fetched from within this of its return
FETCH_ERROR_BACKOFF_MS = 100
# how often a poll reads the group member id (``_membership``): librdkafka answers it from
# its main thread, a round trip that woke that thread and this one again at every poll (at
# the head of the binlog, at every commit)
MEMBERSHIP_CHECK_S = 1.0

# the consumer's own kafka-python options -> librdkafka properties
_CONSUMER = {"group_id": "group.id", "enable_auto_commit": "enable.auto.commit",
             "auto_offset_reset": "auto.offset.reset", "isolation_level": "isolation.level",
             "session_timeout_ms": "session.timeout.ms",
             "heartbeat_interval_ms": "heartbeat.interval.ms",
             "max_poll_interval_ms": "max.poll.interval.ms",
             "group_instance_id": "group.instance.id",
             "max_partition_fetch_bytes": "max.partition.fetch.bytes",
             "fetch_max_bytes": "fetch.max.bytes", "fetch_max_wait_ms": "fetch.wait.max.ms",
             "fetch_min_bytes": "fetch.min.bytes"}
# kafka.assignment_strategy's assignors librdkafka has (the eager sticky one it has not)
_ASSIGNORS = {"CooperativeStickyAssignor": "cooperative-sticky",
              "RangePartitionAssignor": "range", "RoundRobinPartitionAssignor": "roundrobin"}


def librdkafka_config(options: Mapping) -> dict:
    """librdkafka's properties for ``KafkaSource.options`` (kafka-python's names); raises
    Unmappable naming the first option without a twin. Holds the SASL password: never log."""
    options = dict(options)
    assignors = options.pop("partition_assignment_strategy", ())
    names = [_ASSIGNORS.get(a.__name__) for a in assignors]
    if None in names:
        raise librdkafka.Unmappable(f"the assignor {assignors[names.index(None)].__name__} "
                                    "(kafka.assignment_strategy) has no librdkafka twin")
    out = librdkafka.translate(options, _CONSUMER)
    if names:
        out["partition.assignment.strategy"] = ",".join(names)
    out.setdefault("fetch.error.backoff.ms", FETCH_ERROR_BACKOFF_MS)
    return out


def choose(client: str, options: Mapping) -> tuple[str, str]:
    """(the client, why) for ``kafka.client`` ``client`` and ``KafkaSource.options``."""
    return librdkafka.choose(client, lambda: librdkafka_config(options))


# how long a member librdkafka gave up is offered to its group's coordinator for removal
# (the broker drops it by itself a session timeout after it serves again)
EVICT_WITHIN_S = 600.0
EVICT_RETRY_S = 0.2
EVICT_REQUEST_TIMEOUT_MS = 2_000


def evict_member(bootstrap_servers: str, group_id: str, admin_options: Mapping,
                 member_id: str, within_s: float = EVICT_WITHIN_S) -> str:
    """Remove the dynamic member ``member_id`` from ``group_id`` (a LeaveGroup on its behalf),
    retrying until its coordinator answers or ``within_s`` passed; returns what happened, for
    the log. ``admin_options``: kafka-python admin client options (the consumer's security,
    reconnect backoff and bootstrap timeout).

    librdkafka ends its own membership when it has not reached the group's coordinator for
    ``session.timeout.ms`` (a broker restart) and joins again as a new member once the broker
    is back. The restarted coordinator still holds the old member, and the join waits for it
    to expire: a session timeout more of every partition unread. kafka-python's consumer
    keeps its member id through an outage, so its old membership is simply resumed."""
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove
    from kafka.errors import KafkaError
    deadline = time.monotonic() + within_s
    last = "no answer"
    while time.monotonic() < deadline:
        admin = None
        try:
            admin = KafkaAdminClient(**{**admin_options,
                                        "bootstrap_servers": bootstrap_servers.split(","),
                                        "client_id": "cachesync-consumer-evict",
                                        "request_timeout_ms": EVICT_REQUEST_TIMEOUT_MS})
            answer = admin.remove_group_members(group_id, [MemberToRemove(member_id=member_id)])
            return f"the coordinator answered {next(iter(answer.values())).__name__}"
        except (KafkaError, OSError) as e:
            last = repr(e)
        finally:
            if admin is not None:
                admin.close()
        time.sleep(EVICT_RETRY_S)
    return f"gave up after {within_s:.0f} s ({last})"


_COMMIT_ERRORS: dict = {}
_NO_OFFSET = -168           # librdkafka's KafkaError._NO_OFFSET


def _error(err) -> Exception:
    if not _COMMIT_ERRORS:
        from confluent_kafka import KafkaError
        _COMMIT_ERRORS.update({
            KafkaError.REBALANCE_IN_PROGRESS: kerrors.RebalanceInProgressError,
            KafkaError.ILLEGAL_GENERATION: kerrors.IllegalGenerationError,
            KafkaError.UNKNOWN_MEMBER_ID: kerrors.UnknownMemberIdError,
            KafkaError.FENCED_INSTANCE_ID: kerrors.FencedInstanceIdError,
            KafkaError._FENCED: kerrors.FencedInstanceIdError})
    return librdkafka.kafka_python_error(err, _COMMIT_ERRORS)


class RdKafkaConsumer:
    """What ``KafkaSource`` calls of kafka-python's ``KafkaConsumer``, on librdkafka.

    Asynchronous commits are answered by librdkafka's commit callback, which runs inside a
    later ``consume`` on the consumer's thread (as kafka-python's do inside a later poll);
    each answer goes to the callback of the commit whose offsets it carries.
    """

    def __init__(self, bootstrap_servers: str, config: dict,
                 evict: Callable[[str], str] | None = None):
        """``evict(member_id)``: removes a member this consumer gave up from the group
        (:func:`evict_member`), run on a thread of its own when librdkafka drops its
        membership (``_membership``)."""
        from confluent_kafka import Consumer
        self._bootstrap = bootstrap_servers
        self._evict = evict
        self._member = ""               # the group member id at the last poll
        self._errors = librdkafka.ClientErrors(bootstrap_servers)
        self._answers: list[tuple[frozenset, object]] = []   # (offsets, callback) in flight
        # (topic, partition)s assigned, as the rebalance callbacks said (``owned``)
        self._owned: set[tuple[str, int]] = set()
        self._closed = False
        self._consumer = Consumer({**config, "bootstrap.servers": bootstrap_servers,
                                   "on_commit": self._committed, "error_cb": self._errors,
                                   "logger": librdkafka.QuietLog()})

    def __repr__(self) -> str:
        return f"RdKafkaConsumer({self._bootstrap!r})"

    def _check_fatal(self, err=None) -> None:
        """Raise what ended the client for good (librdkafka's fatal error, or ``err``): a
        static member fenced by another with its id as kafka-python's FencedInstanceIdError
        (KafkaSource says which id), anything else as FatalError."""
        err = err or self._errors.fatal
        if err is None:
            return
        fenced = _error(err)
        if isinstance(fenced, kerrors.FencedInstanceIdError) or "fenced" in err.str().lower():
            raise kerrors.FencedInstanceIdError(err.str())
        raise FatalError(f"the Kafka client (librdkafka) failed for good: {err.str()}")

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        from confluent_kafka import KafkaException
        try:
            found = self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
        except KafkaException as e:
            self._consumer.poll(0)      # serves the error callbacks (no partition assigned yet)
            self._errors.check_login()
            raise _error(e.args[0]) from None
        if found is None or found.error is not None or not found.partitions:
            return None
        return set(found.partitions)

    def subscribe(self, topics: list[str], listener) -> None:
        # (the client assigns what it is given once on_assign returns: the default)
        def assigned(_consumer, partitions):
            self._owned.update((p.topic, p.partition) for p in partitions)

        def revoked(_consumer, partitions):
            self._owned.difference_update((p.topic, p.partition) for p in partitions)
            listener.on_partitions_revoked({TopicPartition(p.topic, p.partition)
                                            for p in partitions})

        def lost(_consumer, partitions):
            self._owned.difference_update((p.topic, p.partition) for p in partitions)
            listener.on_partitions_lost({TopicPartition(p.topic, p.partition)
                                         for p in partitions})
        self._consumer.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=lost)

    def owned(self) -> set[tuple[str, int]]:
        """The (topic, partition)s assigned, from the rebalance callbacks: ``assignment``
        asks librdkafka's main thread (a round trip, two wake-ups); this is for hints."""
        return self._owned

    _membership_due = 0.0        # when a poll reads the member id next

    def _follow_membership(self, now: float) -> None:
        """``_membership`` at most once per MEMBERSHIP_CHECK_S."""
        if now >= self._membership_due:
            self._membership_due = now + MEMBERSHIP_CHECK_S
            self._membership()

    def _membership(self) -> None:
        """Follow the group member id; when librdkafka gives one up (its session timed out
        without the coordinator, it rejoins as a new member), remove the old one from the
        group on a thread of its own (``evict``), as soon as the coordinator answers."""
        now = self._consumer.memberid() or ""
        member, self._member = self._member, now
        if not member or now == member or self._evict is None:
            return

        def run():
            log.info("Kafka consumer: librdkafka left the group's member %s after losing its "
                     "coordinator; removing it from the group: %s", member, self._evict(member))
        threading.Thread(target=run, name="cachesync-evict-member", daemon=True).start()

    def records(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting up to ``timeout_s`` for the first."""
        # consume(n, timeout) waits for n messages or the timeout, whichever comes last
        # but one: the first message ends the wait here, and what came with it is taken
        first = self._consumer.poll(timeout_s)
        polled = () if first is None else (
            [first, *self._consumer.consume(max_records - 1, 0)] if max_records > 1 else [first])
        self._errors.check_login()
        self._check_fatal()
        self._follow_membership(time.monotonic())
        out = []
        for m in polled:
            err = m.error()
            if err is None:
                out.append(Record(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                  tuple(m.headers() or ()), m.timestamp()[1]))
            elif librdkafka.is_fatal(err):
                self._check_fatal(err)
            elif not err.retriable():
                raise _error(err)
            else:
                log.debug("librdkafka: %s", err.str())   # retried by librdkafka itself
        return out

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned; none once closed (a second close, as kafka-python's)."""
        if self._closed:
            return set()
        return {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}

    def commit_async(self, offsets: dict, callback) -> None:
        """Send ``offsets`` ({TopicPartition: OffsetAndMetadata}); ``callback(offsets,
        answer)`` runs in a later ``records`` with the answer: an exception when refused."""
        self._answers.append((_key(offsets), (offsets, callback)))
        self._send(offsets, asynchronous=True)

    def commit(self, offsets: dict, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` and wait for the answer; raises its error. (librdkafka bounds
        the wait with its own request timeout: ``timeout_ms`` is kafka-python's.)"""
        self._answers.append((_key(offsets), None))    # its callback comes too: nobody's
        answered = self._send(offsets, asynchronous=False)
        for p in answered or ():
            if p.error is not None:
                raise _error(p.error)

    def _send(self, offsets: dict, asynchronous: bool):
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as Partition
        try:
            return self._consumer.commit(
                offsets=[Partition(tp.topic, tp.partition, meta.offset)
                         for tp, meta in offsets.items()], asynchronous=asynchronous)
        except KafkaException as e:
            self._answers.pop()
            raise _error(e.args[0]) from None

    def _committed(self, err, partitions) -> None:
        """librdkafka's commit callback: the answer to the commit of ``partitions``."""
        key = frozenset((p.topic, p.partition, p.offset) for p in partitions)
        for i, (offsets_key, entry) in enumerate(self._answers):
            if offsets_key == key:
                del self._answers[i]
                break
        else:
            return                      # not one of ours (none is sent otherwise)
        if entry is None:
            return                      # a synchronous commit, answered by its call
        offsets, callback = entry
        failed = err if err is not None else next(
            (p.error for p in partitions if p.error is not None), None)
        if failed is not None and failed.code() == _NO_OFFSET:
            failed = None               # nothing to commit: nothing lost
        callback(offsets, _error(failed) if failed is not None else "committed")

    def close(self, autocommit: bool = False) -> None:
        """Leave the group and close; closing again does nothing (librdkafka's consumer
        raises on any call once closed, kafka-python's does not)."""
        if not self._closed:
            self._closed = True
            self._consumer.close()


def _key(offsets: dict) -> frozenset:
    return frozenset((tp.topic, tp.partition, meta.offset) for tp, meta in offsets.items())
