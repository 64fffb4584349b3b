"""The producer pipeline driven through its ports: a memory source, the memory publisher and
checkpoint store (no services)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.memory import MemoryCheckpointStore, MemoryPublisher, MemorySource
from cachesync.producer_outbox.publish import pipeline as pipeline_module
from cachesync.producer_outbox.publish.pipeline import (DELIVERY_TIMEOUT_S, WEDGED_MARGIN_S, Pipeline,
                                               PublisherWedged)
from cachesync.producer_outbox.ports import (PULSE, Begin, Commit, Decide, Group, Hold,
                                             Prepared, Record, Release, TableEvent)
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.event import PACK_PREFIX, decode
from tests.support import wait_for

USERS = ("app", "users")


def ctx(n: int) -> TxnContext:
    return TxnContext("srv", f"0-1-{n}", n, 1.7e9, gtid=True)


def cp(n: int) -> Checkpoint:
    return Checkpoint("srv", f"0-1-{n}")


def rec(n: int) -> Record:
    return Record("app", "users", f"app.users:{n}", f"v{n}".encode(), f"id-{n}")


def group(n: int, *rows: int) -> list:
    return [Begin(ctx(n)), *map(rec, rows), Commit(cp(n)), PULSE]


def pipeline(publisher, pack_rows: int = 1, **settings):
    store = MemoryCheckpointStore()
    return Pipeline(publisher, store, "t", TailerSettings(checkpoint_interval_s=3600,
                                                          pack_rows=pack_rows, **settings)), store


@pytest.mark.parametrize("acked, saved", [
    (0, []),                    # nothing acknowledged: the checkpoint stays
    (1, []),                    # half of the first group: still not past it
    (2, [cp(42)]),              # the first group done, the second not
    (3, [cp(43)]),
])
def test_the_checkpoint_moves_only_past_fully_acknowledged_groups(acked, saved):
    publisher = MemoryPublisher(auto_ack=False)
    acks = []
    real_send = publisher.send

    def send(*args, on_ack, **kw):     # keep each record's ack to give them one by one
        acks.append(on_ack)
        real_send(*args, on_ack=lambda: None, **kw)
    publisher.send = send
    p, store = pipeline(publisher)
    p.run(MemorySource(group(42, 1, 2) + group(43, 3)))
    for on_ack in acks[:acked]:
        on_ack()
    p.save_checkpoint()
    assert store.saved == saved and p.published == 3 and p.acked == acked


class SpanningSource(MemorySource):
    """A source that says when it is idle (as the fast reader does): packs span groups."""

    signals_idle = True


def big(n: int) -> Record:
    return Record("app", "users", f"app.users:{n}", b"x" * 2000, f"id-{n}")


# three groups: two rows, one row and one over pack_bytes (sent alone), no rows
SPANNING = [(42, [rec(1), rec(2)]), (43, [rec(3), big(4)]), (44, [])]


def _as_items(whole: bool) -> list:
    if whole:
        return [Group(ctx(n), records, cp(n)) for n, records in SPANNING]
    return [item for n, records in SPANNING for item in (Begin(ctx(n)), *records, Commit(cp(n)))]


@pytest.mark.parametrize("acked, saved", [
    ((), None),                 # nothing acknowledged
    (("id-1",), None),          # half of the first group's rows
    (("id-1", "id-2"), cp(42)),
    (("id-4",), None),          # the second group's big row, the first group not
    (("id-1", "id-2", "id-4"), cp(42)),     # id-3 still in flight
    (("id-1", "id-2", "id-3", "id-4"), cp(44)),
])
def test_a_whole_group_item_publishes_and_checkpoints_as_its_begin_records_and_commit(
        acked, saved):
    results = []
    for whole in (False, True):
        publisher = MemoryPublisher(partitions=3, auto_ack=False)
        p, store = pipeline(publisher, pack_rows=100, pack_bytes=1024)
        source = SpanningSource(_as_items(whole))
        p.run(source)
        p.flush_packs()
        sent = list(publisher.sent)
        rows_of = {s.msg_id: pack_ids(s) for s in sent}
        for s in sent:          # a record is acknowledged once all its rows are in ``acked``
            if all(i in acked for i in rows_of[s.msg_id]):
                publisher.ack_all([s.msg_id])
        p.save_checkpoint()
        # the same records and flushes; each pipeline has a flush token of its own
        sent = [dataclasses.replace(s, flush=s.flush and s.flush.split(b":", 1)[1])
                for s in sent]
        results.append((sent, store.saved[-1] if store.saved else None, p.published, p.acked))
    assert results[0] == results[1]
    assert results[1][1] == saved and results[1][2] == 4


def pack_ids(sent) -> list[str]:
    """The row ids a record of the test's rows carries (values ``v<n>``: ids ``id-<n>``)."""
    if not sent.value.startswith(PACK_PREFIX):
        return [sent.msg_id]
    values = sent.value[len(PACK_PREFIX) + 1:-2].split(b",")
    return [f"id-{v.decode()[1:]}" for v in values]


