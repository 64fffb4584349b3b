"""Offset commits: during a rebalance they must not be retried in a loop (only poll() ends
one); asynchronous ones fall back to waiting after a failure, and close() commits only what is
unconfirmed for the partitions still assigned."""

import logging
import threading

import pytest
from kafka.errors import (CommitFailedError, CoordinatorLoadInProgressError,
                          GroupAuthorizationFailedError, IllegalGenerationError,
                          NodeNotReadyError, NotCoordinatorError, RebalanceInProgressError,
                          UnknownMemberIdError)

from kafka import TopicPartition
from kafka.errors import FencedInstanceIdError, KafkaTimeoutError

from cachesync.consumer.adapters.kafka_source import (MAX_COMMITS_IN_FLIGHT,
                                                      RETRIABLE_COMMIT_FAILURES_S, KafkaSource,
                                                      _CommitTracker, _Forget, heartbeat_fenced,
                                                      resume_dropped_join)
from cachesync.schema.errors import FatalError, RetryableError


class Refusing:
    def __init__(self, error):
        self.error = error

    def commit(self, offsets, timeout_ms=None):
        raise self.error

    def assignment(self):
        return {T0, T1}


class Recording:
    """kafka-python's commit calls, answered by the test (``answer``) as the broker would."""

    def __init__(self, assigned=None):
        self.sync, self.async_, self.callbacks = [], [], []
        self.assigned = {T0, T1} if assigned is None else set(assigned)
        self.closed = False
        self.fenced = False     # as kafka-python 3 once a commit was refused as fenced

    def commit(self, offsets, timeout_ms=None):
        if self.fenced:
            raise FencedInstanceIdError()
        self.sync.append(({tp: m.offset for tp, m in offsets.items()}, timeout_ms))

    def commit_async(self, offsets, callback):
        if self.fenced:         # raised before any callback runs
            raise FencedInstanceIdError()
        self.async_.append({tp: m.offset for tp, m in offsets.items()})
        self.callbacks.append((callback, offsets))

    def answer(self, response=None):
        callback, offsets = self.callbacks.pop(0)
        callback(offsets, response if response is not None else object())

    def assignment(self):
        return self.assigned

    def close(self, autocommit):
        self.closed = True


def source_with(error, async_commit=False):
    return source_on(Refusing(error), async_commit)


def source_on(consumer, async_commit=True, clock=None, interval_s=0.0):
    source = KafkaSource.__new__(KafkaSource)      # no broker: only the commits are exercised
    source._consumer = consumer
    source._commits = _CommitTracker(async_commit, **({"clock": clock} if clock else {}))
    source._instance = None
    source._interval_s, source._clock, source._sent_at = interval_s, clock or (lambda: 0.0), None
    return source


T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.mark.parametrize("error", [CommitFailedError(), RebalanceInProgressError(),
                                   IllegalGenerationError(), UnknownMemberIdError()])
def test_a_commit_lost_to_a_rebalance_is_dropped_not_retried(error, caplog):
    source_with(error).commit({("t", 0): 5})
    assert "offset commit lost to a rebalance" in caplog.text


def test_other_commit_failures_are_retryable():
    with pytest.raises(RetryableError, match="offset commit failed"):
        source_with(NodeNotReadyError()).commit({("t", 0): 5})


def test_async_commits_do_not_wait_and_close_commits_what_is_unconfirmed():
    consumer = Recording(assigned={T0, T1})
    source = source_on(consumer)
    source.commit({("t", 0): 5, ("t", 1): 7})
    source.commit({("t", 0): 9})
    assert consumer.async_ == [{T0: 5, T1: 7}, {T0: 9}] and consumer.sync == []
    consumer.answer()                              # the first one confirmed, the second not
    source.close()
    assert consumer.sync == [({T0: 9}, 5000)] and consumer.closed


def test_close_commits_nothing_when_every_commit_was_confirmed():
    consumer = Recording(assigned={T0})
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.answer()
    source.close()
    assert consumer.sync == [] and consumer.closed


