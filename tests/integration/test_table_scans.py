"""Table-level invalidation beside the row stream, on the real services: one scan for every
partition copy of a TRUNCATE (and every consumer of the group), other tables' changes applied
while it runs, and a scan cut short (its consumer stopped mid-scan) run again by the next one.

A scan is held mid-way by a gate around RedisCache.invalidate_table (the test decides when
it goes on), never by a sleep."""

from __future__ import annotations

import threading

import pytest

from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.schema.retry import Stopped
from tests.support import wait_for

pytestmark = pytest.mark.integration

TABLES = {"users": {"keys": ["user:{id}"]}, "orders": {"keys": ["order:{id}"]}}
USERS = 300


@pytest.fixture
def tables(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY)")
    lab.sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    cfg = lab.write_config(TABLES, consumer={"dedup_store": "redis", "claim_lease_s": 2})
    lab.start_tailer(cfg)
    pipe = lab.redis.pipeline(transaction=False)
    for i in range(USERS):
        pipe.set(f"{lab.prefix}user:{i}", b"cached", ex=600)
    pipe.execute()
    return lab, cfg


def user_keys(lab) -> int:
    return sum(1 for _ in lab.redis.scan_iter(match=f"{lab.prefix}user:*", count=1000))


class Gate:
    """Holds every RedisCache.invalidate_table of this process until ``open()``; ``entered``
    is set once a scan waits at it. ``unlink_first`` keys are removed before it waits (a
    scan that got that far). A stopped engine's scan gives up at it (Stopped)."""

    def __init__(self, monkeypatch, lab, unlink_first: int = 0):
        self.entered, self._open, self.stopped = threading.Event(), threading.Event(), None
        real = RedisCache.invalidate_table
        gate = self

        def gated(cache, mapping, fence_version=None, progress=None, **options):
            if mapping.table.endswith(".users"):
                if unlink_first:
                    lab.redis.unlink(*[f"{lab.prefix}user:{i}" for i in range(unlink_first)])
                gate.entered.set()
                while not gate._open.wait(0.05):
                    if gate.stopped is not None and gate.stopped.is_set():
                        raise Stopped("the engine stopped mid-scan")
            return real(cache, mapping, fence_version, progress, **options)
        monkeypatch.setattr(RedisCache, "invalidate_table", gated)

    def open(self) -> None:
        self._open.set()


def test_one_scan_for_every_partition_copy_and_both_consumers(tables):
    lab, cfg = tables
    first, second = lab.start_engine(cfg), lab.start_engine(cfg)
    wait_for(lambda: len([ps for ps in lab.stack.group_assignment(f"g-{lab.suffix}").values()
                          if ps]) == 2, 60, interval=0.5, what="both consumers holding partitions")
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: user_keys(lab) == 0, 60, what="every users key gone")
    engines = (first, second)
    wait_for(lambda: sum(e.stats.table_invalidations for e in engines) == 3, 60,
             what="the three partition copies applied")
    assert all(e.table_scans.wait_idle(30) for e in engines)
    assert sum(e.stats.table_scans for e in engines) == 1          # one scan, not three
    assert sum(e.stats.table_scans_reused for e in engines) == 1   # the other consumer's copy
    assert sum(e.stats.table_keys_deleted for e in engines) == USERS


def test_other_tables_flow_while_a_scan_runs_and_its_offsets_wait(tables, monkeypatch):
    lab, cfg = tables
    gate = Gate(monkeypatch, lab)
    lab.cache("order:1", "order:2")
    engine = lab.start_engine(cfg)
    lab.sql("TRUNCATE TABLE users")
    assert gate.entered.wait(60), "the scan never started"
    lab.sql("INSERT INTO orders VALUES (1), (2)")
    wait_for(lambda: not lab.cached("order:1", "order:2"), 60,
             what="the orders rows applied while the users scan is held")
    assert user_keys(lab) == USERS                   # the scan has not gone on
    assert engine.table_scans.holds()                # and its copies' offsets are held
    gate.open()
    wait_for(lambda: user_keys(lab) == 0, 60, what="the users keys gone once the scan goes on")
    wait_for(lambda: not engine.table_scans.holds(), 60, what="the holds released")


def test_a_consumer_stopped_mid_scan_leaves_it_to_the_next_one(tables, monkeypatch):
    lab, cfg = tables
    gate = Gate(monkeypatch, lab, unlink_first=100)
    first = lab.start_engine(cfg)
    gate.stopped = first._stop
    lab.sql("TRUNCATE TABLE users")
    assert gate.entered.wait(60), "the scan never started"
    assert user_keys(lab) == USERS - 100             # a third of the way
    lab.stop_engine(first)                           # gives up mid-scan, no offset past it
    assert first.stats.table_scans == 0

    gate.open()
    second = lab.start_engine(cfg)                   # same group: from the held offsets
    wait_for(lambda: user_keys(lab) == 0, 60, what="the scan run again to its end")
    assert second.table_scans.wait_idle(30)
    assert second.stats.table_invalidations >= 1     # the event was delivered again
    assert second.stats.table_scans == 1
    assert second.stats.table_keys_deleted == USERS - 100


def paced_config(lab, busy_share: float, scan_count: int):
    return lab.write_config(TABLES, consumer={"dedup_store": "redis", "claim_lease_s": 2,
                                              "table_scan_busy_share": busy_share,
                                              "table_scan_count": scan_count},
                            name=f"paced-{busy_share}-{scan_count}.yaml")


def test_a_paced_scan_pauses_between_its_calls_and_still_removes_every_key(tables):
    """consumer.table_scan_busy_share < 1: the scan pauses after its calls (SCAN COUNT 50:
    many calls over this keyspace), once for all three copies, and every key goes."""
    lab, _ = tables
    engine = lab.start_engine(paced_config(lab, 0.5, 50))
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: user_keys(lab) == 0, 60, what="every users key gone")
    assert engine.table_scans.wait_idle(30)
    scan, = engine.table_scans.scans()
    assert scan.paused > 0 and scan.finished is not None and scan.keys == USERS
    assert engine.stats.table_scans == 1 and engine.stats.table_keys_deleted == USERS


def test_a_consumer_stopped_while_its_scan_pauses_leaves_it_to_the_next_one(tables):
    """A pause is cut short by a stop; the event's offsets stay held, so the next consumer
    of the group runs the scan again to its end."""
    lab, _ = tables
    first = lab.start_engine(paced_config(lab, 0.001, 10))
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: any(s.paused > 0 for s in first.table_scans.scans()), 60,
             what="the paced scan under way")
    lab.stop_engine(first)                           # within a pause of up to a second
    assert first.stats.table_scans == 0 and first.table_scans.holds()
    assert user_keys(lab) > 0                        # the scan had not got through

    second = lab.start_engine(lab.write_config(TABLES, consumer={
        "dedup_store": "redis", "claim_lease_s": 2}, name="next.yaml"))
    wait_for(lambda: user_keys(lab) == 0, 60, what="the scan run again to its end")
    assert second.table_scans.wait_idle(30)
    assert second.stats.table_scans == 1
