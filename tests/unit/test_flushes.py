"""The flush header: the tailer marks the last record of each partition a flush touches, and
a consumer whose poll came back short waits briefly for the flush's other partitions."""

from __future__ import annotations

import pytest
from kafka import TopicPartition

from cachesync.consumer.adapters.kafka_source import GATHER_S, KafkaSource, _CommitTracker
from cachesync.consumer.core.flushes import unfinished
from cachesync.consumer.core.offsets import Record
from cachesync.producer_outbox.memory import MemoryPublisher
from cachesync.schema.flushes import HEADER, Flush, mark, parse
from tests.unit.test_pipeline_units import SpanningSource, cp, ctx, pipeline, rec
from cachesync.producer_outbox.ports import Group


def test_a_mark_reads_back_as_the_flush_it_names():
    assert mark("ab12", 7, [2, 0]) == b"ab12:7:0,2"
    assert parse(mark("ab12", 7, {5, 1, 3})) == Flush("ab12", 7, (1, 3, 5))


@pytest.mark.parametrize("value", [None, b"", b"x", b"a:b:c", b"t:1:", b"t:1:0,x", b"\xff:1:0",
                                   b"t:1:0:2"])
def test_a_header_that_names_no_flush_is_none_not_an_error(value):
    assert parse(value) is None


def r(partition: int, offset: int, flush: bytes | None = None, topic: str = "t") -> Record:
    headers = (("id", b"x"),) + (((HEADER, flush),) if flush is not None else ())
    return Record(topic, partition, offset, b"k", b"v", headers)


def owns(*partitions):
    return lambda: {("t", p) for p in partitions}


def test_records_without_a_mark_wait_for_nothing_and_leave_the_assignment_unread():
    def never():
        raise AssertionError("the assignment is read only for a marked flush")
    assert unfinished([r(0, 1), r(1, 4)], never) == set()


def test_a_flush_is_unfinished_until_each_partition_it_names_ends_with_it():
    f = mark("tok", 3, [0, 2])
    assert unfinished([r(0, 1), r(0, 2, f)], owns(0, 1, 2)) == {("t", 2)}
    assert unfinished([r(0, 2, f), r(2, 9, f)], owns(0, 1, 2)) == set()


def test_a_partition_this_consumer_does_not_own_is_not_waited_for():
    f = mark("tok", 3, [0, 2])
    assert unfinished([r(0, 2, f)], owns(0, 1)) == set()


def test_a_later_flush_of_the_same_tailer_ends_an_earlier_one():
    early, late = mark("tok", 3, [0, 2]), mark("tok", 4, [1, 2])
    assert unfinished([r(0, 2, early), r(2, 9, late)], owns(0, 1, 2)) == {("t", 1)}


def test_an_older_part_or_another_tailers_does_not_end_a_flush():
    f = mark("tok", 3, [0, 2])
    assert unfinished([r(0, 2, f), r(2, 9, mark("tok", 2, [0, 2]))], owns(0, 2)) == {("t", 2)}
    # another tailer process's (a standby took over): neither flush can tell it is whole
    assert unfinished([r(0, 2, f), r(2, 9, mark("old", 8, [0, 2]))], owns(0, 2)) == {
        ("t", 0), ("t", 2)}
    # the partition's last record has no mark: the flush's part is still to come
    assert unfinished([r(0, 2, f), r(2, 8, f), r(2, 9)], owns(0, 2)) == {("t", 2)}


def test_only_the_last_record_of_a_partition_counts():
    f = mark("tok", 3, [0, 2])
    # partition 0 went on past the flush: its last record names no flush, nothing is waited for
    assert unfinished([r(0, 2, f), r(0, 3)], owns(0, 2)) == set()


# -- the tailer's side -------------------------------------------------------------------

def test_a_flush_over_several_partitions_marks_the_last_record_of_each():
    publisher = MemoryPublisher(partitions=3, auto_ack=False)
    p, _ = pipeline(publisher, pack_rows=100, pack_bytes=1024)
    rows = [rec(n) for n in range(1, 9)]
    p.run(SpanningSource([Group(ctx(42), rows, cp(42))]))
    p.flush_packs()
    sent = publisher.sent
    partitions = {s.partition for s in sent}
    assert len(partitions) >= 2, "the rows must spread over partitions for this test"
    last = {s.partition: s for s in sent}
    flush = parse(next(iter(last.values())).flush)
    assert flush is not None and set(flush.partitions) == partitions
    assert all(s.flush == last[s.partition].flush for s in last.values())
    assert all(s.flush is None for s in sent if s is not last[s.partition])


