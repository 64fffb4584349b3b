"""The tailer through a Kafka outage: the pipeline's outage check (KafkaUnreachable) and the
fallback that applies changes directly until Kafka serves (cachesync.kafka_outage), driven
through their ports (no services)."""

from __future__ import annotations

import logging
import threading

import pytest

from cachesync.kafka_outage import KafkaOutageFallback
from cachesync.wiring import outage_server_id
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
        with pytest.raises(KafkaUnreachable, match=r"none of 2 send\(s\) for 1\.0s \(limit 1s\)"):
            p.run(source(items))
        assert isinstance(KafkaUnreachable("x"), RetryableError) and p.kafka_outages == 1
        assert store.saved[-1] == cp(41) and len(publisher.sent) == 3
    else:
        p.run(source(items))
        assert p.kafka_outages == 0 and len(publisher.sent) == 4


class Served(MemoryPublisher):
    """A publisher whose acknowledgements wait for the sending thread (``serve_acks``), as
    librdkafka's do once the tailer serves them: Kafka answered, nobody served it yet."""

    def __init__(self):
        super().__init__(auto_ack=False)
        self.serves = []

    def serve_acks(self, alone: bool = False) -> None:
        self.serves.append(alone)
        self.ack_all()


def test_acknowledgements_waiting_to_be_served_are_served_before_an_outage_is_declared():
    clock, publisher = Clock(), Served()
    p, store = outage_pipeline(clock, publisher)

    def items():
        yield from group(42, 1, 2)
        clock.now += AFTER_S * 5        # the reader waited long; the acks came meanwhile
        yield PULSE
        yield from group(43, 3)
    p.run(source(items))
    assert p.kafka_outages == 0 and len(publisher.sent) == 3 and publisher.serves == [False]
    assert store.saved[-1] == cp(42)


def test_the_wait_for_room_serves_the_acknowledgements_on_the_senders_thread():
    publisher = Served()
    p, store = outage_pipeline(Clock(), publisher, after_s=None, max_inflight=2)
    run = threading.Thread(target=p.run, args=(source(lambda: group(42, 1, 2, 3, 4)),),
                           daemon=True)
    run.start()
    run.join(10)
    assert not run.is_alive(), "the wait for room waits for acknowledgements nobody serves"
    assert len(publisher.sent) == 4 and publisher.serves     # no other thread acknowledged
    p.save_checkpoint()
    assert store.saved[-1] == cp(42)


def test_without_packs_the_first_group_asks_kafka_within_the_limit():
    """pack_rows 1: no partition count is needed, yet the first group asks for it once, so a
    publisher that cannot reach Kafka stops the run within the limit (KafkaUnreachable)
    instead of leaving the first send to wait for its start."""
    asked = []

    class Unreachable(MemoryPublisher):
        def partitions(self, topic, timeout_s=None):
            asked.append(timeout_s)
            raise RetryableError("the Kafka publisher has not started within 3s")
    p, store = outage_pipeline(Clock(), Unreachable(auto_ack=False))
    with pytest.raises(KafkaUnreachable, match="no metadata for the topic within 1s"):
        p.run(MemorySource(group(42, 1)))
    assert asked == [AFTER_S] and p.kafka_outages == 1 and store.saved == []


