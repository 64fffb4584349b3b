"""Direct mode and the sidecar supervisor without servers: acks follow applies, one stop."""

from __future__ import annotations

import threading

import pytest

from cachesync.direct import InProcessQueue
from cachesync.supervisor import RestartingTailer, run_together
from cachesync.consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore
from cachesync.schema.retry import RetryPolicy
from cachesync.consumer.engine import PythonEngine
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.mapping import parse_mappings
from tests.support.clock import FakeClock
from tests.support.events import change
from tests.support.fakes import FlakyCache

MAPPINGS = parse_mappings({"shop.users": {"keys": ["user:{id}"]}})


def send(queue, log, cache, msg_id, uid):
    """Send one event; its ack records whether its key was already deleted at ack time."""
    queue.send("direct", f"shop.users:{uid}", change(msg_id, uid), msg_id,
               on_ack=lambda: log.append((msg_id, f"user:{uid}" in cache.deleted)),
               on_error=lambda e: log.append((msg_id, e)))


def engine(queue, cache):
    return PythonEngine(queue, MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS,
                        retry=RetryPolicy(base_s=0.001, cap_s=0.002))


def test_queue_hands_records_to_the_engine_in_send_order():
    queue = InProcessQueue()
    for i in range(3):
        queue.send("direct", f"k{i}", b"v", f"id{i}", on_ack=lambda: None, on_error=print)
    records = queue.poll(2, 0)
    assert [(r.offset, r.key, r.header("id")) for r in records] == [(0, b"k0", b"id0"),
                                                                   (1, b"k1", b"id1")]
    assert [r.offset for r in queue.poll(10, 0)] == [2]
    assert queue.poll(10, 0) == [] and queue.pending == 3


def _send_at(queue, clock, at, key):
    clock.now = at
    queue.send("direct", key, b"v", key, on_ack=lambda: None, on_error=print)


def test_changes_far_apart_are_polled_at_once():
    clock = FakeClock(100.0)
    queue = InProcessQueue(linger_s=0.002, clock=clock, sleep=clock.sleep)
    _send_at(queue, clock, 100.0, "a")
    _send_at(queue, clock, 100.010, "b")             # 100 commits/s: 10 ms apart
    assert [r.key for r in queue.poll(10, 0)] == [b"a", b"b"] and clock.slept == []


def test_changes_close_together_wait_for_the_rest_of_the_linger_after_the_newest():
    clock = FakeClock(100.0)
    queue = InProcessQueue(linger_s=0.002, clock=clock, sleep=clock.sleep)
    _send_at(queue, clock, 100.0, "a")
    _send_at(queue, clock, 100.001, "b")             # 1,000 commits/s
    clock.now = 100.0015                             # the engine's poll, 0.5 ms later
    queue.poll(10, 0)
    assert clock.slept == [0.0015]                    # until 2 ms after the newest send
    _send_at(queue, clock, 100.0025, "c")
    _send_at(queue, clock, 100.0030, "d")
    assert [r.key for r in queue.poll(2, 0)] == [b"c", b"d"] and len(clock.slept) == 1  # full


def test_acks_come_only_after_the_keys_were_deleted():
    queue, cache, log = InProcessQueue(), FlakyCache(failures=2), []
    for i in range(3):
        send(queue, log, cache, f"m{i}", i)
    e = engine(queue, cache)
    assert log == []                                    # nothing acked before the engine ran
    e.step()                                            # two failed deletes, retried, then applied
    assert log == [("m0", True), ("m1", True), ("m2", True)]
    assert queue.pending == 0
    queue.flush(timeout_s=0)                            # nothing left: returns at once


def test_an_engine_failure_fails_pending_and_later_sends():
    queue, cache, log = InProcessQueue(), MemoryCache(), []
    send(queue, log, cache, "m0", 0)
    queue.fail(FatalError("redis refused the credentials"))
    send(queue, log, cache, "m1", 1)
    assert [(m, str(e)) for m, e in log] == [("m0", "redis refused the credentials"),
                                             ("m1", "redis refused the credentials")]


