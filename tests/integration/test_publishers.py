"""The tailer's two publishers on the real broker: in the tailer's process (``thread``) and in
a child process (``process``, producer_outbox/publish/process_publisher.py). One contract for both."""

from __future__ import annotations

import os
import signal
import socket
import threading

import pytest
from kafka.errors import KafkaError, MessageSizeTooLargeError

from cachesync.producer_outbox.publish.process_publisher import ProcessPublisher, PublisherProcessError
from cachesync.producer_outbox.publish.kafka_publisher import KafkaPublisher, is_permanent
from cachesync.producer_outbox.publish.rdkafka_publisher import RdKafkaPublisher
from cachesync.schema.errors import RetryableError
from tests.support import wait_for
from tests.support.tables import USERS, USERS_DDL

pytestmark = pytest.mark.integration

KINDS = {"thread": KafkaPublisher, "thread-librdkafka": RdKafkaPublisher,
         "process": lambda b: ProcessPublisher(b, client="kafka-python"),
         "process-librdkafka": lambda b: ProcessPublisher(b, client="librdkafka")}


class Callbacks:
    """What each record's callbacks reported, by record number."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.failed: dict[int, Exception] = {}

    def ack(self, n: int):
        def on_ack():
            with self.lock:
                self.acked.append(n)
        return on_ack

    def error(self, n: int):
        def on_error(error: Exception):
            with self.lock:
                self.failed[n] = error
        return on_error


@pytest.fixture(params=list(KINDS))
def publisher(request, lab):
    made = KINDS[request.param](lab.stack.bootstrap)
    yield made
    made.close()


def send(publisher, topic: str, seen: Callbacks, numbers, size: int = 10, partition=None):
    """Send records ``numbers``; a Kafka error raised at once (the in-process producer checks
    the size before queueing) counts as that record's error, as the tailer treats it."""
    for n in numbers:
        try:
            publisher.send(topic, f"k{n}", b"v" * size, f"id-{n}", seen.ack(n), seen.error(n),
                           partition=partition)
        except KafkaError as e:
            seen.error(n)(e)


def test_flush_returns_once_every_record_was_acknowledged_once(publisher, lab):
    seen = Callbacks()
    send(publisher, lab.topic, seen, range(300))
    send(publisher, lab.topic, seen, range(300, 330), partition=1)
    publisher.flush()
    assert sorted(seen.acked) == list(range(330)) and not seen.failed   # no waiting after flush
    records = lab.topic_records()
    assert sorted(int(dict(r.headers)["id"][3:]) for r in records) == list(range(330))
    assert {r.partition for r in records if int(r.key[1:]) >= 300} == {1}
    # per partition, Kafka holds the records in the order they were sent
    for p in {r.partition for r in records}:
        numbers = [int(r.key[1:]) for r in records if r.partition == p and int(r.key[1:]) < 300]
        assert numbers == sorted(numbers)


def test_librdkafka_acknowledgements_served_by_the_sender_come_exactly_once(lab):
    """Once the sending thread serves the delivery reports (``serve_acks``, the tailer's
    reader before each wait), each record is still acknowledged exactly once: what arrived
    is served on the sender's thread, and what is in flight when it waits is served by the
    callback thread meanwhile, with nobody polling."""
    publisher = RdKafkaPublisher(lab.stack.bootstrap)
    try:
        seen = Callbacks()
        publisher.serve_acks()                      # handed over, nothing in flight
        send(publisher, lab.topic, seen, range(100))
        publisher.serve_acks()                      # in flight: the callback thread serves
        wait_for(lambda: len(seen.acked) == 100, 30, "the in-flight records' acknowledgements")
        send(publisher, lab.topic, seen, range(100, 150))
        wait_for(lambda: len(lab.topic_records()) == 150, 30, "Kafka holding every record")
        publisher.serve_acks()                      # the rest, here or already there
        wait_for(lambda: len(seen.acked) == 150, 30, "every acknowledgement")
        send(publisher, lab.topic, seen, [150])
        publisher.serve_acks(alone=True)            # waits a little for it here
        wait_for(lambda: len(seen.acked) == 151, 30, "the lone record's acknowledgement")
        publisher.flush()
        assert sorted(seen.acked) == list(range(151)) and not seen.failed
    finally:
        publisher.close()