def test_a_failed_send_stops_the_pipeline_before_its_checkpoint():
    publisher = MemoryPublisher(auto_ack=False)
    p, store = pipeline(publisher)
    source = group(42, 1) + group(43, 2)

    def items():
        yield from source[:4]           # group 42 and its pulse
        publisher.fail_all(KafkaTimeoutError("broker gone"))
        yield from source[4:]
    with pytest.raises(RetryableError, match="stopping before the checkpoint moves"):
        p.run(type("S", (), {"changes": staticmethod(items)})())
    p.drain()
    assert store.saved == []


def test_a_permanent_error_is_fatal():
    publisher = MemoryPublisher(auto_ack=False)
    p, _ = pipeline(publisher)
    p.run(MemorySource(group(42, 1)))
    publisher.fail_all(MessageSizeTooLargeError("too large"))
    with pytest.raises(FatalError, match="refused a record for good"):
        p.run(MemorySource(group(43, 2)))


def test_a_table_event_goes_to_every_partition_after_the_packed_rows():
    publisher = MemoryPublisher(partitions=3)
    p, store = pipeline(publisher, pack_rows=10)
    change = TableChange("app", "users", "truncate")
    p.run(MemorySource([Begin(ctx(42)), rec(1), rec(2), TableEvent(ctx(42), 2, change, "TRUNCATE"),
                        Commit(cp(42))]))
    p.save_checkpoint()
    events = [s for s in publisher.sent if s.key == "app.users:"]
    assert sorted(s.partition for s in events) == [0, 1, 2] and p.table_events == 1
    assert publisher.sent.index(events[0]) >= 1       # the rows' packs went first
    assert {decode(s.value).op for s in events} == {"truncate"} and store.saved == [cp(42)]


XA = [Begin(ctx(42)), Hold(), rec(1), rec(2), Prepared("x1", cp(42), (USERS,)), PULSE,
      *group(43, 3)]


def decide(commit: bool) -> list:
    return [Begin(ctx(44)), Decide("x1", commit, ctx(44), 0, "XA COMMIT x1", (USERS,)),
            Commit(cp(44))]


def test_a_prepared_group_is_held_and_holds_the_checkpoint():
    publisher = MemoryPublisher()
    p, store = pipeline(publisher)
    p.run(MemorySource(XA))
    p.save_checkpoint()
    assert [s.msg_id for s in publisher.sent] == ["id-3"] and store.saved == []


@pytest.mark.parametrize("commit, sent", [(True, ["id-3", "id-1", "id-2"]), (False, ["id-3"])])
def test_the_decision_publishes_or_drops_the_held_rows_and_frees_the_checkpoint(commit, sent):
    publisher = MemoryPublisher()
    p, store = pipeline(publisher)
    p.run(MemorySource(XA + decide(commit)))
    p.save_checkpoint()
    assert [s.msg_id for s in publisher.sent] == sent and store.saved == [cp(44)]


