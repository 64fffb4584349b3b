"""The seeds' read-write race, reproduced with real threads, MariaDB, the pipeline and Redis.

Interleaving, forced with events (not sleeps): the reader misses and reads the
OLD row; the writer commits; cachesync invalidates; only then does the reader
fill the cache. Plain cache-aside leaves the old value cached; read_through does not.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from cachesync.client import read_through, read_through_async
from tests.support import wait_for
from tests.support.variants import use_redis_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "redis-cluster"])
def race(lab, request, monkeypatch):
    """The pipeline on the devstack's Redis, then on its 3-master cluster (key, lease and
    fill script in one slot there, or the fill fails with CROSSSLOT)."""
    if request.param == "redis-cluster":
        use_redis_cluster(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (1, 'old')")
    wait_for(lambda: engine.stats.applied >= 1, what="the insert applied")
    return lab, engine


def run_race(lab, engine, reader) -> bytes | None:
    """Run ``reader(loader)`` against a writer that commits between its DB read and its fill."""
    key = lab.prefix + "user:1"
    loaded, release = threading.Event(), threading.Event()

    def loader():
        with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
            cur.execute("SELECT name FROM users WHERE id = 1")
            value = cur.fetchone()[0].encode()
        loaded.set()
        assert release.wait(60), "writer never released the reader"
        return value

    thread = threading.Thread(target=reader, args=(key, loader))
    thread.start()
    assert loaded.wait(30)
    applied = engine.stats.applied
    lab.sql("UPDATE users SET name = 'new' WHERE id = 1")
    wait_for(lambda: engine.stats.applied > applied, what="cachesync's invalidation")
    release.set()
    thread.join(30)
    return lab.redis.get(key)


def test_plain_cache_aside_leaves_the_stale_value(race):
    lab, engine = race

    def naive_reader(key, loader):
        if lab.redis.get(key) is None:
            lab.redis.set(key, loader(), ex=600)

    assert run_race(lab, engine, naive_reader) == b"old"   # the race is real


def test_read_through_refuses_the_stale_fill(race):
    lab, engine = race
    returned = []

    def guarded_reader(key, loader):
        returned.append(read_through(lab.redis, key, loader, ttl_s=600))

    assert run_race(lab, engine, guarded_reader) is None   # stale fill refused
    assert returned == [b"old"]                             # the caller still got its read
    fresh = read_through(lab.redis, lab.prefix + "user:1", lambda: b"new", ttl_s=600)
    assert fresh == b"new" and lab.redis.get(lab.prefix + "user:1") == b"new"


def test_the_async_twin_refuses_the_stale_fill_too(race):
    lab, engine = race
    returned = []

    def async_reader(key, loader):
        async def main():
            env = lab.stack.env
            client = (RedisCluster if env.get("CACHESYNC_REDIS_CLUSTER") else redis.asyncio.Redis
                      ).from_url(env["CACHESYNC_REDIS_URL"])
            try:
                returned.append(await read_through_async(
                    client, key, lambda: asyncio.to_thread(loader), ttl_s=600))
                fresh_key = lab.prefix + "user:2"
                returned.append(await read_through_async(client, fresh_key,
                                                         lambda: asyncio.sleep(0, b"two"), 600))
            finally:
                await client.aclose()
        asyncio.run(main())

    assert run_race(lab, engine, async_reader) is None      # stale fill refused
    assert returned == [b"old", b"two"]
    assert lab.redis.get(lab.prefix + "user:2") == b"two"   # an unraced fill is cached
    assert 0 < lab.redis.ttl(lab.prefix + "user:2") <= 600
