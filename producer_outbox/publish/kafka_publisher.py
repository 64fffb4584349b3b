"""Kafka publisher: an idempotent producer with per-message ack callbacks."""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from kafka import KafkaProducer
from kafka.errors import (AuthorizationError, InvalidTopicError, KafkaError, KafkaTimeoutError,
                          MessageSizeTooLargeError)

from cachesync.runtime.kafka_login import refused_login_is_fatal
from cachesync.runtime.kafka_security import BOOTSTRAP_TIMEOUT_MS
from cachesync.schema.errors import RetryableError
from cachesync.schema.flushes import HEADER as FLUSH_HEADER

log = logging.getLogger(__name__)

# kafka-python's max_request_size (1 MiB) bounds one record client-side, the broker's
# message.max.bytes (1 MB + 12 by default) server-side; the key, headers and batch
# framing need the rest.
MAX_RECORD_BYTES = 1_000_000
DELIVERY_TIMEOUT_MS = 120_000   # the producer's (kafka-python's default too)
# kafka-python's default is 30 s: slow to see a broker back; the same as the consumer's
# (RECONNECT_BACKOFF_MAX_MS in consumer/adapters/kafka_source.py says why 100 ms)
RECONNECT_BACKOFF_MAX_MS = 100
# Errors retrying cannot fix: the same record or topic fails the same way again.
PERMANENT_ERRORS = (MessageSizeTooLargeError, InvalidTopicError, AuthorizationError)


def delivery_timeout_s(options: Mapping | None) -> float:
    """The producer's delivery timeout under these options (kafka.producer_properties may
    set it): a send is settled, acknowledged or failed, within it."""
    return (options or {}).get("delivery_timeout_ms", DELIVERY_TIMEOUT_MS) / 1000


def new_publisher(bootstrap_servers: str, *, client: str = "auto",
                  security: Mapping | None = None, **tunable):
    """The publisher of ``kafka.client`` ``client`` (``auto``: librdkafka where it can be
    used, else kafka-python; rdkafka_publisher.choose), with ``KafkaPublisher``'s arguments.
    Says which at INFO, and why when ``auto`` fell back to kafka-python."""
    from cachesync.producer_outbox.publish import rdkafka_publisher
    chosen, why = rdkafka_publisher.choose(client, security or {})
    log.info("Kafka publisher on %s (%s)", chosen, why)
    if chosen == "librdkafka":
        return rdkafka_publisher.RdKafkaPublisher(bootstrap_servers, security=security, **tunable)
    return KafkaPublisher(bootstrap_servers, security=security, **tunable)


def wake_metadata_once(cluster) -> None:
    """Make ``cluster.request_update()`` wake kafka-python's metadata refresh loop only when no
    update is pending yet.

    While a partition with batches waiting has no known leader (the broker is down), kafka-python
    3.0's sender asks for a metadata update on every turn of its loop, and each request wakes the
    refresh loop on the sender's own I/O thread, which ends the sender's wait at once: the two
    ping-pong, thousands of turns a second, for as long as the broker is away (a whole core of
    a 2-core host, measured, taken from the broker starting again and from the rest of the
    pipeline). An update already pending needs no second wake-up: the refresh loop is retrying
    it on its own backoff (at most ``reconnect_backoff_max_ms``), and once a refresh succeeds
    the next request wakes it as before.
    """
    request = cluster.request_update

    def request_update():
        future = cluster._future
        if (cluster.need_update and cluster._refresh_loop_future is not None
                and future is not None and not future.is_done):
            return future
        return request()
    cluster.request_update = request_update


def is_permanent(error: BaseException) -> bool:
    """A Kafka error that a retry would only repeat (too large, invalid topic, not authorised)."""
    return isinstance(error, PERMANENT_ERRORS)


class KafkaPublisher:
    """Sends keyed records with an ``id`` header; ``acks=all`` and idempotence on.

    ``max_in_flight=5`` is the most Kafka's idempotent producer allows while still
    keeping per-partition order (the sequence-number window in the seeds).
    """

    def __init__(self, bootstrap_servers: str, *, linger_ms: int = 5,
                 batch_size: int = 256 * 1024, client_id: str = "cachesync-tailer",
                 security: Mapping | None = None):
        """``security``: the producer's options (kafka_security.producer_options: security,
        compression, pass-through properties, which win over the tunable defaults here)."""
        try:
            with refused_login_is_fatal(bootstrap_servers):
                self._producer = self._connect(bootstrap_servers, client_id, linger_ms,
                                               batch_size, security)
        except KafkaError as e:
            raise RetryableError(f"Kafka unavailable at {bootstrap_servers}: {e}") from e
        # kafka.producer_properties may change it: the pipeline's wedge check reads it
        self.delivery_timeout_s = self._producer.config["delivery_timeout_ms"] / 1000

    @staticmethod
    def _connect(bootstrap_servers, client_id, linger_ms, batch_size, security) -> KafkaProducer:
        tunable = dict(linger_ms=linger_ms, batch_size=batch_size, compression_type=None,
                       delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                       bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
                       reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
                       # kafka-python's own sensors, recorded per request and record and
                       # read by nothing here
                       metrics_enabled=False)
        producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers.split(","), client_id=client_id,
            acks="all", enable_idempotence=True, max_in_flight_requests_per_connection=5,
            retries=2**31 - 1, **{**tunable, **(security or {})})
        wake_metadata_once(producer._metadata)
        return producer

    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None:
        """``partition`` None: Kafka's default partitioner picks it from the key; ``flush``:
        the flush header's value (schema.flushes), if any."""
        headers = [("id", msg_id.encode("ascii"))]
        if flush is not None:
            headers.append((FLUSH_HEADER, flush))
        future = self._producer.send(topic, key=key.encode("utf-8"), value=value,
                                     headers=headers, partition=partition)
        future.add_callback(lambda _meta: on_ack())
        future.add_errback(on_error)

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """The topic's partition ids, sorted (from the producer's metadata: at once once
        known, else waiting for it up to its max_block_ms, whatever ``timeout_s``)."""
        try:
            return sorted(self._producer.partitions_for(topic))
        except KafkaError as e:
            raise RetryableError(f"no metadata for topic {topic!r}: {e}") from e

    def flush(self, timeout_s: float | None = None) -> None:
        self._producer.flush(timeout=timeout_s)

    def close(self, timeout_s: float = 10) -> None:
        """Close, failing whatever is still unsettled after ``timeout_s`` (its callbacks run
        with an error). Raises KafkaTimeoutError only if the client's I/O thread is stuck."""
        try:
            self._producer.close(timeout=timeout_s)
        except KafkaTimeoutError:
            # kafka-python's close() flushes first and raises on the timeout before it
            # force-closes its I/O thread, which then keeps the batches (and its sockets)
            # for good. No public call aborts them: force-close the sender (it fails every
            # incomplete batch on its way out), then close what is left.
            sender = self._producer._sender
            sender.force_close()
            sender.join(timeout_s + 1)
            self._producer.close(timeout=0)
