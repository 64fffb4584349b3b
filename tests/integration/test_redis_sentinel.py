"""The pipeline writing through Redis Sentinel (the devstack's redis-sentinel variant,
redis.sentinels + redis.master_name): a failover during consumption loses no invalidation, and
the sentinels' own ACL user and password (redis.sentinel_username/_password) are the ones used."""

from __future__ import annotations

import dataclasses
import secrets
import subprocess

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from cachesync.runtime import config
from cachesync import wiring

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
    # the replica's own view, not WAIT: the client's 2 s socket timeout cuts a longer WAIT,
    # its retry sends it again on a connection that wrote nothing (it then returns at once),
    # and a WAIT never covers another client's writes (the consumer's deletes below)
    replica = sentinel.slave_for(name, socket_timeout=2)

    def on_replica(keys) -> list[str]:
        return [k for k in keys if replica.exists(lab.prefix + k)]
    wait_for(lambda: len(on_replica([*first, *second, "user:untouched"])) == 21, 60,
             what="the replica holding every cached key")

    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'n')" for i in range(1, 11)))
    wait_for(lambda: not lab.cached(*first), 60, what="the first rows invalidated")
    wait_for(lambda: not on_replica(first), 60, what="the consumer's deletes on the replica")
    before = sentinel.discover_master(name)
    host, port = addresses(sentinels)[0]
    subprocess.run(["redis-cli", "-h", host, "-p", str(port), "SENTINEL", "FAILOVER", name],
                   check=True, capture_output=True, timeout=10)
    wait_for(lambda: sentinel.discover_master(name) != before, 60,
             what="the sentinels to promote the replica")

    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'n')" for i in range(11, 21)))
    wait_for(lambda: not lab.cached(*first, *second), 90,
             what="the rows after the failover invalidated on the new master")
    assert lab.cached("user:untouched") == ["user:untouched"]
    assert master.connection_pool.get_master_address() != before
    lab.stop_engine(engine)
    master.delete(lab.prefix + "user:untouched")


def test_the_sentinels_own_user_and_password_log_in_to_them(lab):
    env = start("redis-sentinel")
    name, sentinels = env["DEVSTACK_REDIS_SENTINEL_MASTER_NAME"], env["DEVSTACK_REDIS_SENTINELS"]
    user, password = f"cs_sentinel_{lab.suffix}", secrets.token_hex(8)
    admins = [redis.Redis(host=host, port=port, socket_timeout=2)
              for host, port in addresses(sentinels)]
    for admin in admins:       # a user only the sentinels know: the master has no such user
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "+@all", "~*")
    environ = {**lab.stack.env, "CACHESYNC_REDIS_URL": "redis://ignored-with-sentinels/0",
               "CACHESYNC_REDIS_SENTINELS": sentinels, "CACHESYNC_REDIS_MASTER_NAME": name,
               "CACHESYNC_REDIS_SENTINEL_USERNAME": user}
    cfg = lab.write_config(USERS)
    try:
        client = wiring.redis_client(config.load(cfg, {
            **environ, "CACHESYNC_REDIS_SENTINEL_PASSWORD": password}), 2)
        assert client.ping()
        logged_in = [c for admin in admins for c in admin.client_list() if c.get("user") == user]
        assert logged_in, "no sentinel connection logged in as the configured user"
        client.close()
        wrong = wiring.redis_client(config.load(cfg, {
            **environ, "CACHESYNC_REDIS_SENTINEL_PASSWORD": "not-" + password}), 2)
        with pytest.raises(MasterNotFoundError):    # every sentinel refused the login
            wrong.ping()
    finally:
        for admin in admins:
            admin.execute_command("ACL", "DELUSER", user)
            admin.close()
