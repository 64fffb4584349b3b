"""The tailer's Kafka publisher on librdkafka (the confluent-kafka package).

``KafkaPublisher``'s interface and guarantees (``acks=all``, the idempotent producer, five
requests in flight per connection, Kafka's default partitioner, an ``id`` header, one
callback per record) with librdkafka's C client doing the work. At the head of the binlog
every commit is its own produce request, and kafka-python spends about a millisecond of CPU
on each (its network thread: selector, request building, response parsing, all Python);
librdkafka spends a small fraction of that (``bench/head_cost.py`` measures both).

Which client a publisher uses is ``kafka.client``: ``auto`` takes this one when
confluent-kafka is installed and every option maps onto librdkafka (:func:`librdkafka_config`
says which do not: OAUTHBEARER and AWS_MSK_IAM logins, and pass-through properties without
a librdkafka twin; cachesync.runtime.librdkafka), else kafka-python. Errors come out as kafka-python's error classes, so
the pipeline, ``is_permanent`` and the publisher process treat both clients alike.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping

from kafka import errors as kerrors

from cachesync.producer_outbox.publish.kafka_publisher import (DELIVERY_TIMEOUT_MS,
                                                              RECONNECT_BACKOFF_MAX_MS)
from cachesync.runtime import librdkafka
from cachesync.runtime.kafka_security import BOOTSTRAP_TIMEOUT_MS
from cachesync.runtime.librdkafka import Unmappable, translate  # noqa: F401 (Unmappable: API)
from cachesync.schema.errors import RetryableError
from cachesync.schema.flushes import HEADER as FLUSH_HEADER

log = logging.getLogger(__name__)

# the first metadata request, which says the brokers answer: kafka-python's bootstrap wait
CONNECT_TIMEOUT_S = BOOTSTRAP_TIMEOUT_MS / 1000
MAX_BLOCK_S = 60.0           # a send waits this long for room in a full queue (kafka-python's)
POLL_S = 1.0                 # the callback thread's wait when nothing is acknowledged
# serve_acks after a transaction that came alone: how long the sending thread waits for its
# acknowledgements itself (a broker on the same network answers within a few ms) before it
# hands them to the callback thread
SETTLE_S = 0.005
# kafka-python's max_request_size default: a record over it fails before it is queued
MAX_REQUEST_BYTES = 1_048_576

# the producer's own kafka-python options -> librdkafka properties
_PRODUCER = {"compression_type": "compression.type", "linger_ms": "linger.ms",
             "batch_size": "batch.size", "delivery_timeout_ms": "message.timeout.ms",
             "max_request_size": "message.max.bytes"}
# kafka-python options whose librdkafka twin is the default or that do not apply
_PRODUCER_IGNORED = {"max_block_ms", "buffer_memory"}


def librdkafka_config(options: Mapping) -> dict:
    """librdkafka's properties for kafka-python's producer ``options`` (security, compression,
    tunables, pass-through properties), with cachesync's own: acks=all, idempotence, the
    Java client's (and kafka-python's) murmur2 partitioner. Raises Unmappable naming the first
    option that has no librdkafka twin. The result holds the SASL password: never log
    it."""
    compression = options.get("compression_type", "absent")
    mapped = translate({k: v for k, v in options.items()
                        if k not in _PRODUCER_IGNORED and k != "compression_type"}, _PRODUCER)
    return {"acks": "all", "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            # keyed records land where kafka-python and the Java client put them (per-key
            # order survives a change of client); librdkafka's own default hashes with CRC32
            "partitioner": "murmur2_random", "message.max.bytes": MAX_REQUEST_BYTES,
            **({} if compression == "absent" else {"compression.type": compression or "none"}),
            **mapped}


def choose(client: str, options: Mapping) -> tuple[str, str]:
    """(the client to use, why) for ``kafka.client`` ``client`` and these producer options
    (cachesync.runtime.librdkafka.choose)."""
    return librdkafka.choose(client, lambda: librdkafka_config(options))


_ERRORS: dict = {}


def _error(err) -> Exception:
    """kafka-python's error class for librdkafka's KafkaError ``err`` (what the pipeline and
    ``is_permanent`` understand)."""
    if not _ERRORS:
        from confluent_kafka import KafkaError
        _ERRORS.update({KafkaError.MSG_SIZE_TOO_LARGE: kerrors.MessageSizeTooLargeError,
                        KafkaError.TOPIC_EXCEPTION: kerrors.InvalidTopicError,
                        KafkaError.TOPIC_AUTHORIZATION_FAILED: kerrors.TopicAuthorizationFailedError,
                        KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                            kerrors.ClusterAuthorizationFailedError,
                        KafkaError._MSG_TIMED_OUT: kerrors.KafkaTimeoutError,
                        KafkaError._TIMED_OUT: kerrors.KafkaTimeoutError})
    return librdkafka.kafka_python_error(err, _ERRORS)


class RdKafkaPublisher:
    """``KafkaPublisher`` on librdkafka: records go out from librdkafka's own threads; one
    thread of ours serves the delivery reports (each record's ``on_ack`` or ``on_error``,
    called on it, as kafka-python calls them on its I/O thread).

    Once the sending thread calls ``serve_acks`` (the tailer's, each time its binlog reader
    is about to wait for the server), the delivery reports are served there when it does,
    and the callback thread serves them only while records are in flight at such a wait (or
    once per POLL_S, a safety net): at the head of the binlog the reports of one read's
    records arrive while the reader lingers before the next, and waking a thread for each
    cost as much CPU as the reader's own Python.
    """

    def __init__(self, bootstrap_servers: str, *, linger_ms: int = 5,
                 batch_size: int = 256 * 1024, client_id: str = "cachesync-tailer",
                 security: Mapping | None = None):
        """As ``KafkaPublisher``'s; raises RetryableError when no broker answers within
        CONNECT_TIMEOUT_S, FatalError when the login is refused."""
        from confluent_kafka import KafkaException, Producer
        tunable = {"linger_ms": linger_ms, "batch_size": batch_size, "compression_type": None,
                   "delivery_timeout_ms": DELIVERY_TIMEOUT_MS,
                   "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS}
        config = librdkafka_config({**tunable, **(security or {})})
        self._bootstrap = bootstrap_servers
        self._errors = librdkafka.ClientErrors(bootstrap_servers)
        self._producer = Producer({**config, "bootstrap.servers": bootstrap_servers,
                                   "client.id": client_id, "error_cb": self._errors,
                                   "logger": librdkafka.QuietLog()})
        self.delivery_timeout_s = config["message.timeout.ms"] / 1000
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            try:
                self._producer.list_topics(timeout=1.0)
                break
            except KafkaException as e:
                self._producer.poll(0)      # serves the client's error callbacks
                self._errors.check_login()
                if time.monotonic() > deadline:
                    raise RetryableError(f"Kafka unavailable at {bootstrap_servers}: "
                                         f"{e.args[0].str()}") from e
        self._closed = threading.Event()
        self._handed = False               # the sending thread serves reports (serve_acks)
        self._armed = threading.Event()    # ... and asks the callback thread to, meanwhile
        self._poller = threading.Thread(target=self._serve, name="cachesync-librdkafka-acks",
                                        daemon=True)
        self._poller.start()

    def __repr__(self) -> str:
        return f"RdKafkaPublisher({self._bootstrap!r})"

    def _serve(self) -> None:
        producer, armed = self._producer, self._armed
        while not self._closed.is_set():
            if not self._handed or armed.is_set():
                producer.poll(POLL_S)
                if self._handed and not len(producer):     # all settled: park
                    armed.clear()
                    if len(producer):                       # a send raced the clear
                        armed.set()
            else:
                armed.wait(POLL_S)
                producer.poll(0)

    def serve_acks(self, alone: bool = False) -> None:
        """Serve the delivery reports that arrived, on this thread; with records still in
        flight, have the callback thread serve them while this one waits (after waiting up
        to SETTLE_S for them here when the last transaction came ``alone``: one wake-up of
        this thread instead of two of the other)."""
        self._handed = True
        producer = self._producer
        producer.poll(0)
        if alone and len(producer):
            deadline = time.monotonic() + SETTLE_S
            while len(producer):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                producer.poll(left)
        if len(producer) and not self._armed.is_set():
            self._armed.set()

    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None:
        """``partition`` None: the key's default partition (murmur2, as Kafka's clients);
        ``flush``: the flush header's value (schema.flushes), if any."""
        from confluent_kafka import KafkaException

        def delivered(err, _msg) -> None:
            if err is None:
                on_ack()
            else:
                on_error(_error(err))
        extra = {} if partition is None else {"partition": partition}
        headers = [("id", msg_id.encode("ascii"))]
        if flush is not None:
            headers.append((FLUSH_HEADER, flush))
        deadline = None
        while True:
            try:
                self._producer.produce(topic, value, key.encode("utf-8"),
                                       headers=headers, on_delivery=delivered, **extra)
                return
            except BufferError:          # the queue is full: wait for acknowledgements
                deadline = deadline or time.monotonic() + MAX_BLOCK_S
                if time.monotonic() > deadline:
                    raise kerrors.KafkaTimeoutError(
                        f"the producer's queue stayed full for {MAX_BLOCK_S:g}s") from None
                time.sleep(0.005)
            except KafkaException as e:  # refused before queueing (too large, bad topic)
                raise _error(e.args[0]) from None

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """The topic's partition ids, sorted (from the broker's metadata), waiting up to
        ``timeout_s`` (default MAX_BLOCK_S, as long as kafka-python's partitions_for) for a
        broker to answer."""
        from confluent_kafka import KafkaException
        deadline = time.monotonic() + (MAX_BLOCK_S if timeout_s is None else timeout_s)
        while True:
            wait = max(0.01, min(CONNECT_TIMEOUT_S, deadline - time.monotonic()))
            try:
                found = self._producer.list_topics(topic, timeout=wait).topics.get(topic)
                why = (found.error.str() if found is not None and found.error else
                       "not found" if found is None or not found.partitions else None)
            except KafkaException as e:
                why = e.args[0].str()
            if why is None:
                return sorted(found.partitions)
            if time.monotonic() > deadline:
                raise RetryableError(f"no metadata for topic {topic!r}: {why}")
            time.sleep(0.1)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent is settled; KafkaTimeoutError after ``timeout_s``."""
        left = self._producer.flush(-1 if timeout_s is None else timeout_s)
        if left:
            raise kerrors.KafkaTimeoutError(f"{left} records not settled within {timeout_s}s")

    def close(self, timeout_s: float = 10) -> None:
        """Close, failing whatever is still unsettled after ``timeout_s`` (its callbacks run
        with an error)."""
        if self._closed.is_set():
            return
        if self._producer.flush(timeout_s):
            self._producer.purge()          # each one's callback gets a purge error
            self._producer.poll(0)
        self._closed.set()
        self._armed.set()                   # a parked callback thread ends too
        self._poller.join()
