"""The pipeline on a 3-master Redis Cluster (the devstack's redis-cluster variant, redis.cluster):
tail -> Kafka -> consume -> Redis Cluster, with keys in every master's slots and keys holding
``{...}`` of their own. No command is CROSSSLOT: nothing is retried or dead-lettered."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.core.writes import CacheWrite, padded
from cachesync.operate import Ops
from cachesync.schema.errors import RetryableError
from cachesync.schema.keys import lease_key, legacy_lease_key, version_key
from cachesync.schema.slots import key_slot
from tests.support import cli, status_json, wait_for
from tests.support.variants import redis_cluster, use_redis_cluster

pytestmark = pytest.mark.integration

TABLES = {"users": {"keys": ["user:{id}", "user:email:{email}"]},
          "profiles": {"keys": ["profile:{id}"], "mode": "update"}}
# emails with hash tags of their own: their keys' slot is the tag's, their companions follow
EMAILS = [f"{{t{i % 5}}}u{i}@x" if i % 2 else f"u{i}@x" for i in range(40)]


def masters_of(cluster, keys) -> set[str]:
    return {cluster.get_node_from_key(k).name for k in keys}


@pytest.fixture
def pipeline(lab, monkeypatch):
    cluster = use_redis_cluster(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(50) NOT NULL)")
    lab.sql("CREATE TABLE profiles (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(TABLES, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    return lab, cluster, cfg, lab.start_engine(cfg)


def test_deletes_fenced_writes_and_a_truncate_on_every_master(pipeline):
    lab, cluster, cfg, engine = pipeline
    keys = [f"user:{i}" for i in range(40)] + [f"user:email:{e}" for e in EMAILS]
    lab.cache(*keys)
    assert len(masters_of(cluster, [lab.prefix + k for k in keys])) == 3
    assert len({key_slot(lab.prefix + k) for k in keys}) > 40      # tags share a few slots
    first = lab.prefix + keys[0]
    node = cluster.get_redis_connection(cluster.get_node_from_key(first))
    with pytest.raises(redis.ResponseError, match="same slot"):     # CROSSSLOT: untagged names fail
        node.execute_command("UNLINK", first, legacy_lease_key(first))

    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, '{e}')" for i, e in enumerate(EMAILS)))
    wait_for(lambda: not lab.cached(*keys), 60, what="every user key invalidated")

    lab.sql("INSERT INTO profiles VALUES " + ",".join(f"({i}, 'n{i}')" for i in range(40)))
    lab.sql("UPDATE profiles SET name = CONCAT(name, '-2') WHERE MOD(id, 3) = 0")
    want = {f"{lab.prefix}profile:{i}": {"id": i, "name": f"n{i}-2" if i % 3 == 0 else f"n{i}"}
            for i in range(40)}

    def written():
        got = {k: cluster.get(k) for k in want}
        return {k: json.loads(v) for k, v in got.items() if v is not None} == want
    wait_for(written, 60, what="the profiles written, then updated")
    assert len(masters_of(cluster, want)) == 3
    for key in want:     # the version sits in its key's slot, and fences an older write
        assert cluster.keyslot(version_key(key)) == cluster.keyslot(key)
        assert cluster.get(version_key(key)) is not None

    lab.cache(*keys)
    leases = [lease_key(lab.prefix + k) for k in keys[:10]]
    for lease in leases:                  # fills in flight (read_through's leases)
        cluster.set(lease, "token", px=60000)
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: not lab.cached(*keys), 60, what="the truncate's keys gone from every master")
    assert not any(cluster.get(lease) == b"token" for lease in leases)   # the fills refused
    assert engine.stats.table_invalidations >= 1
    assert engine.stats.retries == 0 and engine.stats.dead_lettered == 0

    # the Redis dedup store on the cluster: every consumed message confirmed, counted by
    # `status` over every master, once the consumer counted every copy of the truncate (the
    # keys go with the first copy's scan; the others may still be in a batch)
    lab.settled_records(engine)
    report = status_json(lab, cfg)[1]
    assert report["errors"] == {}
    # table-level events are not claimed: their copies share one scan through the job store
    # (consumer/table_jobs.py), which is what makes each of them apply once
    assert (report["dedup"]["done"], report["dedup"]["claimed"]) == \
        (engine.stats.consumed - engine.stats.table_invalidations, 0)


def test_lint_scans_every_master_for_keys_without_ttl_and_the_probe_pings_the_cluster(
        lab, monkeypatch):
    cluster = use_redis_cluster(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(50) NOT NULL)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    forever = [f"{lab.prefix}user:{i}" for i in range(30)]
    assert len(masters_of(cluster, forever)) == 3
    for key in forever:
        cluster.set(key, b"no ttl")
    try:
        result = cli(lab, "lint", "--sample", "100", "-c", cfg)
        assert result.returncode == 4, result.stdout + result.stderr
        assert (f"[no-ttl] 30 sampled key(s) matching '{lab.prefix}user:{{id}}' have no TTL"
                in result.stdout)
        ops = Ops(lab.settings(cfg), "consumer")
        try:
            ops.redis_ping()()          # the readiness probe's Redis step, on the cluster client
        finally:
            ops.close()
    finally:
        for key in forever:
            cluster.delete(key)


def _set_slot(nodes, slot: int, *state) -> None:
    for node in nodes:
        node.execute_command("CLUSTER", "SETSLOT", slot, *state)


def test_deletes_follow_ask_and_fenced_writes_follow_moved_while_a_slot_moves():
    """A resharding step by step (an empty slot, so no key has to be migrated). While the slot
    is migrating the source answers ASK for keys it does not hold: single-key UNLINKs follow
    it; a fenced write (a three-key script) gets TRYAGAIN, which Redis answers until the move
    completes, so the batch fails as retryable (the engines retry it, nothing is skipped).
    Once moved the source answers MOVED, and the write goes through; the fence holds."""
    cluster = redis_cluster()
    cache = RedisCache("", client=cluster)
    key = next(k for k in (f"moving:{uuid.uuid4().hex}" for _ in range(100))
               if cluster.get_redis_connection(cluster.get_node_from_key(k)).execute_command(
                   "CLUSTER", "COUNTKEYSINSLOT", cluster.keyslot(k)) == 0)
    slot = cluster.keyslot(key)
    primaries = {n.name: cluster.get_redis_connection(n) for n in cluster.get_primaries()}
    source = primaries[cluster.get_node_from_key(key).name]
    target = next(conn for conn in primaries.values() if conn is not source)
    source_id, target_id = (c.execute_command("CLUSTER", "MYID") for c in (source, target))
    write = lambda version: CacheWrite(key, "json", padded(version), f'"v{version}"', 60, 0.0)  # noqa: E731
    try:
        _set_slot([target], slot, "IMPORTING", source_id)
        _set_slot([source], slot, "MIGRATING", target_id)
        assert cluster.set(key, b"cached")
        assert [n.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
                for n in (source, target)] == [0, 1]                   # on the target (ASK)
        assert cache.delete([key]) == 1 and cluster.exists(key) == 0
        with pytest.raises(RetryableError, match="resharding"):
            cache.write([write(2)])
        _set_slot(primaries.values(), slot, "NODE", target_id)
        # the client's slot map still names the source: MOVED
        assert cache.write([write(2)]).applied == 1
        assert cache.write([write(1)]).refused == 1
        assert cluster.get(key) == b'"v2"' and target.get(key) == b'"v2"'
        assert cache.delete([key]) == 1 and cluster.exists(key) == 0
    finally:
        cluster.delete(version_key(key))
        cluster.delete(key)
        _set_slot(primaries.values(), slot, "STABLE")       # no importing/migrating left
        _set_slot(primaries.values(), slot, "NODE", source_id)
        cluster.close()
