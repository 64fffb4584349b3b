"""Active and standby tailers on the real MariaDB: one name, two `cachesync tail` processes.

The standby takes over when the active one is killed -9, and when the active one's lock
connection is killed on the server (what a lost network looks like to MySQL); nothing
committed is missed either way. Timings belong to the failover benchmark.
"""

from __future__ import annotations

import threading

import pytest

from cachesync.wiring import build_tailer_lock
from tests.support import UsersWriter, wait_for, wait_keys_gone

pytestmark = pytest.mark.integration

CACHED = 5000


def lock_holder(lab) -> tuple[str, int] | None:
    """(holder "host:pid", lock connection id) while the lab's tailer lock is held."""
    rows = lab.sql("SELECT l.holder, IS_USED_LOCK(CONCAT('cachesync:tailer:', l.name)) "
                   "FROM cachesync.cachesync_tailer_lock l WHERE l.name = %s",
                   (f"tailer-{lab.suffix}",)) if lab._state_tables_exist() else ()
    return (rows[0][0], rows[0][1]) if rows and rows[0][1] is not None else None


def pid_of(holder: str) -> int:
    return int(holder.rsplit(":", 1)[1])


@pytest.fixture
def pair(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(64), name VARCHAR(32))")
    # the faults here release the lock at once (a killed process or connection); the lease
    # only bounds a lost host's hold, and a 3 s one could let the server drop the lock of an
    # active tailer that a loaded host left waiting for a CPU that long, before any fault
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}}, tailer={"lock_lease_s": 10})
    first = lab.start_tailer(cfg)
    wait_for(lambda: lock_holder(lab), 60, what="the first tailer holding the lock")
    second = lab.spawn("tail", cfg)
    wait_for(lambda: "standby" in lab.log(second), 60, what="the second tailer waiting as standby")
    assert pid_of(lock_holder(lab)[0]) == first.pid
    engine = lab.start_engine(cfg)
    pipe = lab.redis.pipeline(transaction=False)
    for i in range(CACHED):
        pipe.set(f"{lab.prefix}user:{i}", b"cached", ex=600)
    pipe.execute()
    return lab, first, second, engine


def takeover_under_writes(lab, second, fault) -> UsersWriter:
    """Writes before ``fault()``, the standby ``second`` holding the lock after it, more writes
    after the takeover, then every committed row's key invalidated; returns the writer."""
    writer = UsersWriter(lab, rows_per_txn=1)
    writer.start()
    try:
        wait_for(lambda: len(writer.committed) > 200, 60, what="writes before the fault")
        fault()
        wait_for(lambda: (lock_holder(lab) or ("x:0",))[0].endswith(f":{second.pid}"), 60,
                 interval=0.2, what="the standby holding the lock")
        mark = len(writer.committed)
        wait_for(lambda: len(writer.committed) > mark + 500, 60, what="writes after the takeover")
    finally:
        writer.stop()
    wait_keys_gone(lab, [i for i in writer.committed if i < CACHED])
    return writer


def test_the_standby_takes_over_when_the_active_tailer_is_killed(pair):
    lab, first, second, _ = pair
    takeover_under_writes(lab, second, lambda: lab.kill9(first))
    assert "is active here" in lab.log(second)


def test_an_active_tailer_whose_lock_connection_is_cut_stands_down(pair):
    lab, first, second, _ = pair

    def cut():                                          # as the server sees a lost network
        lab.sql(f"KILL CONNECTION {int(lock_holder(lab)[1])}")
    takeover_under_writes(lab, second, cut)
    wait_for(lambda: "lock cachesync:tailer:" in lab.log(first) and "lost" in lab.log(first), 60,
             what="the first tailer standing down")
    assert first.poll() is None, "the old active tailer waits as a standby, it does not exit"


def test_the_lock_check_answers_true_to_threads_that_ask_at_once(lab):
    """The lock watcher asks every second and a tailer restarting on another thread (after a
    Kafka outage, say) asks too: both must hear "held" from the one lock connection, never a
    reply meant for the other or a broken connection taken for a lost lock."""
    lock = build_tailer_lock(lab.settings(lab.write_config({"users": {"keys": ["user:{id}"]}})))
    assert lock.try_acquire()
    answers: list[bool] = []
    start = threading.Barrier(4)

    def ask():
        start.wait()
        answers.extend(lock.held() for _ in range(200))

    try:
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(answers) == 800
        assert all(answers), f"{answers.count(False)} of 800 checks said the lock was lost"
    finally:
        lock.release()