def test_a_commit_of_an_unknown_or_too_large_group_invalidates_its_tables():
    publisher = MemoryPublisher(partitions=2)
    p, store = pipeline(publisher, xa_buffer_rows=1)      # two rows: over the buffer
    p.run(MemorySource(XA + decide(True)))
    reasons = [decode(s.value).extra["reason"] for s in publisher.sent if s.key == "app.users:"]
    assert reasons == ["xa_overflow"] * 2
    publisher, unknown = MemoryPublisher(partitions=2), decide(True)
    p, _ = pipeline(publisher)
    p.run(MemorySource(unknown))                          # prepared before the start
    assert [decode(s.value).extra["reason"] for s in publisher.sent] == ["xa_unknown"] * 2


@pytest.mark.parametrize("decision", ["prepared", "one phase"])
def test_a_table_event_held_in_a_group_too_large_to_hold_is_not_lost(decision):
    """A statement-logged change inside an XA group is held with its rows; when the rows
    overflow the buffer, the decision still invalidates that statement's table."""
    orders = TableChange("app", "orders", "statement")
    held = [Begin(ctx(42)), Hold(), rec(1), TableEvent(ctx(42), 1, orders, "DELETE FROM orders"),
            rec(2)]
    if decision == "prepared":
        items = [*held, Prepared("x1", cp(42), (USERS,)), PULSE, *decide(True)]
    else:
        items = [*held, Release(ctx(42), 3, (USERS,), "XA COMMIT ONE PHASE"), Commit(cp(42))]
    publisher = MemoryPublisher()
    p, _ = pipeline(publisher, xa_buffer_rows=1)
    p.run(MemorySource(items))
    invalidated = {(decode(s.value).table, decode(s.value).extra["reason"])
                   for s in publisher.sent}
    assert invalidated == {("users", "xa_overflow"), ("orders", "xa_overflow")}


def test_one_phase_commit_of_a_group_too_large_to_hold_invalidates_its_tables():
    """Its rows were dropped from the buffer: they must not vanish silently."""
    publisher = MemoryPublisher()
    p, store = pipeline(publisher, xa_buffer_rows=1)
    p.run(MemorySource([Begin(ctx(42)), Hold(), rec(1), rec(2),
                        Release(ctx(42), 2, (USERS,), "XA COMMIT ONE PHASE"), Commit(cp(42))]))
    p.save_checkpoint()
    assert [(decode(s.value).op, decode(s.value).extra["reason"]) for s in publisher.sent] == [
        ("truncate", "xa_overflow")]
    assert store.saved == [cp(42)]


def test_stop_ends_the_run_at_the_next_pulse_and_drain_stores_what_was_acked():
    publisher = MemoryPublisher()
    p, store = pipeline(publisher)
    items = group(42, 1) + group(43, 2)

    def changes():
        for item in items:
            yield item
            if item is items[2]:         # group 42's Commit
                p.stop()
    p.run(type("S", (), {"changes": staticmethod(changes)})())
    p.drain()
    assert [s.msg_id for s in publisher.sent] == ["id-1"] and store.saved == [cp(42)]


# -- a publisher that stops settling its sends (a wedged Kafka client) -------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


LIMIT_S = DELIVERY_TIMEOUT_S + WEDGED_MARGIN_S


@pytest.mark.parametrize("waited, acked, wedged", [
    (LIMIT_S - 1, False, False),     # slow, within the delivery timeout plus the margin
    (LIMIT_S, False, True),          # neither acked nor failed past it: the client is stuck
    (LIMIT_S * 10, True, False),     # acknowledged long ago: nothing pending to judge
])
def test_sends_unsettled_past_the_delivery_timeout_stop_the_pipeline(waited, acked, wedged,
                                                                      caplog):
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, store = pipeline_with(clock, publisher)

    def items():
        yield from group(42, 1, 2)
        if acked:
            publisher.ack_all()
        clock.now += waited
        yield PULSE
        yield from group(43, 3)
    if wedged:
        with pytest.raises(PublisherWedged, match=r"wedged: 2 send\(s\) .* none settled for 150s"):
            p.run(type("S", (), {"changes": staticmethod(items)})())
        assert isinstance(PublisherWedged("x"), RetryableError) and p.failed
        assert store.saved == [] and len(publisher.sent) == 2
        assert "the Kafka producer is wedged" in caplog.text
    else:
        p.run(type("S", (), {"changes": staticmethod(items)})())
        assert not p.failed and len(publisher.sent) == 3


