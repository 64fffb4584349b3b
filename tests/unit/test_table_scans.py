"""Table-level scans beside the row stream: one per event, offsets held until it completes."""

from __future__ import annotations

import threading

import pytest

from cachesync.runtime.config import ConsumerSettings
from cachesync.consumer.adapters.memory import (MemoryCache, MemoryDeadLetters, MemoryDedupStore,
                                                MemorySource, MemoryTableJobs)
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.table_jobs import JobState, held_back, job_id
from cachesync.consumer.engine import PythonEngine
from cachesync.producer_outbox.decode.rows import TxnContext, row_change, table_change
from cachesync.schema.event import encode
from cachesync.schema.mapping import parse_mappings

CTX = TxnContext("mariadb:1", "0-1-42", 42, 1_700_000_000.0)
MAPPINGS = parse_mappings({"app.users": {"keys": ["user:{id}"]},
                           "app.orders": {"keys": ["order:{id}"]}})
OPTIONS = ConsumerSettings(overlap_batches=False)
T = "changes"


@pytest.mark.parametrize("offsets, holds, expected", [
    ({(T, 0): 10}, [], {(T, 0): 10}),                          # nothing held
    ({(T, 0): 10}, [((T, 0), 4)], {(T, 0): 4}),                # the held record is delivered again
    ({(T, 0): 10}, [((T, 0), 6), ((T, 0), 4)], {(T, 0): 4}),   # the lowest hold wins
    ({(T, 0): 3}, [((T, 0), 4)], {(T, 0): 3}),                 # a hold ahead of the batch
    ({(T, 0): 10, (T, 1): 7}, [((T, 1), 5)], {(T, 0): 10, (T, 1): 5}),
    ({(T, 0): 10}, [((T, 2), 1)], {(T, 0): 10}),               # another partition's hold
])
def test_held_back(offsets, holds, expected):
    assert held_back(offsets, holds) == expected


def test_every_partition_copy_of_a_table_event_is_one_job():
    copies = [table_change(CTX, 3, p, "app", "users", "truncate", "TRUNCATE users")
              for p in range(6)]
    assert len({c.id for c in copies}) == 6 and len({job_id(c) for c in copies}) == 1
    other_table = table_change(CTX, 3, 0, "app", "orders", "truncate", "TRUNCATE orders")
    later = table_change(TxnContext("mariadb:1", "0-1-43", 43, 0.0), 3, 0, "app", "users",
                         "truncate", "TRUNCATE users")
    assert job_id(other_table) != job_id(copies[0]) != job_id(later)