def test_close_leaves_partitions_another_member_owns_now():
    """A revoked partition's offset is the next owner's: committing it at close would move
    that owner back."""
    consumer = Recording(assigned={T0, T1})
    source = source_on(consumer)
    source.commit({("t", 0): 5, ("t", 1): 7})
    _Forget(source._commits).on_partitions_revoked({T1})
    consumer.assigned = {T0}
    source.close()
    assert consumer.sync == [({T0: 5}, 5000)]


def test_close_logs_a_commit_it_cannot_make_and_still_closes(caplog):
    consumer = Recording(assigned={T0})
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.commit = Refusing(KafkaTimeoutError()).commit
    source.close()
    assert consumer.closed
    assert "the last offsets were not committed before closing" in caplog.text


@pytest.mark.parametrize("error, logged, waits", [
    (GroupAuthorizationFailedError(), "the next commit waits for its reply", True),
    (NotCoordinatorError(), "the next batch's commit covers it", False),
    (RebalanceInProgressError(), "refused during a rebalance", False),
])
def test_a_failed_async_commit_is_logged_and_a_real_failure_makes_the_next_one_wait(
        error, logged, waits, caplog):
    """An error that is not retriable makes the next commit wait for its reply (and succeed
    here); a retriable one (a coordinator moving) or a commit refused by a rebalance does
    not (the next commit covers it)."""
    caplog.set_level(logging.INFO)
    consumer = Recording()
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.answer(error)
    assert logged in caplog.text
    source.commit({("t", 0): 6})
    assert consumer.sync == ([({T0: 6}, None)] if waits else [])
    source.commit({("t", 0): 7})
    assert consumer.async_[-1] == {T0: 7}       # asynchronous again


def test_a_failing_commit_after_a_failed_async_one_is_retryable():
    consumer = Recording()
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.answer(GroupAuthorizationFailedError())
    consumer.commit = Refusing(NodeNotReadyError()).commit
    with pytest.raises(RetryableError, match="offset commit failed"):
        source.commit({("t", 0): 6})


def test_retriable_commit_failures_keep_the_consumer_going_for_a_while_only(caplog):
    """After a broker restart the group coordinator answers NOT_COORDINATOR, then
    COORDINATOR_LOAD_IN_PROGRESS, for seconds: the batches go on being applied and each
    commit covers the last. Failing for RETRIABLE_COMMIT_FAILURES_S of commits without one
    confirmed, a commit waits for its reply; one confirmed ends the streak."""
    now = [100.0]
    consumer = Recording()
    source = source_on(consumer, clock=lambda: now[0])
    source.commit({("t", 0): 0})
    consumer.answer(NotCoordinatorError())
    for offset in range(1, int(RETRIABLE_COMMIT_FAILURES_S)):   # a failed commit a second
        now[0] += 1
        source.commit({("t", 0): offset})
        consumer.answer(CoordinatorLoadInProgressError())
    assert caplog.text.count("asynchronous offset commit failed") == 1   # one warning a streak
    assert consumer.sync == [] and len(consumer.async_) == RETRIABLE_COMMIT_FAILURES_S
    now[0] += 1
    source.commit({("t", 0): 99})            # still within the bound: not answered yet
    consumer.answer(NotCoordinatorError())   # failing for the whole bound now
    source.commit({("t", 0): 100})
    assert consumer.sync == [({T0: 100}, None)]
    source.commit({("t", 0): 101})           # confirmed: asynchronous again
    assert consumer.async_[-1] == {T0: 101}


def test_the_time_a_broker_was_down_does_not_count_as_failing_commits():
    """Nothing is polled, so nothing committed, while the broker is down: the first commits
    after its return go on asynchronously even after a long outage."""
    now = [0.0]
    consumer = Recording()
    source = source_on(consumer, clock=lambda: now[0])
    source.commit({("t", 0): 5})
    consumer.answer(NotCoordinatorError())          # the broker going down
    now[0] += 10 * RETRIABLE_COMMIT_FAILURES_S      # down for minutes
    source.commit({("t", 0): 6})
    consumer.answer(NotCoordinatorError())          # back, its coordinator still loading
    source.commit({("t", 0): 7})
    assert consumer.sync == [] and consumer.async_[-1] == {T0: 7}