def test_a_transaction_whose_sends_keep_being_acknowledged_is_never_wedged():
    """A bulk change that takes many delivery timeouts to publish is progress: only sends
    with no acknowledgement for that long are a wedged client."""
    clock, publisher = Clock(), MemoryPublisher(auto_ack=False)
    p, store = pipeline_with(clock, publisher)

    def items():
        yield Begin(ctx(42))
        for row in range(10):
            yield rec(row)
            clock.now += LIMIT_S / 2        # slow, but Kafka answers all along:
            publisher.ack_all([f"id-{row - 1}"])     # each send's ack comes after the next send
            yield PULSE                     # (the check: always one send in flight)
        publisher.ack_all()
        yield Commit(cp(42))
        yield PULSE
    p.run(type("S", (), {"changes": staticmethod(items)})())
    assert not p.failed and len(publisher.sent) == 10 and store.saved[-1] == cp(42)


def test_a_stop_after_a_wedge_does_not_wait_on_the_wedged_client_and_a_late_flush_is_retryable():
    clock, flushes = Clock(), []

    class Stuck(MemoryPublisher):
        def flush(self, timeout_s=None):
            flushes.append(timeout_s)
            raise KafkaTimeoutError("Timeout waiting for future")
    p, _ = pipeline_with(clock, Stuck(auto_ack=False))

    def items():
        yield from group(42, 1)
        clock.now += LIMIT_S
        yield PULSE
    with pytest.raises(PublisherWedged):
        p.run(type("S", (), {"changes": staticmethod(items)})())
    p.drain()
    assert flushes == []            # a wedged client is not flushed again
    healthy, _ = pipeline_with(Clock(), Stuck(auto_ack=False))
    healthy.run(MemorySource(group(43, 1)))
    with pytest.raises(RetryableError, match="did not acknowledge the last sends within 30s"):
        healthy.drain()             # a restart, never an exit


def pipeline_with(clock, publisher, **settings):
    store = MemoryCheckpointStore()
    return Pipeline(publisher, store, "t", TailerSettings(
        checkpoint_interval_s=0, **{"pack_rows": 1, **settings}), clock), store


def test_back_pressure_waits_no_longer_than_the_publishers_own_delivery_timeout(monkeypatch):
    monkeypatch.setattr(pipeline_module, "ROOM_WAIT_S", 0.001)

    class Ticking(Clock):
        def __call__(self):
            self.now += 20.0             # each look at the clock: 20 s later
            return self.now

    class Stuck(MemoryPublisher):
        delivery_timeout_s = 300.0      # e.g. set through kafka.producer_properties
    p, store = pipeline_with(Ticking(), Stuck(auto_ack=False), max_inflight=2)
    with pytest.raises(PublisherWedged, match=r"none settled for (33\d|34\d|350)s"):
        p.run(MemorySource(group(42, 1, 2)))
    assert store.saved == [] and p.failed


def sends_with_pending(publisher: MemoryPublisher, pipe: Pipeline) -> list[int]:
    """The rows in flight as each send is made, its own counted (a list appended to)."""
    seen, real_send = [], publisher.send

    def send(*args, **kw):
        seen.append(pipe._tracker.pending)
        real_send(*args, **kw)
    publisher.send = send
    return seen


def test_back_pressure_reads_on_once_half_of_max_inflight_is_acknowledged():
    """After a broker outage, the binlog behind the backlog is read while the backlog's
    acknowledgements come in, not after the last of them."""
    publisher = MemoryPublisher(auto_ack=False)
    p, store = pipeline_with(Clock(), publisher, max_inflight=4)
    pending_at_send = sends_with_pending(publisher, p)
    run = threading.Thread(target=p.run, args=(MemorySource(group(42, *range(1, 7))),))
    run.start()
    wait_for(lambda: len(publisher.sent) == 4, 10, interval=0.001)     # then it waits for room
    assert run.is_alive() and len(publisher.sent) == 4
    publisher.ack_all(["id-1"])                     # 3 in flight: not yet
    assert len(publisher.sent) == 4
    publisher.ack_all(["id-2"])                     # 2 of 4: reading goes on
    wait_for(lambda: len(publisher.sent) == 6, 10, interval=0.001)
    publisher.ack_all()
    run.join(10)
    assert not run.is_alive() and pending_at_send == [1, 2, 3, 4, 3, 4]
    assert store.saved[-1] == cp(42)