def test_without_packs_kafka_is_asked_once_per_run():
    asked = []

    class Counting(MemoryPublisher):
        def partitions(self, topic, timeout_s=None):
            asked.append(timeout_s)
            return super().partitions(topic, timeout_s)
    p, _ = outage_pipeline(Clock(), Counting())
    p.run(MemorySource([*group(42, 1), *group(43, 2), *group(44, 3)]))
    assert asked == [AFTER_S] and p.kafka_outages == 0


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
    at once; "wait": until stopped), recorded in ``log``; ``positions``: what ``committed``
    says, one after the other (the last one stays)."""

    def __init__(self, name: str, log: list, then=None, positions=(cp(40),)):
        self.name, self._log, self._then = name, log, then
        self._positions = list(positions)
        self.stopped = threading.Event()
        self.outage_fallbacks: list = []
        self.engine = type("E", (), {"stats": type("S", (), {"applied": 7})()})()
        self.pipeline = type("P", (), {"outage_after_s": AFTER_S})()
        self.published = 3

    @property
    def committed(self):
        return self._positions.pop(0) if len(self._positions) > 1 else self._positions[0]

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
    """Kafka not serving ``down`` times, then serving; the group's committed offsets, one
    answer after the other (the last one stays)."""

    def __init__(self, down: int, log: list, committed=({0: 10},)):
        self.down, self._log, self.closed = down, log, 0
        self._committed = list(committed)

    def serving(self, topic):
        if self.down:
            self.down -= 1
            raise RetryableError(f"Kafka unavailable for {topic}")
        self._log.append("served")

    def end_offsets(self, topic):
        return {0: 10}

    def committed_offsets(self, group, topic):
        assert group == "group"
        answer = self._committed.pop(0) if len(self._committed) > 1 else self._committed[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        self.closed += 1


def runs(*made):
    queue, starts = list(made), []

    def build(*start):
        starts.extend(start)
        return queue.pop(0)
    build.starts = starts
    return build


def fallback(tailers, directs, probe, **options):
    return KafkaOutageFallback(runs(*tailers), runs(*directs), lambda: probe, "topic", "group",
                               probe_every_s=0.001, **options)


def in_thread(f: KafkaOutageFallback) -> threading.Thread:
    thread = threading.Thread(target=f.run, daemon=True)
    thread.start()
    return thread


def test_an_outage_applies_directly_until_kafka_serves_and_the_consumer_read_the_range(caplog):
    """The direct run goes on beside the next tailer run until that run acknowledged past
    where the direct run was when Kafka came back, and the consumer group committed the end
    offsets of then."""
    log = []
    first = Run("tailer 1", log, KafkaUnreachable("Kafka acknowledged none of 2 send(s)", cp(40)))
    direct = Run("direct", log, "wait", positions=[cp(45)])
    second = Run("tailer 2", log, "wait", positions=[cp(41), cp(43), cp(45)])
    loading = RetryableError("NotCoordinatorError: the coordinator is loading")
    probe = Probe(3, log, committed=[{0: 4}, loading, {}, {0: 9}, {0: 10}])
    directs = runs(direct)
    f = KafkaOutageFallback(runs(first, second), directs, lambda: probe, "topic", "group",
                            probe_every_s=0.001)
    with caplog.at_level(logging.INFO):
        thread = in_thread(f)
        wait_for(lambda: "the tailer stopped applying changes directly" in caplog.text, 10,
                 interval=0.001, what="the handover")
        f.stop()
        thread.join(10)
    assert log == ["tailer 1 runs", "direct runs", "served", "tailer 2 runs", "direct stopped",
                   "tailer 2 stopped"]
    assert directs.starts == [cp(40)]       # the direct run starts at the outage's lookback
    assert f.outages == 1 and first.outage_fallbacks == [direct] and probe.closed == 1
    assert f.tailer is second and f.published == 3      # the last tailer's, read through
    assert "applying changes to Redis directly from the checkpoint" in caplog.text
    assert "7 event(s) applied directly so far" in caplog.text


def test_a_consumer_that_does_not_catch_up_ends_the_direct_run_after_the_limit(caplog):
    log = []
    first = Run("tailer 1", log, KafkaUnreachable("down"))
    direct = Run("direct", log, "wait", positions=[cp(45)])
    second = Run("tailer 2", log, "wait", positions=[cp(46)])
    f = fallback([first, second], [direct], Probe(0, log, committed=[{}]), handover_max_s=0.05)
    thread = in_thread(f)
    wait_for(lambda: "did not read what was published again within 0s" in caplog.text, 10,
             interval=0.001, what="the handover's limit")
    f.stop()
    thread.join(10)
    assert "direct stopped" in log


def test_a_direct_run_that_cannot_start_leaves_the_tailer_waiting_for_kafka(caplog):
    log = []

    def refused(start):
        raise FatalError("Redis refused the credentials")
    first = Run("tailer 1", log, KafkaUnreachable("down"))
    second = Run("tailer 2", log)
    f = KafkaOutageFallback(runs(first, second), refused, lambda: Probe(2, log), "topic",
                            "group", probe_every_s=0.001)
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
    thread = in_thread(f)
    wait_for(lambda: "direct 2 runs" in log, 10, interval=0.001, what="the second direct run")
    probe.down = 0
    thread.join(10)
    assert log[:4] == ["tailer 1 runs", "direct 1 runs", "direct 2 runs", "served"]
    assert log[4:] in (["tailer 2 runs", "direct 2 stopped"], ["direct 2 stopped", "tailer 2 runs"])
    assert first.outage_fallbacks == [broken, working]


def test_a_stop_during_the_outage_ends_the_direct_run_and_builds_no_other_tailer():
    log = []
    first, direct = Run("tailer 1", log, KafkaUnreachable("down")), Run("direct", log, "wait")
    f = fallback([first], [direct], Probe(10**9, log))
    thread = in_thread(f)
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


def test_kafka_serving_at_the_first_ask_is_slow_acknowledgement_and_doubles_the_limit(caplog):
    """A broker that answers at once but acknowledges slower than the limit must not stop
    the tailer over and over: each such stop doubles the limit; an outage that was one (the
    topic not served when first asked) brings the configured limit back."""
    log = []
    slow = [Run(f"tailer {n}", log, KafkaUnreachable("slow")) for n in (1, 2)]
    away, last = Run("tailer 3", log, KafkaUnreachable("away")), Run("tailer 4", log)
    probes = [Probe(0, log), Probe(0, log), Probe(2, log)]
    f = KafkaOutageFallback(runs(*slow, away, last),
                            lambda start: Run("direct", log, "wait"), lambda: probes.pop(0),
                            "topic", "group", probe_every_s=0.001)
    f.run()
    limits = [t.pipeline.outage_after_s for t in (*slow, away, last)]
    assert limits == [AFTER_S, 2 * AFTER_S, 4 * AFTER_S, AFTER_S] and f.outages == 3
    assert "acknowledged nothing for 2s: the tailer waits up to 4s" in caplog.text


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


def test_metadata_waits_are_bounded_and_no_answer_within_the_limit_is_an_outage():
    clock, publisher = Clock(), MetadataGone()
    p, store = outage_pipeline(clock, publisher, pack_rows=10)

    def items():
        yield from group(41, 1)
        publisher.ack_all()
        yield PULSE
        publisher.gone = True
        yield from group(42, 2)
    with pytest.raises(KafkaUnreachable, match="no metadata for the topic within 1s") as raised:
        p.run(source(items))
    assert publisher.waits == [AFTER_S, AFTER_S] and len(publisher.sent) == 1
    assert store.saved[-1] == cp(41) and p.kafka_outages == 1
    assert raised.value.lookback == cp(41)


@pytest.mark.parametrize("lookback_s, expected", [
    (0.0, cp(44)),      # the checkpoint of the last acknowledgement
    (2.5, cp(41)),      # the one stored at least 2.5 s before it (at 1001 of 1004)
    (100.0, cp(40)),    # a run younger than the lookback: its first
])
def test_the_outage_names_the_checkpoint_stored_the_lookback_before_the_last_ack(
        lookback_s, expected):
    """Kafka may have acknowledged changes a broker going away no longer handed to the
    consumer: the direct invalidation starts that far back (the consumer's own are done)."""
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, _ = outage_pipeline(clock, publisher, kafka_outage_lookback_s=lookback_s)
    p.start_at(cp(40))

    def items():
        for n in range(41, 45):         # one group stored a second
            clock.now += 1.0
            yield from group(n, n)
            publisher.ack_all()
            yield PULSE
        yield from group(45, 45)
        clock.now += AFTER_S
        yield PULSE
    with pytest.raises(KafkaUnreachable) as raised:
        p.run(source(items))
    assert raised.value.lookback == expected


@pytest.mark.parametrize("server_id", [1, 88001, 2**31 - 1, 2**31, 2**31 + 5, 2**32 - 1])
def test_the_direct_run_reads_the_binlog_with_a_server_id_of_its_own(server_id):
    """It reads beside the tailer run publishing again; one id for both: the server drops
    the older connection."""
    other = outage_server_id(server_id)
    assert other != server_id and 1 <= other <= 2**32 - 1


def test_kafka_refusing_the_login_during_an_outage_stops_the_tailer():
    """A refused login is no outage to wait out: the direct run ends and the error reaches
    the caller (exit 3), as it would from the tailer's own Kafka client."""
    log = []

    class Refusing(Probe):
        def serving(self, topic):
            raise FatalError("Kafka at 127.0.0.1:19094 refused the login")
    first, direct = Run("tailer 1", log, KafkaUnreachable("down")), Run("direct", log, "wait")
    f = fallback([first], [direct], Refusing(0, log))
    with pytest.raises(FatalError, match="refused the login"):
        f.run()
    # the direct run may not have started yet when the refusal came: ended either way
    assert log in (["tailer 1 runs"], ["tailer 1 runs", "direct runs", "direct stopped"])
