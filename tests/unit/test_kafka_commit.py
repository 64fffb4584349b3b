"""Offset commits during a rebalance must not be retried in a loop (only poll() ends one)."""

import threading

import pytest
from kafka.errors import (CommitFailedError, IllegalGenerationError, NodeNotReadyError,
                          RebalanceInProgressError, UnknownMemberIdError)

from cachesync.consumer.adapters.kafka_source import KafkaSource, heartbeat_fenced, resume_dropped_join
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


class _Coordinator:
    """The three members of kafka-python's coordinator that resume_dropped_join reads."""

    def __init__(self, rejoining: bool, needed: bool):
        self.rejoining, self.rejoin_needed = rejoining, needed

    def need_rejoin(self) -> bool:
        return self.rejoin_needed

    def request_rejoin(self) -> None:
        self.rejoin_needed = True


@pytest.mark.parametrize("rejoining, needed, resumed", [
    (True, False, True),     # a join in flight that no poll would await any more
    (True, True, False),     # a join in flight that the next poll awaits anyway
    (False, False, False),   # a stable member
    (False, True, False),    # a member about to join
])
def test_resume_dropped_join_asks_for_a_rejoin_only_for_a_join_left_hanging(rejoining, needed,
                                                                           resumed):
    c = _Coordinator(rejoining, needed)
    assert resume_dropped_join(c) is resumed
    assert c.need_rejoin() is (needed or resumed)


def test_resume_dropped_join_ignores_a_consumer_without_a_coordinator():
    assert resume_dropped_join(None) is False


class _HeartbeatState:
    """kafka-python coordinator members that heartbeat_fenced reads."""

    def __init__(self, stable: bool, rejoining: bool, enabled: bool, closed: bool = False):
        self._lock = threading.Lock()
        self._stable, self.rejoining = stable, rejoining
        self._heartbeat_enabled, self._heartbeat_closed = enabled, closed

    def stable(self) -> bool:
        return self._stable


@pytest.mark.parametrize("stable, rejoining, enabled, closed, fenced", [
    (True, False, False, False, True),    # heartbeat switched off by a fence
    (True, False, True, False, False),    # a member heartbeating
    (True, True, False, False, False),    # joining: the heartbeat is off on purpose
    (False, False, False, False, False),  # not stable: kafka-python rejoins
    (True, False, False, True, False),    # closing
])
def test_heartbeat_fenced_only_when_a_stable_member_lost_its_heartbeat(stable, rejoining, enabled,
                                                                       closed, fenced):
    assert heartbeat_fenced(_HeartbeatState(stable, rejoining, enabled, closed)) is fenced
    assert heartbeat_fenced(None) is False
