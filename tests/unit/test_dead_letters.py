"""KafkaDeadLetters makes its producer only for a dead letter: a consumer that never
dead-letters anything runs no producer (no network thread, connection or metadata refresh)."""

from __future__ import annotations

import socket

import pytest

from cachesync.consumer.adapters.kafka_source import KafkaDeadLetters
from cachesync.consumer.core.offsets import Record
from cachesync.schema.errors import RetryableError


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_no_producer_until_a_dead_letter_is_flushed():
    letters = KafkaDeadLetters(_closed_port(), "dlq")      # nothing listens there
    letters.flush()                                        # nothing to send: no producer
    assert letters._producer is None
    letters.close()


def test_a_dead_letter_kafka_cannot_take_stays_pending_as_a_retryable_error():
    # the producer gives up bootstrapping after a second (kafka-python waits 30)
    letters = KafkaDeadLetters(_closed_port(), "dlq", {"bootstrap_timeout_ms": 1000})
    letters.send(Record("t", 0, 7, b"k", b"not an event", (), 0), "undecodable", "detail")
    with pytest.raises(RetryableError, match="dead letters"):
        letters.flush()
    assert [letter[0].offset for letter, future in letters._pending] == [7]
    letters.close()