def test_a_group_far_larger_than_max_inflight_goes_out_a_pack_at_a_time():
    """With packs spanning groups, a group's rows count as in flight before their packs are
    sent; the wait for room is for the rows sent, or it would wait for packs never sent."""
    publisher = MemoryPublisher(auto_ack=False)
    p, store = pipeline(publisher, pack_rows=3, max_inflight=3)
    unacked_at_send, real_send = [], publisher.send

    def send(*args, **kw):
        unacked_at_send.append(len(publisher._waiting))
        real_send(*args, **kw)
    publisher.send = send
    done = threading.Event()

    def acker():                         # Kafka acknowledging whatever was sent
        while not done.is_set():
            publisher.ack_all()
            time.sleep(0.001)
    thread = threading.Thread(target=acker)
    thread.start()
    try:
        run = threading.Thread(target=p.run, daemon=True, args=(
            SpanningSource([Group(ctx(42), [rec(n) for n in range(12)], cp(42)), PULSE]),))
        run.start()
        run.join(10)
        assert not run.is_alive(), "the pipeline waits for room no send can make"
        p.flush_packs()
        wait_for(lambda: p.acked == 12, 10, interval=0.001)
    finally:
        done.set()
        thread.join(10)
    p.save_checkpoint()
    assert unacked_at_send == [0, 0, 0, 0] and store.saved[-1] == cp(42)


def test_a_send_that_fails_while_the_tailer_waits_for_room_stops_it_with_that_error():
    publisher = MemoryPublisher(auto_ack=False)
    p, store = pipeline_with(Clock(), publisher, max_inflight=2)
    errors = []

    def run():
        try:
            p.run(MemorySource(group(42, 1, 2, 3)))
        except RetryableError as e:
            errors.append(e)
    thread = threading.Thread(target=run)
    thread.start()
    wait_for(lambda: len(publisher.sent) == 2, 10, interval=0.001)
    publisher.fail_all(RetryableError("the publisher process died"))
    thread.join(10)
    assert not thread.is_alive() and "process died" in str(errors[0])
    assert store.saved == [] and p.failed


def test_a_stop_ends_a_wait_for_room():
    publisher = MemoryPublisher(auto_ack=False)
    p, store = pipeline_with(Clock(), publisher, max_inflight=1)
    thread = threading.Thread(target=p.run, args=(MemorySource(group(42, 1, 2)),))
    thread.start()
    wait_for(lambda: len(publisher.sent) == 1, 10, interval=0.001)
    p.stop()
    thread.join(10)
    assert not thread.is_alive() and store.saved == []     # nothing acknowledged


def test_closing_a_producer_with_unsettled_sends_force_closes_its_sender():
    """kafka-python's close() flushes first and raises on its timeout before it force-closes
    the I/O thread; KafkaPublisher.close then force-closes it (its batches fail) itself."""
    from cachesync.producer_outbox.publish.kafka_publisher import KafkaPublisher
    calls = []

    class Sender:
        def force_close(self):
            calls.append("force_close")

        def join(self, timeout):
            calls.append(("join", timeout))

    class Producer:
        _sender = Sender()

        def close(self, timeout):
            calls.append(("close", timeout))
            if "force_close" not in calls:
                raise KafkaTimeoutError("Timeout waiting for future")
    publisher = KafkaPublisher.__new__(KafkaPublisher)     # no broker: the client is faked
    publisher._producer = Producer()
    publisher.close(0)
    assert calls == [("close", 0), "force_close", ("join", 1), ("close", 0)]