def test_a_flush_to_one_partition_is_not_marked_and_flushes_count_up():
    publisher = MemoryPublisher(partitions=1, auto_ack=False)
    p, _ = pipeline(publisher, pack_rows=100, pack_bytes=1024)
    p.run(SpanningSource([Group(ctx(42), [rec(1), rec(2)], cp(42))]))
    p.flush_packs()
    assert [s.flush for s in publisher.sent] == [None]

    publisher = MemoryPublisher(partitions=3, auto_ack=False)
    p, _ = pipeline(publisher, pack_rows=100, pack_bytes=1024)
    for n in (42, 43):
        p.run(SpanningSource([Group(ctx(n), [rec(k) for k in range(1, 9)], cp(n))]))
        p.flush_packs()
    seqs = sorted({parse(s.flush).seq for s in publisher.sent if s.flush})
    assert seqs == [1, 2]
    tokens = {parse(s.flush).token for s in publisher.sent if s.flush}
    assert len(tokens) == 1


# -- the consumer's side -----------------------------------------------------------------

class Polls:
    """A consumer whose polls return prepared answers (``records(max, timeout)``)."""

    def __init__(self, answers, assigned=(0, 1, 2)):
        self.answers, self.calls = list(answers), []
        self.assigned = {TopicPartition("t", p) for p in assigned}

    def records(self, max_records, timeout_s):
        self.calls.append((max_records, timeout_s))
        return self.answers.pop(0) if self.answers else []

    def assignment(self):
        return self.assigned


def source_on(consumer, clock=lambda: 0.0):
    source = KafkaSource.__new__(KafkaSource)      # no broker: only the polls are exercised
    source._consumer, source._fetch = consumer, consumer.records
    source._commits = _CommitTracker(True)
    source._instance = None
    source._interval_s, source._clock, source._sent_at = 0.0, clock, None
    return source


def test_a_short_poll_with_part_of_a_flush_polls_again_for_the_rest():
    f = mark("tok", 1, [0, 2])
    consumer = Polls([[r(0, 5, f)], [r(2, 7, f)], [r(1, 1)]])
    got = source_on(consumer).poll(100, 0.5)
    assert [(x.partition, x.offset) for x in got] == [(0, 5), (2, 7)]
    assert consumer.calls == [(100, 0.5), (99, GATHER_S)]     # the third answer stays


def test_the_rest_of_a_flush_is_waited_for_at_most_gather_s():
    f = mark("tok", 1, [0, 2])
    now = [0.0]

    def clock():
        now[0] += GATHER_S / 2      # each look at the clock: half the wait gone
        return now[0]
    consumer = Polls([[r(0, 5, f)], [r(1, 1)], [r(1, 2)], [r(1, 3)]])
    got = source_on(consumer, clock).poll(100, 0.5)
    assert [(x.partition, x.offset) for x in got] == [(0, 5), (1, 1)]


def test_an_empty_poll_ends_the_wait_and_a_full_or_unmarked_one_never_starts_it():
    f = mark("tok", 1, [0, 2])
    consumer = Polls([[r(0, 5, f)], []])
    assert len(source_on(consumer).poll(100, 0.5)) == 1 and len(consumer.calls) == 2
    consumer = Polls([[r(0, 5, f)]])
    assert len(source_on(consumer).poll(1, 0.5)) == 1 and len(consumer.calls) == 1
    consumer = Polls([[r(0, 5), r(2, 1)]])
    assert len(source_on(consumer).poll(100, 0.5)) == 2 and len(consumer.calls) == 1


def test_a_flush_part_of_another_consumers_partition_is_not_waited_for():
    f = mark("tok", 1, [0, 2])
    consumer = Polls([[r(0, 5, f)], [r(2, 7, f)]], assigned=(0, 1))
    assert len(source_on(consumer).poll(100, 0.5)) == 1 and len(consumer.calls) == 1
