"""The tailer through a Kafka outage: the pipeline's outage check (KafkaUnreachable) and the
fallback that applies changes directly until Kafka serves (cachesync.kafka_outage), driven
through their ports (no services)."""

from __future__ import annotations

import logging
import threading

import pytest

from cachesync.kafka_outage import KafkaOutageFallback
from cachesync.producer_outbox.binlog.checkpoint import HeldCheckpoints
from cachesync.producer_outbox.memory import MemoryCheckpointStore, MemoryPublisher, MemorySource
from cachesync.producer_outbox.ports import PULSE
from cachesync.producer_outbox.publish import pipeline as pipeline_module
from cachesync.producer_outbox.publish.pipeline import KafkaUnreachable, Pipeline
from cachesync.runtime.config import TailerSettings
from cachesync.schema.errors import FatalError, RetryableError
from tests.support import wait_for
from tests.unit.test_pipeline_units import Clock, cp, group

AFTER_S = 1.0


@pytest.fixture(autouse=True)
def every_event_checks(monkeypatch):
    """The run loop looks at most every OUTAGE_CHECK_S of real time; here at every event."""
    monkeypatch.setattr(pipeline_module, "OUTAGE_CHECK_S", 0.0)


def outage_pipeline(clock, publisher, after_s: float | None = AFTER_S, **settings):
    store = MemoryCheckpointStore()
    return Pipeline(publisher, store, "t", TailerSettings(
        checkpoint_interval_s=0, **{"pack_rows": 1, **settings}), clock,
        outage_after_s=after_s), store


def source(items):
    return type("S", (), {"changes": staticmethod(items)})()


@pytest.mark.parametrize("waited, acked, stops", [
    (AFTER_S * 0.9, False, False),      # slower than usual, not yet an outage
    (AFTER_S, False, True),             # no acknowledgement for the whole limit
    (AFTER_S * 50, True, False),        # acknowledged: nothing in flight to judge
])
def test_sends_unacknowledged_for_the_limit_stop_the_run_at_the_acknowledged_checkpoint(
        waited, acked, stops):
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, store = outage_pipeline(clock, publisher)

    def items():
        yield from group(41, 1)
        publisher.ack_all()
        yield PULSE
        yield from group(42, 2, 3)
        if acked:
            publisher.ack_all()
        clock.now += waited
        yield PULSE
        yield from group(43, 4)
    if stops:
        with pytest.raises(KafkaUnreachable, match=r"none of 2 send\(s\) for 1\.0s"):
            p.run(source(items))
        assert isinstance(KafkaUnreachable("x"), RetryableError) and p.kafka_outages == 1
        assert store.saved[-1] == cp(41) and len(publisher.sent) == 3
    else:
        p.run(source(items))
        assert p.kafka_outages == 0 and len(publisher.sent) == 4


def test_without_a_limit_the_pipeline_waits_for_kafka_as_long_as_it_takes():
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, _ = outage_pipeline(clock, publisher, after_s=None)

    def items():
        yield from group(42, 1)
        clock.now += 100 * AFTER_S
        yield PULSE
        yield from group(43, 2)
    p.run(source(items))
    assert p.kafka_outages == 0 and len(publisher.sent) == 2


def test_a_slow_transaction_whose_sends_keep_being_acknowledged_is_no_outage():
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, store = outage_pipeline(clock, publisher)

    def items():
        for n in range(10):
            yield from group(40 + n, n)
            clock.now += AFTER_S * 0.6      # each ack comes after the next send
            publisher.ack_all([f"id-{n - 1}"])
            yield PULSE
        publisher.ack_all()
        yield PULSE
    p.run(source(items))
    assert p.kafka_outages == 0 and store.saved[-1] == cp(49)


def test_an_outage_while_waiting_for_room_stops_the_wait(monkeypatch):
    monkeypatch.setattr(pipeline_module, "ROOM_WAIT_S", 0.001)

    class Ticking(Clock):
        def __call__(self):
            self.now += 0.3
            return self.now
    p, store = outage_pipeline(Ticking(), MemoryPublisher(auto_ack=False), max_inflight=2)
    with pytest.raises(KafkaUnreachable):
        p.run(MemorySource(group(42, 1, 2, 3)))
    assert store.saved == [] and p.kafka_outages == 1


def test_the_stop_after_an_outage_gives_up_the_sends_at_once_and_stores_what_was_acked():
    flushes = []

    class Unserved(MemoryPublisher):
        def flush(self, timeout_s=None):
            flushes.append(timeout_s)
    clock, publisher = Clock(), Unserved(auto_ack=False)
    p, store = outage_pipeline(clock, publisher)

    def items():
        yield from group(41, 1)
        publisher.ack_all()
        yield from group(42, 2)
        clock.now += AFTER_S
        yield PULSE
    with pytest.raises(KafkaUnreachable):
        p.run(source(items))
    p.drain()
    assert flushes == [] and store.saved[-1] == cp(41)


def test_held_checkpoints_read_the_store_and_keep_progress_in_memory():
    stored = MemoryCheckpointStore(cp(41))
    held = HeldCheckpoints(stored)
    assert held.load() == cp(41)
    held.save(cp(45))
    held.close()
    assert held.latest == cp(45) and stored.load() == cp(41) and stored.saved == []
    assert stored.closed


# -- the fallback ----------------------------------------------------------------------
class Run:
    """A tailer or direct run: what it does when run (``then``: raise it, or None: return
    at once; "wait": until stopped), recorded in ``log``."""

    def __init__(self, name: str, log: list, then=None):
        self.name, self._log, self._then = name, log, then
        self.stopped = threading.Event()
        self.outage_fallbacks: list = []
        self.engine = type("E", (), {"stats": type("S", (), {"applied": 7})()})()
        self.published = 3

    def run(self):
        self._log.append(f"{self.name} runs")
        if self._then == "wait":
            self.stopped.wait(30)
            self._log.append(f"{self.name} stopped")
        elif self._then is not None:
            raise self._then

    def stop(self):
        self.stopped.set()


