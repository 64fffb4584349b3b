"""The producer's Publisher and CheckpointStore contracts, each run against the in-memory
twin and the real adapters: KafkaPublisher (in the tailer's process) and ProcessPublisher
(a child process) on the devstack's broker, each on kafka-python and on librdkafka; MySQLCheckpointStore (a resume position, in
order) and the outbox's OutboxCheckpoints (progress per group) on its MariaDB.

The change source's contract (the binlog source against the memory source) is in
test_change_source.py.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from cachesync.producer_outbox.binlog.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.memory import MemoryCheckpointStore, MemoryPublisher
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.outbox import emit
from cachesync.producer_outbox.publish.process_publisher import ProcessPublisher
from cachesync.producer_outbox.publish.kafka_publisher import KafkaPublisher
from cachesync.producer_outbox.publish.rdkafka_publisher import RdKafkaPublisher
from cachesync.producer_outbox.outbox_relay.store import OutboxCheckpoints, OutboxMark, OutboxStore
from cachesync.schema.partition import partition_for
from tests.support import create_topics, prepare_outbox, wait_for

PARTITIONS = 3
# the real publishers, on each Kafka client (producer_outbox/publish/rdkafka_publisher.py)
PUBLISHERS = {"thread": KafkaPublisher, "thread-librdkafka": RdKafkaPublisher,
              "process": lambda b: ProcessPublisher(b, client="kafka-python"),
              "process-librdkafka": lambda b: ProcessPublisher(b, client="librdkafka")}


@pytest.fixture(params=["memory", "thread", "thread-librdkafka", "process",
                        "process-librdkafka"])
def publisher(request):
    """(publisher, topic, records(topic) -> [(partition, key, value, id)] the broker holds)."""
    if request.param == "memory":
        made = MemoryPublisher(partitions=PARTITIONS)
        yield made, "t", lambda topic: [(s.partition, s.key.encode(), s.value, s.msg_id)
                                         for s in made.sent if s.topic == topic]
        return
    stack = request.getfixturevalue("stack")
    topic = f"ports.{uuid.uuid4().hex[:8]}"
    create_topics(stack.bootstrap, {topic: PARTITIONS})
    made = PUBLISHERS[request.param](stack.bootstrap)

    def records(name: str):
        from kafka import KafkaConsumer, TopicPartition
        consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap, enable_auto_commit=False,
                                 group_id=None, consumer_timeout_ms=2000)
        try:
            tps = [TopicPartition(name, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning()
            return [(r.partition, r.key, r.value, dict(r.headers)["id"].decode())
                    for r in consumer]
        finally:
            consumer.close()
    yield made, topic, records
    made.close()


class Acks:
    """Each record's callbacks, counted."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.failed: list[int] = []

    def send(self, publisher, topic: str, n: int, partition: int | None = None) -> None:
        def ack():
            with self.lock:
                self.acked.append(n)

        def error(_e):
            with self.lock:
                self.failed.append(n)
        publisher.send(topic, f"app.users:{n}", f"v{n}".encode(), f"id-{n}", ack, error,
                       partition=partition)


def test_partitions_are_the_topics_ids_sorted(publisher):
    made, topic, _ = publisher
    assert made.partitions(topic) == list(range(PARTITIONS))


def test_every_send_is_acknowledged_once_by_flush(publisher):
    made, topic, _ = publisher
    acks = Acks()
    for n in range(50):
        acks.send(made, topic, n)
    if isinstance(made, MemoryPublisher):
        assert made.auto_ack          # the twin acknowledges at send; the others by flush
    made.flush(timeout_s=30)
    wait_for(lambda: len(acks.acked) == 50, what="50 acknowledgements", timeout=60)
    assert sorted(acks.acked) == list(range(50)) and acks.failed == []


def test_records_keep_key_value_id_and_their_keys_default_partition(publisher):
    made, topic, records = publisher
    acks = Acks()
    for n in range(12):
        acks.send(made, topic, n)
    acks.send(made, topic, 99, partition=2)         # an explicit partition wins
    made.flush(timeout_s=30)
    got = sorted(records(topic), key=lambda r: r[3])
    expected = sorted([(partition_for(f"app.users:{n}".encode(), PARTITIONS),
                        f"app.users:{n}".encode(), f"v{n}".encode(), f"id-{n}")
                       for n in range(12)] + [(2, b"app.users:99", b"v99", "id-99")],
                      key=lambda r: r[3])
    assert got == expected


def test_one_partitions_records_keep_their_send_order(publisher):
    made, topic, records = publisher
    acks = Acks()
    for n in range(20):
        acks.send(made, topic, n, partition=1)
    made.flush(timeout_s=30)
    assert [r[3] for r in records(topic) if r[0] == 1] == [f"id-{n}" for n in range(20)]


