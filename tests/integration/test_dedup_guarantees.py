"""What each dedup store choice guarantees, on the real services: a change delivered again is
applied once after the consumer restarts (with the Redis store: its durable Redis killed and
restarted too), and after a rebalance hands a partition to another consumer of the group.
Choices: the Redis store (default), the MySQL store's rows and compact layouts on the
primary, and the MySQL store on a server of its own (the ``mariadb-twin`` variant,
``consumer.dedup_mysql_host``). After a MySQL primary is promoted:
tests/integration/test_replica_promotion.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading

import pytest

from cachesync.devstack import default_env_file
from cachesync.wiring import build_engine
from tests.integration.test_replica_promotion import Server
from tests.support import group_lag, stack_command, wait_for
from tests.support.variants import ROOT, start, use_redis_aof

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}
USERS_DDL = "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))"
ROWS = 40


CHOICES = ("redis", "mysql", "mysql_compact", "mysql_host")


@pytest.fixture(params=CHOICES)
def dedup(request, lab):
    """(choice, consumer settings) of one dedup store choice; the compact layout's ALTER,
    DROP is granted to the cachesync account for the test and revoked afterwards."""
    choice = request.param
    if choice == "redis":
        yield choice, {"dedup_store": "redis"}
    elif choice == "mysql":
        yield choice, {"dedup_store": "mysql"}
    elif choice == "mysql_compact":
        lab.sql("GRANT ALTER, DROP ON cachesync.* TO cachesync@'127.0.0.1'")
        try:
            yield choice, {"dedup_store": "mysql", "dedup_mysql_layout": "compact"}
        finally:
            lab.sql("REVOKE ALTER, DROP ON cachesync.* FROM cachesync@'127.0.0.1'")
    else:
        env = start("mariadb-twin")
        yield choice, {"dedup_store": "mysql",
                       "dedup_mysql_host": f"127.0.0.1:{env['DEVSTACK_MYSQL_TWIN_PORT']}"}


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
    wait_for(lambda: not _answers(lab), 60, what="the killed redis-aof to stop answering")
    stack_command("up", "redis-aof")
    wait_for(lambda: _answers(lab), 60, what="redis-aof back")


def _answers(lab) -> bool:
    try:
        return lab.redis.ping()
    except Exception:
        return False


def test_a_change_published_again_after_the_consumer_and_its_store_restart_is_skipped(
        lab, dedup, monkeypatch):
    choice, consumer = dedup
    if choice == "redis":
        use_redis_aof(lab, monkeypatch)
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=consumer)
    lab.start_tailer(cfg)
    _write_rows(lab)
    first = lab.start_engine(cfg)
    wait_for(_applied_all(first, ROWS), 60, what="every insert applied")
    lab.stop_engine(first)
    assert first.stats.applied == ROWS
    assert lab.dedup_rows("done") == ROWS
    if choice == "mysql_host":      # nothing on the primary
        assert lab.sql("SELECT COUNT(*) FROM cachesync.cachesync_dedup WHERE ns = %s",
                       (f"g-{lab.suffix}",)) == ((0,),)

    if choice == "redis":
        _kill9_redis_aof(lab)
        assert lab.dedup_rows("done") == ROWS      # the records came back from the AOF
    assert lab.republish() > 0                     # records (rows are packed per partition)
    second = lab.start_engine(cfg)                 # same group: starts after the committed offsets
    wait_for(lambda: second.stats.consumed >= ROWS, 60, what="the re-published changes consumed")
    assert second.stats.applied == 0
    assert second.stats.duplicates == ROWS


def test_after_a_rebalance_the_new_owner_skips_what_the_old_one_applied(lab, dedup):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=dedup[1])
    lab.start_tailer(cfg)
    _write_rows(lab)
    first = lab.start_engine(cfg)
    wait_for(_applied_all(first, ROWS), 60, what="every insert applied by the first consumer")
    # its offsets committed (asynchronously, after each batch): else the rebalance may
    # legitimately hand the new owner records it applied, and the counts below would differ
    wait_for(lambda: group_lag(lab) == 0, 60, interval=0.2, what="the first consumer's commits")
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


@pytest.fixture
def promoted_pair(lab):
    """(primary, replica) of the ``mariadb-replica`` variant, the replica following the
    primary; afterwards the primary is started again and the promoted replica rebuilt by
    the next `up` (as tests/integration/test_replica_promotion.py does)."""
    env = start("mariadb-replica")
    try:
        yield Server(env, int(env["CACHESYNC_MYSQL_PORT"])), Server(
            env, int(env["DEVSTACK_MYSQL_REPLICA_PORT"]))
    finally:
        stack_command("up", "mariadb")
        # `up` resets the cachesync account's grants; lab.close() revokes the lab's one
        lab.sql(f"GRANT SELECT ON {lab.db}.* TO cachesync@'127.0.0.1'")


@pytest.mark.parametrize("choice", ["mysql", "mysql_host"])
def test_after_a_primary_promotion_a_change_published_again_is_skipped(lab, promoted_pair,
                                                                       choice):
    """The stores that survive a promotion: the MySQL store on the primary (its records
    replicated before the primary was lost) and on a server of its own. (The Redis store:
    test_replica_promotion.py. With the binlog off the records stay on the lost primary:
    not deduplicated, as the Scale page says.)"""
    primary, replica = promoted_pair
    consumer = {"dedup_store": "mysql"}
    if choice == "mysql_host":
        twin = start("mariadb-twin")
        consumer["dedup_mysql_host"] = f"127.0.0.1:{twin['DEVSTACK_MYSQL_TWIN_PORT']}"
    lab.sql(USERS_DDL)
    wait_for(lambda: replica.query("SHOW TABLES FROM " + lab.db), 60,
             what="the table on the replica")
    cfg = lab.write_config(USERS, tailer={"source_hosts": f"127.0.0.1:{replica.port}"},
                           consumer=consumer)
    tailer = lab.start_tailer(cfg)
    _write_rows(lab)
    first = lab.start_engine(cfg)
    wait_for(_applied_all(first, ROWS), 60, what="every insert applied")
    lab.stop_engine(first)
    lab.kill9(tailer)
    assert first.stats.applied == ROWS
    (pos,), = primary.query("SELECT @@gtid_binlog_pos")
    assert replica.query("SELECT MASTER_GTID_WAIT(%s, 30)", (pos,)) == ((0,),)

    stack_command("down", "mariadb")                    # the primary is lost
    stack_command("promote", "mariadb-replica")
    assert lab.republish() > 0          # what a tailer restarted on the new primary re-sends
    settings = lab.settings(cfg)
    settings = dataclasses.replace(settings, mysql=dataclasses.replace(
        settings.mysql, port=replica.port))
    second = build_engine(settings)     # its mysql.host is now the promoted replica
    worker = threading.Thread(target=second.run, daemon=True)
    worker.start()
    try:
        wait_for(lambda: second.stats.consumed >= ROWS, 60,
                 what="the re-published changes consumed")
    finally:
        second.stop()
        worker.join(30)
        second.close()
    assert second.stats.applied == 0
    assert second.stats.duplicates == ROWS