class Probe:
    """Kafka not serving ``down`` times, then serving."""

    def __init__(self, down: int, log: list):
        self.down, self._log, self.closed = down, log, 0

    def serving(self, topic):
        if self.down:
            self.down -= 1
            raise RetryableError(f"Kafka unavailable for {topic}")
        self._log.append("served")

    def close(self):
        self.closed += 1


def runs(*made):
    queue = list(made)
    return lambda: queue.pop(0)


def fallback(tailers, directs, probe):
    return KafkaOutageFallback(runs(*tailers), runs(*directs), lambda: probe, "topic",
                               probe_every_s=0.001)


def test_an_outage_applies_directly_until_kafka_serves_then_publishes_again(caplog):
    log = []
    first = Run("tailer 1", log, KafkaUnreachable("Kafka acknowledged none of 2 send(s)"))
    second, direct, probe = Run("tailer 2", log), Run("direct", log, "wait"), Probe(3, log)
    f = fallback([first, second], [direct], probe)
    with caplog.at_level(logging.WARNING):
        f.run()
    assert log == ["tailer 1 runs", "direct runs", "served", "direct stopped", "tailer 2 runs"]
    assert f.outages == 1 and first.outage_fallbacks == [direct] and probe.closed == 1
    assert f.tailer is second and f.published == 3      # the last tailer's, read through
    assert "applying changes to Redis directly from the checkpoint" in caplog.text
    assert "7 event(s) were applied directly" in caplog.text


def test_a_direct_run_that_cannot_start_leaves_the_tailer_waiting_for_kafka(caplog):
    log = []

    def refused():
        raise FatalError("Redis refused the credentials")
    first = Run("tailer 1", log, KafkaUnreachable("down"))
    second = Run("tailer 2", log)
    f = KafkaOutageFallback(runs(first, second), refused, lambda: Probe(2, log), "topic",
                            probe_every_s=0.001)
    f.run()
    assert log == ["tailer 1 runs", "served", "tailer 2 runs"] and first.outage_fallbacks == []
    assert "cannot apply changes directly during the Kafka outage" in caplog.text


def test_a_direct_run_that_fails_transiently_starts_again(monkeypatch):
    monkeypatch.setattr("cachesync.kafka_outage.RETRY_DIRECT_S", 0.001)
    log = []
    probe = Probe(10**9, log)
    first, second = Run("tailer 1", log, KafkaUnreachable("down")), Run("tailer 2", log)
    broken = Run("direct 1", log, RetryableError("MySQL connection lost"))
    working = Run("direct 2", log, "wait")
    f = fallback([first, second], [broken, working], probe)
    thread = threading.Thread(target=f.run)
    thread.start()
    wait_for(lambda: "direct 2 runs" in log, 10, interval=0.001, what="the second direct run")
    probe.down = 0
    thread.join(10)
    assert log == ["tailer 1 runs", "direct 1 runs", "direct 2 runs", "served",
                   "direct 2 stopped", "tailer 2 runs"]
    assert first.outage_fallbacks == [broken, working]


def test_a_stop_during_the_outage_ends_the_direct_run_and_builds_no_other_tailer():
    log = []
    first, direct = Run("tailer 1", log, KafkaUnreachable("down")), Run("direct", log, "wait")
    f = fallback([first], [direct], Probe(10**9, log))
    thread = threading.Thread(target=f.run)
    thread.start()
    wait_for(lambda: "direct runs" in log, 10, interval=0.001, what="the direct run")
    f.stop()
    thread.join(10)
    assert not thread.is_alive() and log == ["tailer 1 runs", "direct runs", "direct stopped"]


def test_other_errors_of_the_tailer_reach_the_caller():
    log = []
    f = fallback([Run("tailer 1", log, RetryableError("MySQL gone"))], [], Probe(0, log))
    with pytest.raises(RetryableError, match="MySQL gone"):
        f.run()
    assert f.outages == 0


class MetadataGone(MemoryPublisher):
    """Three partitions until ``gone``; then no metadata within the wait it is given."""

    def __init__(self):
        super().__init__(auto_ack=False)
        self.gone, self.waits = False, []

    def partitions(self, topic, timeout_s=None):
        self.waits.append(timeout_s)
        if self.gone:
            raise RetryableError(f"no metadata for topic {topic!r}")
        return [0, 1, 2]


def test_metadata_waits_are_bounded_and_a_known_partition_count_is_kept_through_an_outage():
    clock, publisher = Clock(), MetadataGone()
    p, store = outage_pipeline(clock, publisher, pack_rows=10)

    def items():
        yield from group(41, 1)
        publisher.ack_all()
        publisher.gone = True
        yield from group(42, 2)         # its pack goes out to the partition of three
        clock.now += AFTER_S
        yield PULSE
    with pytest.raises(KafkaUnreachable, match="none of 1 send"):
        p.run(source(items))
    assert publisher.waits == [AFTER_S, AFTER_S] and len(publisher.sent) == 2
    assert store.saved[-1] == cp(41)


def test_no_metadata_before_any_partition_count_is_known_is_an_outage():
    publisher = MetadataGone()
    publisher.gone = True
    p, _ = outage_pipeline(Clock(), publisher, pack_rows=10)
    with pytest.raises(KafkaUnreachable, match="no metadata for the topic within 1s"):
        p.run(MemorySource(group(42, 1)))
    assert p.kafka_outages == 1 and publisher.sent == []
