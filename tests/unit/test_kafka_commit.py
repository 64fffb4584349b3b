"""Offset commits during a rebalance must not be retried in a loop (only poll() ends one)."""

import pytest
from kafka.errors import (CommitFailedError, IllegalGenerationError, NodeNotReadyError,
                          RebalanceInProgressError, UnknownMemberIdError)

from cachesync.consumer.adapters.kafka_source import KafkaSource
from cachesync.schema.errors import RetryableError


class Refusing:
    def __init__(self, error):
        self.error = error

    def commit(self, offsets):
        raise self.error


def source_with(error):
    source = KafkaSource.__new__(KafkaSource)      # no broker: only commit() is exercised
    source._consumer = Refusing(error)
    return source


@pytest.mark.parametrize("error", [CommitFailedError(), RebalanceInProgressError(),
                                   IllegalGenerationError(), UnknownMemberIdError()])
def test_a_commit_lost_to_a_rebalance_is_dropped_not_retried(error, caplog):
    source_with(error).commit({("t", 0): 5})
    assert "offset commit lost to a rebalance" in caplog.text


def test_other_commit_failures_are_retryable():
    with pytest.raises(RetryableError, match="offset commit failed"):
        source_with(NodeNotReadyError()).commit({("t", 0): 5})