def test_records_alone_and_in_bursts_keep_their_order_and_are_acknowledged_once(publisher):
    """At the head of the binlog each record comes alone (the process publisher writes it,
    and its ack, without a hand-off to a writer thread); a backlog comes in bursts."""
    made, topic, records = publisher
    acks = Acks()
    sent = 0
    for burst in (1, 1, 10, 1, 1, 25, 1, 1):
        for _ in range(burst):
            acks.send(made, topic, sent, partition=1)
            sent += 1
        if burst == 1:      # acknowledged before the next: that one comes alone too
            last = sent - 1
            wait_for(lambda: last in acks.acked,
                     what=f"record {last} acknowledged", timeout=60)
    made.flush(timeout_s=30)
    wait_for(lambda: len(acks.acked) == sent, what=f"{sent} acknowledgements", timeout=60)
    assert sorted(acks.acked) == list(range(sent)) and acks.failed == []
    assert [r[3] for r in records(topic) if r[0] == 1] == [f"id-{n}" for n in range(sent)]


def _params(env: dict, database: str) -> MySQLParams:
    """The cachesync user's connection (least privilege, as the commands connect)."""
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        return MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                           env["CACHESYNC_MYSQL_USER"], f.read().strip(), database=database)


@pytest.fixture(params=["memory", "mysql"])
def checkpoints(request):
    """A factory: stores made by one call share one checkpoint name (a restarted tailer)."""
    if request.param == "memory":
        shared = MemoryCheckpointStore()
        yield lambda: shared
        return
    params = _params(request.getfixturevalue("stack").env, "cachesync")
    name, made = f"contract-{uuid.uuid4().hex[:8]}", []

    def make():
        made.append(MySQLCheckpointStore(params.connect, name))
        return made[-1]
    yield make
    for store in made:
        store.close()


def test_nothing_is_stored_before_the_first_save(checkpoints):
    assert checkpoints().load() is None


def test_the_last_save_is_what_a_new_store_loads(checkpoints):
    store = checkpoints()
    store.save(Checkpoint("srv-1", "0-1-41", "binlog.000003", 4))
    store.save(Checkpoint("srv-1", "0-1-42,1-2-7", "binlog.000003", 1187))
    assert checkpoints().load() == Checkpoint("srv-1", "0-1-42,1-2-7", "binlog.000003", 1187)


def test_a_file_position_without_a_gtid_round_trips(checkpoints):
    store = checkpoints()
    store.save(Checkpoint("srv-2", None, "mysql-bin.000120", 2**40))
    assert checkpoints().load() == Checkpoint("srv-2", None, "mysql-bin.000120", 2**40)


def test_a_resume_position_store_is_in_order(checkpoints):
    assert checkpoints().in_order is True


@pytest.fixture(params=["memory", "outbox"])
def per_group(request):
    """(a store of progress per group, the marks of 4 groups, done() -> the event ids it
    holds as done)."""
    if request.param == "memory":
        store = MemoryCheckpointStore(in_order=False)
        yield (store, [OutboxMark(n, f"id-{n}") for n in range(4)],
               lambda: {m.event_id for m in store.done})
        return
    lab = request.getfixturevalue("lab")
    prepare_outbox(lab)
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        for n in range(4):
            emit(conn, "board", n, "bumped", {"n": n})
        conn.commit()
    marks = [OutboxMark(int(seq), event_id) for seq, event_id in
             lab.sql("SELECT seq, event_id FROM cachesync_outbox ORDER BY seq")]
    store = OutboxCheckpoints(OutboxStore(_params(lab.stack.env, lab.db).connect, lab.db,
                                          "cachesync_outbox"), on_marked=lambda _ids: None)
    yield store, marks, lambda: {r[0] for r in lab.sql(
        "SELECT event_id FROM cachesync_outbox WHERE published_at IS NOT NULL")}
    store.close()


def test_a_store_of_progress_per_group_is_not_in_order_and_loads_nothing(per_group):
    store, _, done = per_group
    assert store.in_order is False and store.load() is None and done() == set()


def test_every_group_saved_is_done_whatever_came_before_it(per_group):
    store, marks, done = per_group
    store.save_each([marks[1], marks[3]])       # the first group is not acknowledged yet
    assert done() == {marks[1].event_id, marks[3].event_id}
    store.save_each([marks[0]])
    assert done() == {m.event_id for m in marks[:2] + marks[3:]}


def test_a_group_saved_again_stays_done(per_group):
    """A redelivered row that Kafka acknowledged twice."""
    store, marks, done = per_group
    store.save_each(marks[:2])
    store.save_each(marks[1:3])
    assert done() == {m.event_id for m in marks[:3]}