def test_a_confirmed_async_commit_ends_a_streak_of_retriable_failures(caplog):
    caplog.set_level(logging.INFO)
    now = [0.0]
    consumer = Recording()
    source = source_on(consumer, clock=lambda: now[0])
    source.commit({("t", 0): 5})
    source.commit({("t", 0): 6})
    consumer.answer(NotCoordinatorError())
    now[0] = 2.5
    consumer.answer()
    assert "offset commits confirmed again after 2.5 s" in caplog.text
    for offset in range(7, 7 + int(RETRIABLE_COMMIT_FAILURES_S) + 2):   # a new streak starts
        now[0] += 1                                                     # from zero
        source.commit({("t", 0): offset})
        consumer.answer(NotCoordinatorError() if offset == 7 else object())
    assert consumer.sync == []


def test_unanswered_async_commits_are_bounded():
    consumer = Recording()
    source = source_on(consumer)
    for offset in range(MAX_COMMITS_IN_FLIGHT + 1):
        source.commit({("t", 0): offset})
    assert len(consumer.async_) == MAX_COMMITS_IN_FLIGHT
    assert consumer.sync == [({T0: MAX_COMMITS_IN_FLIGHT}, None)]


def test_an_async_commit_refused_as_fenced_stops_the_consumer():
    """kafka-python 3 raises FencedInstanceIdError from the next commit_async, without
    running the callback: a fatal error, never a retryable one that would loop."""
    consumer = Recording(assigned={T0})
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.fenced = True
    with pytest.raises(FatalError, match="group_instance_id"):
        source.commit({("t", 0): 6})
    with pytest.raises(FatalError, match="group_instance_id"):
        source.commit({("t", 0): 7})      # and stays so
    source.close()                        # no commit tried for a fenced member
    assert consumer.sync == [] and consumer.closed


def test_a_fenced_answer_in_the_callback_stops_the_consumer_too():
    consumer = Recording()
    source = source_on(consumer)
    source.commit({("t", 0): 5})
    consumer.answer(FencedInstanceIdError())
    with pytest.raises(FatalError, match="group_instance_id"):
        source.commit({("t", 0): 6})


def test_sync_mode_waits_for_every_commit():
    consumer = Recording()
    source = source_on(consumer, async_commit=False)
    source.commit({("t", 0): 5})
    source.commit({("t", 0): 6})
    assert consumer.async_ == [] and consumer.sync == [({T0: 5}, None), ({T0: 6}, None)]


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


def test_a_commit_refused_by_a_rebalance_is_lost_only_if_its_partition_goes_first(caplog):
    """Refused, then covered by a later commit: nothing lost, no warning. Refused, then the
    partition revoked before a later commit: the warning (the next owner re-reads)."""
    consumer = Recording(assigned={T0, T1})
    source = source_on(consumer)
    source.commit({("t", 0): 5, ("t", 1): 7})
    consumer.answer(RebalanceInProgressError())
    assert source._commits.refused == {T0: 5, T1: 7}
    assert "lost to a rebalance" not in caplog.text
    _Forget(source._commits).on_partitions_revoked({T1})
    consumer.assigned = {T0}
    assert "offset commit lost to a rebalance" in caplog.text
    source.commit({("t", 0): 9})
    consumer.answer()
    assert source._commits.refused == {}
    assert consumer.async_[-1] == {T0: 9}


def test_a_commit_leaves_out_partitions_no_longer_assigned():
    """A batch read before a rebalance: its offsets of a partition another member owns now
    are not committed (they would move that member's offset back)."""
    consumer = Recording(assigned={T0})
    source = source_on(consumer)
    source.commit({("t", 0): 5, ("t", 1): 7})
    assert consumer.async_ == [{T0: 5}]
    consumer.assigned = set()
    source.commit({("t", 0): 6})
    assert consumer.async_ == [{T0: 5}]          # nothing of ours left: no commit at all


