"""The pipeline writing through Redis Sentinel (the devstack's redis-sentinel variant,
redis.sentinels + redis.master_name): a failover during consumption loses no invalidation."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from tests.support.variants import addresses, start
from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}


def test_failover_during_consumption_loses_no_invalidation(lab, monkeypatch):
    env = start("redis-sentinel")
    name, sentinels = env["DEVSTACK_REDIS_SENTINEL_MASTER_NAME"], env["DEVSTACK_REDIS_SENTINELS"]
    sentinel = Sentinel(addresses(sentinels), socket_timeout=2)
    # the test's own view of the master, following it through the failover
    master = sentinel.master_for(name, socket_timeout=2,
                                 retry=Retry(ExponentialBackoff(cap=1, base=0.05), 30),
                                 retry_on_error=[redis.exceptions.ReadOnlyError])
    monkeypatch.setattr(lab, "redis", master)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(lab.stack, env={
        **lab.stack.env, "CACHESYNC_REDIS_URL": "redis://ignored-with-sentinels/0",
        "CACHESYNC_REDIS_SENTINELS": sentinels, "CACHESYNC_REDIS_MASTER_NAME": name}))
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(USERS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    first, second = [f"user:{i}" for i in range(1, 11)], [f"user:{i}" for i in range(11, 21)]
    lab.cache(*first, *second, "user:untouched")
    assert master.execute_command("WAIT", 1, 5000) == 1    # the replica has every key

    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'n')" for i in range(1, 11)))
    wait_for(lambda: not lab.cached(*first), 60, what="the first rows invalidated")
    assert master.execute_command("WAIT", 1, 5000) == 1    # and their deletes replicated
    before = sentinel.discover_master(name)
    host, port = addresses(sentinels)[0]
    subprocess.run(["redis-cli", "-h", host, "-p", str(port), "SENTINEL", "FAILOVER", name],
                   check=True, capture_output=True, timeout=10)
    wait_for(lambda: sentinel.discover_master(name) != before, 30,
             what="the sentinels to promote the replica")

    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'n')" for i in range(11, 21)))
    wait_for(lambda: not lab.cached(*first, *second), 90,
             what="the rows after the failover invalidated on the new master")
    assert lab.cached("user:untouched") == ["user:untouched"]
    assert master.connection_pool.get_master_address() != before
    lab.stop_engine(engine)
    master.delete(lab.prefix + "user:untouched")