class GatedCache(MemoryCache):
    """A MemoryCache whose table scans wait for ``gate`` (a scan under way)."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()

    def invalidate_table(self, mapping, fence_version=None, progress=None, **options) -> int:
        assert self.gate.wait(10), "the test never opened the gate"
        return super().invalidate_table(mapping, fence_version, progress, **options)


def rec(partition: int, offset: int, event) -> Record:
    return Record(T, partition, offset, b"k", encode(event), (("id", event.id.encode()),))


def row(index: int, table: str, uid: int):
    return row_change(CTX, index, "app", table, "insert", "id", None, {"id": uid})


def engine_over(records, cache, jobs=None, dedup=None):
    return PythonEngine(MemorySource(records), dedup or MemoryDedupStore(), cache,
                        MemoryDeadLetters(), MAPPINGS, OPTIONS, table_jobs=jobs or MemoryTableJobs())


def test_three_copies_one_scan_rows_flow_meanwhile_and_offsets_wait_for_the_scan():
    cache = GatedCache()
    cache.data.update({f"user:{i}": b"v" for i in range(5)} | {"order:1": b"o", "order:2": b"o"})
    copies = [table_change(CTX, 0, p, "app", "users", "truncate", "TRUNCATE users")
              for p in range(3)]
    records = [rec(p, 10, copies[p]) for p in range(3)] + [rec(0, 11, row(1, "orders", 1))]
    dedup = MemoryDedupStore()
    engine = engine_over(records, cache, dedup=dedup)
    engine.step()
    # the order row was applied while the users scan waits; no offset passed a copy
    assert "order:1" not in cache.data and "order:2" in cache.data and "user:0" in cache.data
    assert engine._source.committed == {(T, 0): 10, (T, 1): 10, (T, 2): 10}
    assert not any(c.id in dedup.rows for c in copies)     # the job record, not a claim
    cache.gate.set()
    assert engine.table_scans.wait_idle(5)
    engine.step()                      # an empty poll: the released offsets are committed
    assert engine._source.committed == {(T, 0): 12, (T, 1): 11, (T, 2): 11}
    assert cache.table_scans == 1 and engine.stats.table_scans == 1
    assert engine.stats.table_invalidations == 3 and engine.stats.table_keys_deleted == 5
    assert not any(k.startswith("user:") for k in cache.data)
    engine.close()


def test_a_copy_waits_for_another_consumers_scan_and_reuses_it():
    jobs = MemoryTableJobs()
    event = table_change(CTX, 0, 1, "app", "users", "truncate", "TRUNCATE users")
    assert jobs.begin(job_id(event), "other-consumer", 60)[0] is JobState.RUN
    cache = MemoryCache()
    cache.data["user:1"] = b"v"
    engine = engine_over([rec(1, 5, event)], cache, jobs)
    engine.step()
    assert engine._source.committed == {(T, 1): 5}           # held while the other one scans
    jobs.finish(job_id(event), "other-consumer", 7)
    assert engine.table_scans.wait_idle(5)
    engine.step()
    assert engine._source.committed == {(T, 1): 6}
    assert cache.table_scans == 0 and engine.stats.table_scans_reused == 1
    engine.close()


def test_an_owner_whose_lease_ran_out_is_taken_over():
    now = [100.0]
    jobs = MemoryTableJobs(clock=lambda: now[0])
    event = table_change(CTX, 0, 0, "app", "users", "truncate", "TRUNCATE users")
    jobs.begin(job_id(event), "crashed-consumer", 30)
    assert jobs.begin(job_id(event), "me", 30)[0] is JobState.WAIT
    now[0] += 31
    assert jobs.begin(job_id(event), "me", 30)[0] is JobState.RUN
    jobs.finish(job_id(event), "me", 3)
    assert jobs.begin(job_id(event), "late-copy", 30) == (JobState.DONE, 3)


def test_without_a_job_store_the_applier_scans_in_the_batch_once_per_copy():
    cache = MemoryCache()
    copies = [table_change(CTX, 0, p, "app", "users", "truncate", "TRUNCATE users")
              for p in range(2)]
    engine = PythonEngine(MemorySource([rec(p, 0, copies[p]) for p in range(2)]),
                          MemoryDedupStore(), cache, MemoryDeadLetters(), MAPPINGS, OPTIONS)
    engine.step()
    assert cache.table_scans == 2 and engine._source.committed == {(T, 0): 1, (T, 1): 1}


def test_a_replay_scans_once_for_every_partition_copy_of_a_table_event():
    from cachesync.consumer.replay import ReplayApplier
    cache = MemoryCache()
    for i in range(5):
        cache.data[f"user:{i}"] = b"cached"
    cache.data["order:1"] = b"cached"
    copies = [table_change(CTX, 3, p, "app", "users", "truncate", "TRUNCATE users")
              for p in range(3)]
    later = table_change(TxnContext("mariadb:1", "0-1-43", 43, 0.0), 0, 0, "app", "users",
                         "truncate", "TRUNCATE users")
    replay = ReplayApplier(MAPPINGS, cache)
    replay.apply([rec(p, 0, c) for p, c in enumerate(copies[:2])])
    replay.apply([rec(2, 0, copies[2]), rec(0, 1, later)])
    assert cache.table_scans == 2                       # the first event once, the later one
    assert not any(k.startswith("user:") for k in cache.data) and "order:1" in cache.data
    stats = replay._applier.stats
    assert (stats.table_invalidations, stats.table_scans, stats.table_scans_reused) == (4, 2, 2)
    assert replay.counts.events == {"app.users": 4}


def test_spark_tasks_each_meeting_a_copy_scan_once_and_return_only_after_the_scan():
    """consumer.spark.table_events: what each Spark task of a micro-batch does with its
    copies (an Applier with the task's scans, then finish_scans before the task returns)."""
    from cachesync.consumer.applier import Applier, Stats
    from cachesync.consumer.spark.table_events import finish_scans, task_table_scans
    cache, jobs, dedup = GatedCache(), MemoryTableJobs(), MemoryDedupStore()
    cache.data.update({f"user:{i}": b"v" for i in range(4)} | {"order:1": b"o"})
    copies = [table_change(CTX, 0, p, "app", "users", "truncate", "TRUNCATE users")
              for p in range(3)]
    totals = []
    for p in range(3):              # one task per partition, one after the other (one core)
        stats, stop = Stats(), threading.Event()
        scans = task_table_scans(cache, jobs, stats, stop, lease_s=30)
        applier = Applier(cache, MAPPINGS, OPTIONS, dedup, MemoryDeadLetters(), stats=stats,
                          stop=stop, table_jobs=scans)
        applier.apply([rec(p, 10, copies[p]), rec(p, 11, row(p, "orders", 1))])
        assert "order:1" not in cache.data          # the row applied while the scan waits
        cache.gate.set()
        finish_scans(scans, batch_id=0)
        scans.close()
        totals.append((stats.table_invalidations, stats.table_scans, stats.table_scans_reused))
    assert totals == [(1, 1, 0), (1, 0, 1), (1, 0, 1)]
    assert cache.table_scans == 1 and not any(k.startswith("user:") for k in cache.data)


def test_a_spark_task_whose_scan_failed_fails():
    from cachesync.consumer.applier import Applier, Stats
    from cachesync.consumer.spark.table_events import finish_scans, task_table_scans

    class Broken(MemoryCache):
        def invalidate_table(self, *a, **k):
            raise RuntimeError("no such command")
    stats, stop = Stats(), threading.Event()
    scans = task_table_scans(Broken(), MemoryTableJobs(), stats, stop, lease_s=30)
    Applier(Broken(), MAPPINGS, OPTIONS, MemoryDedupStore(), MemoryDeadLetters(), stats=stats,
            stop=stop, table_jobs=scans).apply(
        [rec(0, 1, table_change(CTX, 0, 0, "app", "users", "truncate", "TRUNCATE users"))])
    with pytest.raises(RuntimeError, match="no such command"):
        finish_scans(scans, batch_id=0)
    scans.close()


# -- per-table coalescing (consumer.core.scan_queue) --------------------------------------
# steps: ("add", table, job) -> (scan, start); ("started", table, scan) -> joined jobs;
# ("ended", table, scan) -> the waiting scan to start now, or None;
# ("busy", None, None) -> {table: (running scan, waiting scan)}
@pytest.mark.parametrize("steps", [
    pytest.param([("add", "u", "e1", ("e1", True)),
                  ("started", "u", "e1", ()),
                  ("ended", "u", "e1", None)], id="one event, one scan"),
    pytest.param([("add", "u", "e1", ("e1", True)),
                  ("started", "u", "e1", ()),
                  ("add", "u", "e2", ("e2", False)),        # waits: the table's scan runs
                  ("add", "u", "e3", ("e2", False)),        # joins the waiting one
                  ("add", "u", "e4", ("e2", False)),
                  ("ended", "u", "e1", "e2"),               # the shared scan starts now
                  ("started", "u", "e2", ("e3", "e4")),
                  ("add", "u", "e5", ("e5", False)),        # arrived after e2's start
                  ("ended", "u", "e2", "e5"),
                  ("started", "u", "e5", ()),
                  ("ended", "u", "e5", None),
                  ("busy", None, None, {})], id="events during a scan share the next"),
    pytest.param([("add", "u", "e1", ("e1", True)),
                  ("add", "u", "e2", ("e1", False)),        # e1 not started yet: it covers e2
                  ("started", "u", "e1", ("e2",)),
                  ("ended", "u", "e1", None)], id="a scan not started yet covers later events"),
    pytest.param([("add", "u", "e1", ("e1", True)),
                  ("started", "u", "e1", ()),
                  ("add", "o", "f1", ("f1", True)),         # another table: starts at once
                  ("started", "o", "f1", ()),
                  ("add", "u", "e2", ("e2", False)),
                  ("add", "o", "f2", ("f2", False)),
                  ("ended", "o", "f1", "f2"),               # o's next does not wait for u
                  ("started", "o", "f2", ()),
                  ("ended", "o", "f2", None),
                  ("busy", None, None, {"u": ("e1", "e2")}),
                  ("ended", "u", "e1", "e2"),
                  ("busy", None, None, {"u": (None, "e2")})],
                 id="tables do not wait for each other"),
    pytest.param([("add", "u", "e1", ("e1", True)),
                  ("started", "u", "e1", ()),
                  ("ended", "u", "e1", None),
                  ("add", "u", "e1", ("e1", True))],        # a failed scan's event again
                 id="an ended scan's event comes again"),
])
def test_scan_queue(steps):
    from cachesync.consumer.core.scan_queue import Admission, ScanQueue
    queue = ScanQueue()
    for op, table, job, expected in steps:
        if op == "add":
            assert queue.add(table, job) == Admission(*expected), (op, table, job)
        elif op == "busy":
            assert queue.busy() == expected
        else:
            assert getattr(queue, op)(table, job) == expected, (op, table, job)


class TableGates(MemoryCache):
    """A MemoryCache whose scan of each table waits for that table's gate; ``entered`` says
    which scans began."""

    def __init__(self):
        super().__init__()
        self.gates = {"users": threading.Event(), "orders": threading.Event()}
        self.entered = {"users": threading.Semaphore(0), "orders": threading.Semaphore(0)}

    def invalidate_table(self, mapping, fence_version=None, progress=None, **options) -> int:
        table = mapping.table.rsplit(".", 1)[-1]
        self.entered[table].release()
        assert self.gates[table].wait(10), "the test never opened the gate"
        self.gates[table].clear()       # the next scan of the table waits again
        return super().invalidate_table(mapping, fence_version, progress, **options)


def truncate(gtid: int, table: str):
    return table_change(TxnContext("mariadb:1", f"0-1-{gtid}", gtid, 0.0), 0, 0, "app", table,
                        "truncate", f"TRUNCATE {table}")


def test_events_during_a_scan_share_the_next_and_are_done_only_when_it_ends():
    from cachesync.consumer.applier import Applier, Stats
    from cachesync.consumer.table_jobs import TableInvalidator
    cache, jobs, stats = TableGates(), MemoryTableJobs(), Stats()
    scans = TableInvalidator(cache, jobs, stats)
    applier = Applier(cache, MAPPINGS, OPTIONS, MemoryDedupStore(), MemoryDeadLetters(),
                      stats=stats, table_jobs=scans)
    users = [truncate(50 + i, "users") for i in range(4)]
    applier.apply([rec(0, 0, users[0])])
    assert cache.entered["users"].acquire(timeout=10)          # the first scan runs
    applier.apply([rec(0, 1 + i, e) for i, e in enumerate(users[1:])])
    merged = [job_id(e) for e in users[1:]]
    # another table's scan runs and ends while the users scan is held
    applier.apply([rec(1, 0, truncate(60, "orders"))])
    assert cache.entered["orders"].acquire(timeout=10)
    cache.gates["orders"].set()
    assert wait_until(lambda: jobs.records.get(job_id(truncate(60, "orders")), ("r",))[0] == "d")
    assert not any(job in jobs.records for job in merged)      # not begun: the next scan waits
    cache.gates["users"].set()                                  # the first scan ends
    assert cache.entered["users"].acquire(timeout=10)          # the shared one runs
    assert all(jobs.records[job][0] == "r" for job in merged)  # begun, not done
    cache.data["user:7"] = b"filled meanwhile"
    cache.gates["users"].set()
    assert scans.wait_idle(10)
    assert all(jobs.records[job][0] == "d" for job in merged)
    assert cache.table_scans == 3 and stats.table_scans == 3 and "user:7" not in cache.data
    assert {s.job for s in scans.scans() if s.joined} == {merged[0]}
    scans.close()


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return True
        deadline.wait(0.01)
    return condition()


def test_a_spark_task_coalesces_the_events_of_a_table_and_other_tasks_reuse_its_scans():
    """consumer.spark.table_events: a task meeting N events of a table while its scan runs
    scans twice, not N times; a task meeting the copies of the same events afterwards (another
    partition) scans nothing. The task returns only when the shared scan ended."""
    from cachesync.consumer.applier import Applier, Stats
    from cachesync.consumer.spark.table_events import finish_scans, task_table_scans
    cache, jobs, dedup = TableGates(), MemoryTableJobs(), MemoryDedupStore()
    events = [[table_change(TxnContext("mariadb:1", f"0-1-{70 + i}", 70 + i, 0.0), 0, p,
                            "app", "users", "fk_cascade", "") for i in range(4)]
              for p in range(2)]
    totals = []
    for p in range(2):
        stats, stop = Stats(), threading.Event()
        scans = task_table_scans(cache, jobs, stats, stop, lease_s=30)
        applier = Applier(cache, MAPPINGS, OPTIONS, dedup, MemoryDeadLetters(), stats=stats,
                          stop=stop, table_jobs=scans)
        applier.apply([rec(p, 0, events[p][0])])
        if p == 0:
            assert cache.entered["users"].acquire(timeout=10)      # the first scan runs
        applier.apply([rec(p, 1 + i, e) for i, e in enumerate(events[p][1:])])
        if p == 0:
            cache.gates["users"].set()
            assert cache.entered["users"].acquire(timeout=10)      # the shared one runs
            assert all(jobs.records[job_id(e)][0] == "r" for e in events[p][1:])
            cache.gates["users"].set()
        finish_scans(scans, batch_id=0)
        scans.close()
        totals.append((stats.table_invalidations, stats.table_scans, stats.table_scans_reused))
    assert all(jobs.records[job_id(e)][0] == "d" for e in events[0])
    # the second task's copies reuse the scans, in one or more waits depending on timing
    assert totals[0] == (4, 2, 0) and totals[1][:2] == (4, 0) and totals[1][2] >= 1
    assert cache.table_scans == 2


def test_a_shared_scan_keeps_the_lease_of_every_event_it_covers():
    """A long scan renews the job record of each event that joined it, so another consumer
    does not take one over (and scan again) while it runs."""
    from cachesync.consumer.applier import Applier, Stats
    from cachesync.consumer.table_jobs import TableInvalidator
    now = [0.0]
    jobs = MemoryTableJobs(clock=lambda: now[0])
    events = [truncate(80 + i, "users") for i in range(3)]
    seen = []

    class Slow(TableGates):
        def invalidate_table(self, mapping, fence_version=None, progress=None, **options):
            now[0] += 2.5       # a long call: alive() renews the leases (3 s) after it
            removed = super().invalidate_table(mapping, fence_version, progress, **options)
            now[0] += 2.5       # past the leases as begun, within them as renewed
            seen.append([jobs.begin(job_id(e), "other-consumer", 3)[0] for e in events[1:]]
                        if seen else None)      # (the first scan's would take them over)
            return removed
    cache, stats = Slow(), Stats()
    scans = TableInvalidator(cache, jobs, stats, lease_s=3, clock=lambda: now[0])
    applier = Applier(cache, MAPPINGS, OPTIONS, MemoryDedupStore(), MemoryDeadLetters(),
                      stats=stats, table_jobs=scans)
    applier.apply([rec(0, 0, events[0])])
    assert cache.entered["users"].acquire(timeout=10)
    applier.apply([rec(0, 1, events[1]), rec(0, 2, events[2])])
    cache.gates["users"].set()
    assert cache.entered["users"].acquire(timeout=10)      # the shared scan of e2 and e3
    cache.gates["users"].set()
    assert wait_until(lambda: len(seen) == 2)
    assert seen[1] == [JobState.WAIT, JobState.WAIT]
    assert wait_until(lambda: all(jobs.records[job_id(e)][0] == "d" for e in events))
    scans.close()