def test_partitions_are_the_topics(publisher, lab):
    assert publisher.partitions(lab.topic) == [0, 1, 2]


def test_a_record_over_the_size_limit_fails_for_good_and_the_others_go_through(publisher, lab):
    seen = Callbacks()
    send(publisher, lab.topic, seen, [1])
    send(publisher, lab.topic, seen, [2], size=2_000_000)
    send(publisher, lab.topic, seen, [3])
    publisher.flush()
    assert sorted(seen.acked) == [1, 3]
    assert list(seen.failed) == [2]
    assert isinstance(seen.failed[2], MessageSizeTooLargeError) and is_permanent(seen.failed[2])


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_unreachable_broker_is_a_retryable_error_at_start(kind):
    with socket.socket() as s:        # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RetryableError, match="Kafka unavailable"):
        KINDS[kind](f"127.0.0.1:{port}")


# -- the child process ---------------------------------------------------------------------

def child_pid(publisher: ProcessPublisher) -> int:
    return publisher._proc.pid


def test_the_child_outlives_a_process_group_sigterm_and_ends_with_close(lab):
    publisher = ProcessPublisher(lab.stack.bootstrap)
    pid = child_pid(publisher)
    with open(f"/proc/{pid}/cmdline", "rb") as f:    # nothing but the module on its command line
        assert f.read().split(b"\0")[1:3] == [b"-m", b"cachesync.producer_outbox.publish.process_publisher"]
    os.kill(pid, signal.SIGTERM)     # what a service manager sends every process of the group
    os.kill(pid, signal.SIGINT)      # and a terminal's Ctrl-C
    seen = Callbacks()
    send(publisher, lab.topic, seen, range(5))
    publisher.flush()
    assert sorted(seen.acked) == list(range(5))
    publisher.close()
    assert publisher._proc.poll() == 0


def test_a_dead_child_fails_every_record_it_had_not_acknowledged(lab):
    publisher = ProcessPublisher(lab.stack.bootstrap)
    pid = child_pid(publisher)
    seen = Callbacks()
    send(publisher, lab.topic, seen, range(3))
    publisher.flush()
    os.kill(pid, signal.SIGSTOP)      # it reads nothing more: what follows stays unacknowledged
    send(publisher, lab.topic, seen, range(3, 20))
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(seen.failed) == 17, 60, what="the unacknowledged records' errors")
    assert sorted(seen.acked) == [0, 1, 2]
    assert set(seen.failed) == set(range(3, 20))
    assert all(isinstance(e, PublisherProcessError) for e in seen.failed.values())
    assert not is_permanent(seen.failed[3])            # the tailer stops, a restart re-sends
    with pytest.raises(PublisherProcessError, match="exit code -9"):
        send(publisher, lab.topic, seen, [20])
    with pytest.raises(PublisherProcessError):
        publisher.flush()
    publisher.close()


# -- the tailer with each ------------------------------------------------------------------

def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].startswith("Z")    # exited, not reaped yet
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("kind,client", [("thread", "kafka-python"), ("thread", "librdkafka"),
                                         ("process", "kafka-python"), ("process", "librdkafka")])
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_cachesync_tail_publishes_through_either_and_leaves_no_process_behind(lab, kind, client,
                                                                              stop):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer={"publisher": kind}, kafka={"client": client})
    tail = lab.start_tailer(cfg)
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ada')")
    wait_for(lambda: [e.event.pk for e in lab.topic_events()] == [(("id", 1),)], 60,
             what="the row on the topic")
    publishers = children(tail.pid)
    assert len(publishers) == (1 if kind == "process" else 0)
    tail.send_signal(getattr(signal, stop))
    assert tail.wait(60) == (0 if stop == "SIGTERM" else -9), lab.log(tail)
    assert f"Kafka publisher on {client} (kafka.client is {client})" in lab.log(tail)
    # a clean stop closes the child; a killed tailer's child sees its pipe end and exits
    wait_for(lambda: all(gone(p) for p in publishers), 60, what="the publisher process to exit")


