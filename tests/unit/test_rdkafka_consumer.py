"""The Kafka source on librdkafka (consumer/adapters/rdkafka_source.py): the consumer's options
as librdkafka's properties, and a group member librdkafka gave up removed from its group. The
consumer itself runs on the broker in tests/integration/test_idle_consumer.py and
tests/integration/test_broker_restart.py."""

from __future__ import annotations

import threading

import pytest
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from cachesync.consumer.adapters import rdkafka_source
from cachesync.consumer.adapters.rdkafka_source import RdKafkaConsumer, librdkafka_config
from cachesync.runtime.librdkafka import Unmappable


def test_group_settings_and_assignor_map_by_name():
    out = librdkafka_config({"group_id": "g", "enable_auto_commit": False,
                             "session_timeout_ms": 6000, "heartbeat_interval_ms": 2000,
                             "group_instance_id": None, "isolation_level": "read_committed",
                             "partition_assignment_strategy": (CooperativeStickyAssignor,)})
    assert (out["group.id"], out["enable.auto.commit"], out["isolation.level"]) == \
        ("g", False, "read_committed")
    assert (out["session.timeout.ms"], out["heartbeat.interval.ms"]) == (6000, 2000)
    assert out["partition.assignment.strategy"] == "cooperative-sticky"
    assert "group.instance.id" not in out
    assert out["fetch.error.backoff.ms"] == rdkafka_source.FETCH_ERROR_BACKOFF_MS


def test_an_assignor_librdkafka_lacks_is_named():
    with pytest.raises(Unmappable, match="StickyPartitionAssignor"):
        librdkafka_config({"partition_assignment_strategy": (StickyPartitionAssignor,)})


class _Client:
    """librdkafka's consumer as far as ``_membership`` reads it: its current member id."""

    def __init__(self):
        self.member = ""
        self.asked = 0

    def memberid(self):
        self.asked += 1
        return self.member or None


def _consumer(evict):
    consumer = object.__new__(RdKafkaConsumer)
    consumer._consumer, consumer._evict, consumer._member = _Client(), evict, ""
    return consumer


def test_a_member_id_given_up_is_removed_from_the_group_once():
    evicted, done = [], threading.Event()

    def evict(member):
        evicted.append(member)
        done.set()
        return "removed"
    consumer = _consumer(evict)
    for member in ("", "m1", "m1", "m1"):       # joined, then steady
        consumer._consumer.member = member
        consumer._membership()
    assert evicted == []
    consumer._consumer.member = ""              # the session timed out: librdkafka reset it
    consumer._membership()
    assert done.wait(10) and evicted == ["m1"]
    done.clear()
    for member in ("", "m2", "m2"):             # joined again as a new member
        consumer._consumer.member = member
        consumer._membership()
    consumer._consumer.member = "m3"            # a new id with no empty one seen between
    consumer._membership()
    assert done.wait(10) and evicted == ["m1", "m2"]


def test_without_an_evict_a_lost_member_is_only_followed():
    consumer = _consumer(None)
    consumer._consumer.member = "m1"
    consumer._membership()
    consumer._consumer.member = ""
    consumer._membership()
    assert consumer._member == ""


def test_polls_read_the_member_id_once_a_second_not_at_every_poll():
    # librdkafka answers memberid() from its main thread: at every poll, a round trip that
    # woke two threads per commit at the head of the binlog
    consumer = _consumer(None)
    consumer._consumer.member = "m1"
    for now in (100.0, 100.2, 100.9, 100.99):
        consumer._follow_membership(now)
    assert consumer._consumer.asked == 1 and consumer._member == "m1"
    consumer._consumer.member = "m2"
    consumer._follow_membership(101.0)
    assert consumer._consumer.asked == 2 and consumer._member == "m2"


def test_a_second_close_does_nothing_and_a_closed_consumer_has_no_partitions():
    """The engine and its owner may both close the source: librdkafka's consumer raises on any
    call once closed ("Consumer closed"), kafka-python's does not, and neither may here."""
    consumer = RdKafkaConsumer("127.0.0.1:1", {"group.id": "g"})   # no broker: never reached
    consumer.close()
    assert consumer.assignment() == set()
    consumer.close()
