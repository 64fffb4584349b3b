"""A Redis Cluster master lost (kill -9) while the pipeline applies and applications fill
(the devstack's redis-cluster variant: 3 masters, a replica each). The cluster promotes the
replica; cachesync retries what failed and carries on: afterwards every key matches MySQL,
the version fence and the fill leases hold on the promoted master, and the Redis dedup
store on the cluster has every consumed message done and none left claimed. Redis
replicates asynchronously, so a master killed right after it answered can take its last
writes with it (an invalidation, a dedup confirm): the pipeline runs with
``redis.wait_replicas: 1``, the setting that makes nothing it confirmed depend on the master
alone, and the killed node comes back as the promoted one's replica, which that setting
waits for.

The same pipeline over the redis-cluster-tls variant (TLS only, verified against the
devstack CA, the least-privilege ACL user) is the short test at the end."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import random
import signal
import threading
import uuid

import pytest
import redis
from redis.cluster import RedisCluster

from cachesync.client import read_through
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.adapters.redis_cluster import ReplicaWait
from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
from cachesync.consumer.core.writes import CacheWrite, padded
from cachesync.schema.errors import RetryableError
from cachesync.schema.keys import lease_key, version_key
from tests.support import stack_command, status_json, wait_for
from tests.support.variants import (addresses, redis_cluster, redis_cluster_tls_url, start,
                                    use_redis_cluster, use_redis_cluster_tls)

pytestmark = pytest.mark.integration

TABLES = {"users": {"keys": ["user:{id}"]},
          "profiles": {"keys": ["profile:{id}"], "mode": "update"}}
ROWS = 60
FILLERS = 2
WRITE_PACE_S = 0.01        # the writer's rate (~100 row changes/s), not a synchronisation
FAILOVER_TIMEOUT_S = 60    # the cluster's node timeout is 3 s; promotion takes a few more


class Load:
    """A writer updating every row in turn and FILLERS threads filling user keys through
    ``read_through`` (each on its own cluster client), until ``stop()``. Redis errors met by
    a filler are what an application sees during the failover: counted, not fatal."""

    def __init__(self, lab, url: str):
        self.lab, self.url = lab, url
        self.halt = threading.Event()
        self.commits = 0
        self.fills, self.fill_errors = 0, 0
        self.failures: list[BaseException] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._guarded, args=(self._write,), daemon=True)]
        self._threads += [threading.Thread(target=self._guarded, args=(self._fill,), daemon=True)
                          for _ in range(FILLERS)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self.halt.set()
        for t in self._threads:
            t.join(30)
        assert not self.failures, self.failures

    def _guarded(self, body) -> None:
        try:
            body()
        except BaseException as e:      # reported by stop()
            self.failures.append(e)

    def _write(self) -> None:
        with self.lab.stack.admin(self.lab.db) as conn, conn.cursor() as cur:
            n = 0
            while not self.halt.wait(WRITE_PACE_S):
                n += 1
                row = n % ROWS
                cur.execute("UPDATE users SET name = %s WHERE id = %s", (f"u{n}", row))
                cur.execute("UPDATE profiles SET name = %s WHERE id = %s", (f"p{n}", row))
                self.commits += 2

    def _fill(self) -> None:
        client = RedisCluster.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)
        rand = random.Random()
        with self.lab.stack.admin(self.lab.db) as conn, conn.cursor() as cur:
            def loader(row=None):
                cur.execute("SELECT name FROM users WHERE id = %s", (row,))
                return cur.fetchone()[0].encode()
            while not self.halt.is_set():
                row = rand.randrange(ROWS)
                try:
                    read_through(client, self.lab.prefix + f"user:{row}",
                                 lambda: loader(row), ttl_s=600)
                    with self._lock:
                        self.fills += 1
                except redis.RedisError:
                    with self._lock:
                        self.fill_errors += 1
        client.close()


def node_roles(env: dict) -> dict[str, tuple[str, str, str]]:
    """``{host:port: (role, its master's id or '-', its id)}`` as the first node of the
    redis-cluster variant that answers sees them; role is master, replica or failed."""
    for host, port in addresses(env["DEVSTACK_REDIS_CLUSTER_NODES"]):
        try:
            with redis.Redis(host=host, port=port, socket_timeout=1) as node:
                nodes = node.execute_command("CLUSTER NODES")
        except redis.RedisError:
            continue
        return {addr: ("failed" if "fail" in n["flags"] else
                       "master" if "master" in n["flags"] else "replica",
                       n["master_id"], n["node_id"]) for addr, n in nodes.items()}
    return {}


def mismatches(lab, cluster) -> list[str]:
    """Keys whose value is not what MySQL holds now: a cached user key other than the row's
    name, a profile key (update mode) other than the row."""
    users = dict(lab.sql("SELECT id, name FROM users"))
    profiles = dict(lab.sql("SELECT id, name FROM profiles"))
    wrong = []
    for row in range(ROWS):
        cached = cluster.get(lab.prefix + f"user:{row}")
        if cached is not None and cached != users[row].encode():
            wrong.append(f"user:{row}={cached!r} (row {users[row]!r})")
        written = cluster.get(lab.prefix + f"profile:{row}")
        want = {"id": row, "name": profiles[row]}
        if written is None or json.loads(written) != want:
            wrong.append(f"profile:{row}={written!r} (row {want})")
    return wrong


@pytest.fixture
def cluster_pipeline(lab, monkeypatch):
    cluster = use_redis_cluster(lab, monkeypatch)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(lab.stack, env={
        **lab.stack.env, "CACHESYNC_REDIS_WAIT_REPLICAS": "1"}))
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    lab.sql("CREATE TABLE profiles (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(TABLES, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'u0')" for i in range(ROWS)))
    lab.sql("INSERT INTO profiles VALUES " + ",".join(f"({i}, 'p0')" for i in range(ROWS)))
    wait_for(lambda: not mismatches(lab, cluster), 60, what="every profile written")
    yield lab, cluster, cfg, engine
    # the killed node back, as its replacement's replica: the next test finds 3 + 3 nodes
    stack_command("up", "redis-cluster")


def test_a_master_killed_under_writes_and_fills_loses_nothing(cluster_pipeline):
    lab, cluster, cfg, engine = cluster_pipeline
    env = start("redis-cluster")
    roles = node_roles(env)
    victim = cluster.get_node_from_key(lab.prefix + "profile:0")
    on_victim = {kind: [r for r in range(ROWS) if cluster.get_node_from_key(
        lab.prefix + f"{kind}:{r}").name == victim.name] for kind in ("user", "profile")}
    assert on_victim["user"] and on_victim["profile"]
    replica = next(addr for addr, (role, master, _) in roles.items()
                   if role == "replica" and master == roles[victim.name][2])
    pid_file = pathlib.Path(lab.stack.env["DEVSTACK_DIR"]) / "run" / f"redis-cluster-{victim.port}.pid"

    load = Load(lab, lab.stack.env["CACHESYNC_REDIS_URL"]).start()
    try:
        wait_for(lambda: load.commits >= 100 and load.fills >= 50, 60, what="writes and fills running")
        retries = engine.stats.retries
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        wait_for(lambda: node_roles(env).get(replica, ("",))[0] == "master",
                 FAILOVER_TIMEOUT_S, what=f"the cluster promoting {replica}")
        # the killed node back, as the promoted master's replica (redis.wait_replicas waits
        # for one)
        stack_command("up", "redis-cluster")
        applied = engine.stats.applied
        commits = load.commits
        # cachesync applies again: changes committed after the promotion go through
        wait_for(lambda: load.commits >= commits + 100 and engine.stats.applied >= applied + 100,
                 90, what="changes applied after the promotion")
    finally:
        load.stop()
    assert engine.stats.retries > retries, "the lost master never made a call fail"
    assert load.fill_errors > 0 and load.fills > 0

    # nothing lost, nothing stale: every key as MySQL has it once the last changes are in
    wait_for(lambda: not mismatches(lab, cluster), 90, what="every key matching MySQL")
    assert engine.stats.dead_lettered == 0

    # the fence survived the promotion: an older version is refused on the new master
    key = lab.prefix + f"profile:{on_victim['profile'][0]}"
    assert cluster.get_node_from_key(key).name == replica
    before = cluster.get(key)
    assert RedisCache("", client=cluster).write(
        [CacheWrite(key, "json", padded(1), '"older"', 60, 0.0)]).refused == 1
    assert cluster.get(key) == before

    # and so do the leases: a fill that loaded the row before an update is refused
    assert stale_fill_refused(lab, cluster, on_victim["user"][0]) is None

    # the dedup store on the cluster: every consumed message done, none left claimed
    # counted by a process started now with redis.url naming the dead node: it finds the
    # cluster through redis.cluster_nodes; once the consumer confirmed and counted the
    # update stale_fill_refused made (its lease is voided before its batch is confirmed)
    lab.settled_records(engine)
    code, report = status_json(lab, cfg, env={"CACHESYNC_REDIS_URL": f"redis://{victim.name}/0"})
    assert report["errors"] == {}
    assert report["dedup"]["claimed"] == 0
    assert report["dedup"]["done"] == engine.stats.consumed - engine.stats.table_invalidations


def stale_fill_refused(lab, cluster, row: int):
    """read_through of ``user:<row>`` whose loader reads the row, then lets an update commit
    and waits until cachesync voided the lease, then returns the old value; returns what the
    cache holds afterwards."""
    key = lab.prefix + f"user:{row}"
    cluster.delete(key)
    # the hold of the row's last invalidation (redis.fill_hold_ms) ended: the reader takes
    # the lease itself, rather than finding a hold that may expire while it loads
    wait_for(lambda: not cluster.exists(lease_key(key)), 30, what="the last hold on the lease ended")

    def loader():
        (name,), = lab.sql("SELECT name FROM users WHERE id = %s", (row,))
        assert cluster.exists(lease_key(key))
        lab.sql("UPDATE users SET name = 'after-failover' WHERE id = %s", (row,))
        wait_for(lambda: not cluster.exists(lease_key(key)), 60, what="the lease voided")
        return name.encode()

    assert read_through(cluster, key, loader, ttl_s=600) != b"after-failover"
    return cluster.get(key)


@pytest.fixture
def tls_pipeline(lab, monkeypatch):
    cluster = use_redis_cluster_tls(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    lab.sql("CREATE TABLE profiles (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(TABLES, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    return lab, cluster, cfg, lab.start_engine(cfg)


def test_the_pipeline_over_a_tls_cluster_as_the_least_privileged_user(tls_pipeline):
    lab, cluster, cfg, engine = tls_pipeline
    users = [lab.prefix + f"user:{r}" for r in range(ROWS)]
    assert len({cluster.get_node_from_key(k).name for k in users}) == 3
    for key in users:
        cluster.set(key, b"cached", ex=600)
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, 'u0')" for i in range(ROWS)))
    lab.sql("INSERT INTO profiles VALUES " + ",".join(f"({i}, 'p0')" for i in range(ROWS)))
    lab.sql("UPDATE profiles SET name = 'p1' WHERE MOD(id, 2) = 0")
    wait_for(lambda: not any(cluster.exists(k) for k in users), 60, what="user keys invalidated")
    want = {r: {"id": r, "name": "p1" if r % 2 == 0 else "p0"} for r in range(ROWS)}
    wait_for(lambda: {r: json.loads(cluster.get(lab.prefix + f"profile:{r}") or "null")
                      for r in range(ROWS)} == want, 60, what="profiles written over TLS")
    assert stale_fill_refused(lab, cluster, 1) is None      # leases, as the app's TLS client
    lab.settled_records(engine)     # the update it made confirmed and counted, as status reads it
    report = status_json(lab, cfg)[1]
    assert report["errors"] == {}
    assert (report["dedup"]["done"], report["dedup"]["claimed"]) == (engine.stats.consumed, 0)
    assert engine.stats.retries == 0 and engine.stats.dead_lettered == 0


def test_a_tls_cluster_client_verifies_the_certificate():
    env = start("redis-cluster-tls")
    password = pathlib.Path(env["DEVSTACK_REDIS_CLUSTER_TLS_PASSWORD_FILE"]).read_text().strip()
    url = redis_cluster_tls_url(env, env["DEVSTACK_REDIS_CLUSTER_TLS_USER"], password)
    unverified = url.split("?")[0]        # no CA: the system trust store, which lacks the devstack CA
    with pytest.raises(redis.RedisClusterException) as refused:
        RedisCluster.from_url(unverified, socket_timeout=2)
    assert "certificate verify failed" in str(refused.value)


def test_wait_replicas_confirms_a_batch_only_once_every_replica_has_it():
    """redis.wait_replicas on the cluster (one replica per master): deletes, fenced writes and
    dedup records return once each master's replica acknowledged them; asking for more
    replicas than a master has fails the batch as retryable, naming the setting."""
    cluster = redis_cluster()
    run = uuid.uuid4().hex[:8]
    keys = [f"wait:{run}:{i}" for i in range(30)]
    assert len({cluster.get_node_from_key(k).name for k in keys}) == 3
    for key in keys:
        cluster.set(key, b"cached", ex=60)
    cache = RedisCache("", client=cluster, wait=ReplicaWait(1, 5000))
    try:
        assert cache.delete(keys) == len(keys)
        for addr, (role, _, _) in node_roles(start("redis-cluster")).items():
            if role == "replica":       # each replica already has its master's deletes
                host, port = addr.rsplit(":", 1)
                with redis.Redis(host=host, port=int(port), socket_timeout=2) as replica:
                    replica.execute_command("READONLY")
                    mine = [k for k in keys if _serves(replica, cluster.keyslot(k))]
                    assert mine and not any(replica.exists(k) for k in mine)
        write = CacheWrite(keys[0], "json", padded(2), '"v2"', 60, 0.0)
        assert cache.write([write]).applied == 1
        dedup = RedisDedupStore("", f"wait-{run}", 60, client=cluster, wait=ReplicaWait(1, 5000))
        token, states = dedup.claim(keys, 30)
        dedup.confirm(token, keys)
        assert dedup.counts() == {"claimed": 0, "done": len(keys)}
        strict = RedisCache("", client=cluster, wait=ReplicaWait(2, 100))
        with pytest.raises(RetryableError, match="redis.wait_replicas"):
            strict.delete(keys)
    finally:
        for key in keys:
            cluster.delete(key, version_key(key))
        for key in cluster.scan_iter(match=f"cachesync:dedup:wait-{run}:*"):
            cluster.delete(key)
        cluster.close()


def _serves(replica: redis.Redis, slot: int) -> bool:
    """Whether ``replica``'s master serves ``slot`` (CLUSTER SLOTS as the replica sees it)."""
    me = replica.execute_command("CLUSTER", "MYID")
    me = me.decode() if isinstance(me, bytes) else me
    for first, last, *nodes in replica.execute_command("CLUSTER", "SLOTS"):
        ids = [n[2].decode() if isinstance(n[2], bytes) else n[2] for n in nodes]
        if first <= slot <= last and me in ids:
            return True
    return False