def test_the_child_is_told_the_parents_log_level_format_and_role():
    import logging
    from cachesync.runtime import logs
    from cachesync.producer_outbox.publish.process_publisher import _log_setup
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.setup("WARNING", json_format=True, role="tail")
        assert _log_setup() == ("WARNING", True, "tail")
        logs.setup("INFO")
        assert _log_setup() == ("INFO", False, "")
    finally:
        root.handlers[:], root.level = saved[0], saved[1]


@pytest.mark.parametrize("ends", ["stopped", "failing"])
def test_a_tailer_closes_the_publisher_process_it_made_when_it_ends(lab, ends):
    """A restarted tailer is a new one with a new publisher: the old one's child must not
    stay behind (a clean stop, and a run that fails, here at its preflight)."""
    from cachesync.runtime import config
    from cachesync.wiring import build_tailer
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer={"publisher": "process"})
    env = {**os.environ, **lab.stack.env}
    if ends == "failing":
        env.pop("CACHESYNC_MYSQL_PASSWORD_FILE", None)
        env["CACHESYNC_MYSQL_PASSWORD"] = "wrong"
    tailer = build_tailer(config.load(cfg, env))
    child = tailer._publisher.started()._proc      # started beside the tailer's own start
    errors = []

    def run():
        try:
            tailer.run()
        except Exception as e:
            errors.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if ends == "stopped":
        wait_for(lambda: tailer.committed is not None, 60, what="the tailer's start")
        tailer.stop()
    thread.join(60)
    assert not thread.is_alive()
    assert [type(e).__name__ for e in errors] == ([] if ends == "stopped" else ["FatalError"])
    assert child.wait(30) == 0


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_a_flush_over_two_partitions_is_polled_as_one_batch(lab, client, monkeypatch):
    """The tailer's flush header on the real broker: a consumer polls the part of a flush in
    partition 0 before the part in partition 2 is even sent; its poll waits for that part
    and returns both (here with a 10 s window, so that a slow host cannot split them; the
    shipped window is GATHER_S). The same records without the header: the first part alone."""
    from cachesync.consumer.adapters import kafka_source
    from cachesync.schema.flushes import mark
    monkeypatch.setattr(kafka_source, "GATHER_S", 10.0)
    waiting = threading.Event()       # the poll holds part of a flush and waits for the rest

    def unfinished(records, owned):
        missing = real(records, owned)
        if missing:
            waiting.set()
        return missing
    real = kafka_source.unfinished
    monkeypatch.setattr(kafka_source, "unfinished", unfinished)
    # the lab's topic is new and empty: "earliest" reads every record sent below, where
    # "latest" would skip one sent before the client's asynchronous offset lookup ended
    source = kafka_source.KafkaSource(lab.stack.bootstrap, lab.topic, f"g-flush-{client}",
                                      auto_offset_reset="earliest", fetch_wait_s=0.5,
                                      client=client)
    publisher = RdKafkaPublisher(lab.stack.bootstrap)
    seen = Callbacks()

    def send(n: int, partition: int, flush=None):
        publisher.send(lab.topic, f"k{n}", b"v", f"id-{n}", seen.ack(n), seen.error(n),
                       partition=partition, flush=flush)
        publisher.flush()
    try:
        wait_for(lambda: source.poll(10, 0.2) == [] and len(source._consumer.assignment()) == 3,
                 30, "the consumer owning the topic's three partitions")
        flush = mark("tok", 1, [0, 2])
        send(0, 0, flush)
        polled: list = []
        poll = threading.Thread(target=lambda: polled.extend(source.poll(10, 10.0)))
        poll.start()
        assert waiting.wait(10), "the poll never held part of the flush"
        send(1, 2, flush)
        poll.join(15)
        assert sorted((r.partition, r.header("flush")) for r in polled) == [(0, flush), (2, flush)]

        waiting.clear()
        send(2, 0)                      # unmarked: nothing to wait for
        first = source.poll(10, 10.0)
        send(3, 2)
        second = source.poll(10, 10.0)
        assert [r.partition for r in first] == [0] and [r.partition for r in second] == [2]
        assert not waiting.is_set() and not seen.failed
    finally:
        publisher.close()
        source.close()
