"""Active and standby tailers on the real MariaDB: one name, two `cachesync tail` processes.

The standby takes over when the active one is killed -9, and when the active one's lock
connection is killed on the server (what a lost network looks like to MySQL); nothing
committed is missed either way. Timings belong to the failover benchmark.
"""

from __future__ import annotations

import pytest

from tests.support import UsersWriter, wait_for

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
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}}, tailer={"lock_lease_s": 3})
    first = lab.start_tailer(cfg)
    wait_for(lambda: lock_holder(lab), 30, what="the first tailer holding the lock")
    second = lab.spawn("tail", cfg)
    wait_for(lambda: "standby" in lab.log(second), 30, what="the second tailer waiting as standby")
    assert pid_of(lock_holder(lab)[0]) == first.pid
    engine = lab.start_engine(cfg)
    pipe = lab.redis.pipeline(transaction=False)
    for i in range(CACHED):
        pipe.set(f"{lab.prefix}user:{i}", b"cached", ex=600)
    pipe.execute()
    return lab, first, second, engine


def every_committed_key_invalidated(lab, writer: UsersWriter) -> None:
    ids = [i for i in writer.committed if i < CACHED]
    assert ids

    def left():
        pipe = lab.redis.pipeline(transaction=False)
        for i in ids:
            pipe.exists(f"{lab.prefix}user:{i}")
        return [i for i, found in zip(ids, pipe.execute()) if found]
    wait_for(lambda: not left(), 120, interval=0.5, what="every committed row's key invalidated")


def test_the_standby_takes_over_when_the_active_tailer_is_killed(pair):
    lab, first, second, _ = pair
    writer = UsersWriter(lab, rows_per_txn=1)
    writer.start()
    try:
        wait_for(lambda: len(writer.committed) > 200, 30, what="writes before the kill")
        lab.kill9(first)
        wait_for(lambda: (lock_holder(lab) or ("x:0",))[0].endswith(f":{second.pid}"), 30,
                 interval=0.2, what="the standby holding the lock")
        mark = len(writer.committed)
        wait_for(lambda: len(writer.committed) > mark + 500, 60, what="writes after the takeover")
    finally:
        writer.stop()
    every_committed_key_invalidated(lab, writer)
    assert "is active here" in lab.log(second)


def test_an_active_tailer_whose_lock_connection_is_cut_stands_down(pair):
    lab, first, second, _ = pair
    writer = UsersWriter(lab, rows_per_txn=1)
    writer.start()
    try:
        wait_for(lambda: len(writer.committed) > 200, 30, what="writes before the cut")
        _, connection = lock_holder(lab)
        lab.sql(f"KILL CONNECTION {int(connection)}")        # as the server sees a lost network
        wait_for(lambda: (lock_holder(lab) or ("x:0",))[0].endswith(f":{second.pid}"), 30,
                 interval=0.2, what="the standby holding the lock")
        wait_for(lambda: "lock cachesync:tailer:" in lab.log(first) and
                 "lost" in lab.log(first), 30, what="the first tailer standing down")
        mark = len(writer.committed)
        wait_for(lambda: len(writer.committed) > mark + 500, 60, what="writes after the takeover")
    finally:
        writer.stop()
    every_committed_key_invalidated(lab, writer)
    assert first.poll() is None, "the old active tailer waits as a standby, it does not exit"