def test_a_refused_offset_goes_out_again_with_the_next_commit():
    consumer = Recording()
    source = source_on(consumer)
    source.commit({("t", 1): 7})
    consumer.answer(RebalanceInProgressError())
    source.commit({("t", 0): 3})
    assert consumer.async_[-1] == {T0: 3, T1: 7}
    consumer.answer()
    assert source._commits.refused == {}


class Polled(Recording):
    def poll(self, timeout_ms, max_records):
        return {}


def test_commits_within_the_interval_go_out_together_with_the_next_poll_after_it():
    now = [100.0]
    consumer = Polled()
    source = source_on(consumer, clock=lambda: now[0], interval_s=1.0)
    source.commit({("t", 0): 5})                   # the first one goes at once
    now[0] += 0.3
    source.commit({("t", 0): 7})
    source.commit({("t", 1): 2})
    source.poll(10, 0.0)
    assert consumer.async_ == [{T0: 5}]            # within the interval: recorded only
    now[0] += 0.8
    source.poll(10, 0.0)                           # the interval is over: one request
    assert consumer.async_ == [{T0: 5}, {T0: 7, T1: 2}]
    source.poll(10, 0.0)
    assert len(consumer.async_) == 2               # nothing new, nothing sent


def test_a_commit_after_the_interval_takes_the_waiting_offsets_along():
    now = [0.0]
    consumer = Recording()
    source = source_on(consumer, clock=lambda: now[0], interval_s=1.0)
    source.commit({("t", 0): 5})
    source.commit({("t", 0): 6})
    now[0] = 1.5
    source.commit({("t", 1): 3})
    assert consumer.async_ == [{T0: 5}, {T0: 6, T1: 3}]


def test_close_commits_the_offsets_still_waiting_for_the_interval():
    consumer = Recording()
    source = source_on(consumer, clock=lambda: 0.0, interval_s=1.0)
    source.commit({("t", 0): 5})
    consumer.answer()
    source.commit({("t", 0): 9})
    source.close()
    assert consumer.sync == [({T0: 9}, 5000)] and consumer.closed


def test_offsets_waiting_for_the_interval_are_dropped_with_a_revoked_partition():
    consumer = Recording()
    source = source_on(consumer, clock=lambda: 0.0, interval_s=1.0)
    source.commit({("t", 0): 5})
    consumer.answer()
    source.commit({("t", 0): 9, ("t", 1): 4})
    _Forget(source._commits).on_partitions_revoked([T0])
    consumer.assigned = {T1}
    source.close()
    assert consumer.sync == [({T1: 4}, 5000)]


class _Constructed:
    """Stands in for KafkaConsumer: keeps the keyword arguments it was built with."""

    made: list = []

    def __init__(self, **config):
        self.config = config
        _Constructed.made.append(self)

    def partitions_for_topic(self, topic):
        return {0}

    def subscribe(self, topics, listener=None):
        pass


@pytest.mark.parametrize("wait_s, properties, expected", [
    (None, {}, None),                                   # kafka-python's own 500 ms
    (1.0, {}, 1000),                                    # consumer.poll_timeout_s
    (0.05, {}, 500),                                    # a quick stop, not more fetches
    (2.5, {"fetch_max_wait_ms": 100}, 100),             # kafka.consumer_properties win
])
def test_an_idle_fetch_is_held_by_the_broker_as_long_as_a_poll_waits(monkeypatch, wait_s,
                                                                       properties, expected):
    import cachesync.consumer.adapters.kafka_source as module
    monkeypatch.setattr(module, "KafkaConsumer", _Constructed)
    _Constructed.made.clear()
    KafkaSource("b:9092", "t", "g", security=properties, fetch_wait_s=wait_s)
    (consumer,) = _Constructed.made
    assert consumer.config.get("fetch_max_wait_ms") == expected
