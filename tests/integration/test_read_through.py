"""The seeds' read-write race, reproduced with real threads, MariaDB, the pipeline and Redis.

Interleaving, forced with events (not sleeps): the reader misses and reads the
OLD row; the writer commits; cachesync invalidates; only then does the reader
fill the cache. Plain cache-aside leaves the old value cached; read_through does not.
"""

from __future__ import annotations

import asyncio
import pickle
import threading

import pymysql
import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from cachesync.client import ReplicaCaughtUp, read_through, read_through_async
from cachesync.schema.keys import lease_key
from tests.support import variants, wait_for
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


def test_a_serializer_fills_objects_and_refuses_the_stale_fill(race):
    lab, engine = race
    returned = []

    def guarded_reader(key, loader):
        returned.append(read_through(lab.redis, key, lambda: {"name": loader()}, ttl_s=600,
                                     serializer=pickle))

    assert run_race(lab, engine, guarded_reader) is None   # stale fill refused
    assert returned == [{"name": b"old"}]
    key = lab.prefix + "user:1"
    assert read_through(lab.redis, key, lambda: {"name": "new"}, ttl_s=600,
                        serializer=pickle) == {"name": "new"}
    assert pickle.loads(lab.redis.get(key)) == {"name": "new"}    # what the app's cache reads
    hit = read_through(lab.redis, key, lambda: pytest.fail("a hit must not load"), ttl_s=600,
                       serializer=pickle)
    assert hit == {"name": "new"}


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


# ---------------------------------------------------------------- readers of a replica
@pytest.fixture(scope="module")
def replica_env():
    """Started before any lab: `stack.sh up` grants cachesync's privileges afresh, which
    would drop the grant of a lab made earlier."""
    return variants.start("mariadb-replica")


@pytest.fixture
def lagging_replica(replica_env, race):
    """The race fixture plus the devstack's replica, its SQL thread stopped (a replica that
    lags by as long as the test wants), restarted afterwards."""
    lab, engine = race
    env = replica_env

    def connect(port_key):
        return pymysql.connect(host="127.0.0.1", port=int(env[port_key]),
                               user=env["DEVSTACK_MYSQL_ADMIN_USER"],
                               password=variants.secret(env, "DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"),
                               database=lab.db, autocommit=True)
    replica = wait_for(lambda: _connect_when_replicated(connect), 60, what="the lab's database "
                       "on the replica")
    primary = connect("CACHESYNC_MYSQL_PORT")
    _replica_sql(replica, "STOP SLAVE SQL_THREAD")
    try:
        yield lab, engine, primary, replica
    finally:
        _replica_sql(replica, "START SLAVE SQL_THREAD")
        replica.close()
        primary.close()


def _connect_when_replicated(connect):
    try:
        conn = connect("DEVSTACK_MYSQL_REPLICA_PORT")
    except pymysql.err.OperationalError:      # 1049: the database is not there yet
        return None
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM users")
        if cur.fetchone()[0] == 1:
            return conn
    conn.close()
    return None


def _replica_sql(conn, statement: str) -> None:
    with conn.cursor() as cur:
        cur.execute(statement)


def _load_from(conn):
    def load():
        with conn.cursor() as cur:
            cur.execute("SELECT name FROM users WHERE id = 1")
            return cur.fetchone()[0].encode()
    return load


def test_a_fill_from_a_lagging_replica_is_refused_until_it_caught_up(lagging_replica):
    """cachesync invalidated (it tails the primary) before the replica applied the update:
    a plain read_through from the replica caches the old row; bound to the replica's
    position it returns the old row without caching it, and caches once the replica caught up."""
    lab, engine, primary, replica = lagging_replica
    key = lab.prefix + "user:1"
    applied = engine.stats.applied
    lab.sql("UPDATE users SET name = 'new' WHERE id = 1")
    wait_for(lambda: engine.stats.applied > applied, what="cachesync's invalidation")

    guard = ReplicaCaughtUp(primary, replica, wait_s=0.2)
    assert read_through(lab.redis, key, _load_from(replica), 600, fresh=guard) == b"old"
    assert lab.redis.get(key) is None                      # not cached: the replica lags
    # once the invalidation's hold (redis.fill_hold_ms) is over, a reader takes its own lease
    wait_for(lambda: not lab.redis.exists(lease_key(key)), 10, interval=0.05,
             what="the invalidation's hold to end")
    assert read_through(lab.redis, key, _load_from(replica), 600) == b"old"
    assert lab.redis.get(key) == b"old"                    # unguarded: stale until the TTL

    lab.redis.delete(key)
    _replica_sql(replica, "START SLAVE SQL_THREAD")
    assert read_through(lab.redis, key, _load_from(replica), 600,
                        fresh=ReplicaCaughtUp(primary, replica, wait_s=30)) == b"new"
    assert lab.redis.get(key) == b"new"


def test_the_replica_guard_rejects_an_unknown_flavor():
    with pytest.raises(ValueError, match="flavor"):
        ReplicaCaughtUp(None, None, flavor="postgres")