def test_flush_waits_for_the_engine():
    queue, cache, log = InProcessQueue(), MemoryCache(), []
    send(queue, log, cache, "m0", 0)
    e = engine(queue, cache)
    worker = threading.Thread(target=e.run)
    worker.start()
    queue.flush(timeout_s=10)
    e.stop()
    worker.join(10)
    assert log == [("m0", True)]


class FakeTailer:
    def __init__(self, error=None):
        self.error, self.stopped, self.published, self.committed = error, threading.Event(), 0, None

    def run(self):
        if self.error is not None:
            raise self.error
        self.stopped.wait(10)

    def stop(self):
        self.stopped.set()


FAST = RetryPolicy(base_s=0.001, cap_s=0.002)


def test_a_transient_failure_rebuilds_the_tailer():
    built = [FakeTailer(RetryableError("mysql gone")), FakeTailer()]
    loop = RestartingTailer(lambda: built.pop(0), FAST)
    thread = threading.Thread(target=loop.run)
    thread.start()
    while built:                                       # the second tailer was taken
        thread.join(0.01)
    loop.stop()
    thread.join(10)
    assert not thread.is_alive() and loop.last.stopped.is_set()


class Waits:
    """A stop event that records each wait asked of it and never waits."""

    def __init__(self):
        self.asked = []

    def is_set(self):
        return False

    def wait(self, seconds):
        self.asked.append(seconds)
        return False

    def set(self):
        pass


def test_a_tailer_that_ran_healthy_starts_the_restart_backoff_over():
    # four failures in a row, a tailer that ran an hour, then two failures in a row: the
    # backoff is asked for the failures in a row, counted again from 1 after the long run
    now = [0.0]
    runs = [0, 0, 0, 0, 3600, 0, None]       # seconds each tailer runs before failing

    class Timed(FakeTailer):
        def __init__(self, seconds):
            super().__init__(RetryableError("mysql gone") if seconds is not None else None)
            self.seconds = seconds

        def run(self):
            if self.seconds is None:
                return                        # a clean stop ends the loop
            now[0] += self.seconds
            raise self.error

    attempts = []

    class Counted(RetryPolicy):
        def backoff(self, attempt):
            attempts.append(attempt)
            return 0.0

    loop = RestartingTailer(lambda: Timed(runs.pop(0)), Counted(), healthy_s=60,
                            clock=lambda: now[0])
    loop._stopping = Waits()
    loop.run()
    assert attempts == [1, 2, 3, 4, 1, 2]


def test_a_fatal_cause_behind_a_publish_failure_is_fatal():
    cause = FatalError("redis refused the credentials")
    try:
        raise RetryableError("send failed") from cause
    except RetryableError as e:
        failing = e
    loop = RestartingTailer(lambda: FakeTailer(failing), FAST)
    with pytest.raises(FatalError, match="refused"):
        loop.run()


def test_one_fatal_component_stops_the_others_and_is_raised():
    healthy = FakeTailer()
    with pytest.raises(FatalError, match="bad grants"):
        run_together({"tailer": FakeTailer(FatalError("bad grants")), "consumer": healthy},
                      install_stop=lambda stop: None)
    assert healthy.stopped.is_set()


def test_the_stop_request_stops_everything_cleanly():
    a, b = FakeTailer(), FakeTailer()
    run_together({"a": a, "b": b}, install_stop=lambda stop: stop())   # as if SIGTERM came at once
    assert a.stopped.is_set() and b.stopped.is_set()


@pytest.mark.parametrize("errors, expected", [
    ([RetryableError("r"), FatalError("f")], FatalError),
    ([ValueError("v"), RetryableError("r")], RetryableError),
])
def test_the_most_severe_error_wins(errors, expected):
    with pytest.raises(expected):
        run_together({str(i): FakeTailer(e) for i, e in enumerate(errors)},
                     install_stop=lambda stop: None)
