"""What the default dedup store (Redis) guarantees, on the real services: a change delivered
again is applied once, after the consumer and its durable Redis restart, and after a
rebalance hands a partition to another consumer of the group. (After a MySQL primary is
promoted: tests/integration/test_replica_promotion.py.)"""

from __future__ import annotations

import os
import signal

import pytest

from cachesync.devstack import default_env_file
from tests.support import stack_command, wait_for
from tests.support.variants import ROOT, use_redis_aof

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}
USERS_DDL = "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))"
ROWS = 40


def _write_rows(lab) -> None:
    """The inserts, once the tailer runs (it starts at the current binlog position)."""
    lab.sql("INSERT INTO users VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(ROWS)))


def _applied_all(engine, n: int):
    return lambda: engine.stats.applied + engine.stats.duplicates >= n


def _kill9_redis_aof(lab) -> None:
    """kill -9 the redis-aof server (no shutdown save) and start it again from its AOF."""
    pidfile = default_env_file(ROOT).parent / "run" / "redis-aof.pid"
    with open(pidfile) as f:
        os.kill(int(f.read().strip()), signal.SIGKILL)
    wait_for(lambda: not _answers(lab), 10, what="the killed redis-aof to stop answering")
    stack_command("up", "redis-aof")
    wait_for(lambda: _answers(lab), 20, what="redis-aof back")


def _answers(lab) -> bool:
    try:
        return lab.redis.ping()
    except Exception:
        return False


def test_a_change_published_again_after_the_consumer_and_its_durable_redis_restart_is_skipped(
        lab, monkeypatch):
    use_redis_aof(lab, monkeypatch)
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    _write_rows(lab)
    first = lab.start_engine(cfg)
    wait_for(_applied_all(first, ROWS), 60, what="every insert applied")
    lab.stop_engine(first)
    assert first.stats.applied == ROWS
    assert lab.dedup_rows("done") == ROWS

    _kill9_redis_aof(lab)
    assert lab.dedup_rows("done") == ROWS          # the records came back from the AOF
    assert lab.republish() > 0                     # records (rows are packed per partition)
    second = lab.start_engine(cfg)                 # same group: starts after the committed offsets
    wait_for(lambda: second.stats.consumed >= ROWS, 60, what="the re-published changes consumed")
    assert second.stats.applied == 0
    assert second.stats.duplicates == ROWS


def test_after_a_rebalance_the_new_owner_skips_what_the_old_one_applied(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    _write_rows(lab)
    first = lab.start_engine(cfg)
    wait_for(_applied_all(first, ROWS), 60, what="every insert applied by the first consumer")
    second = lab.start_engine(cfg)                 # joins the group: partitions move to it

    def split():
        found = lab.stack.group_assignment(f"g-{lab.suffix}")
        return len(found) == 2 and all(found.values())
    wait_for(split, 60, interval=0.5, what="both consumers holding partitions")
    assert lab.republish() > 0
    wait_for(lambda: first.stats.duplicates + second.stats.duplicates >= ROWS, 60,
             what="the re-published changes consumed")
    assert first.stats.applied == ROWS and second.stats.applied == 0
    assert second.stats.duplicates > 0             # it owned partitions the first one applied
    assert first.stats.duplicates + second.stats.duplicates == ROWS
