"""One fencing contract, two backends: the in-memory cache and fenced_write.lua on real Redis.

A stale write (an older source position) is refused; a write whose version column went
backwards at a newer source position invalidates the key and keeps the stored version.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.core.writes import CacheWrite, padded
from cachesync.schema.keys import lease_key, legacy_lease_key, legacy_version_key, version_key
from cachesync.schema.mapping import parse_mappings
from tests.support.variants import redis_cluster


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def cache(request):
    """(cache, read(key) -> value or None, stored version of key, key namer)."""
    if request.param == "memory":
        c = MemoryCache()
        yield c, c.data.get, c.versions.get, lambda k: k
        return
    client = request.getfixturevalue("stack").redis() if request.param == "redis" else redis_cluster()
    prefix = f"fence-{uuid.uuid4().hex[:8]}:"
    c = RedisCache("", client=client)

    def read(key):
        value = client.get(key)
        return value.decode() if value is not None else None

    def version(key):
        value = client.get(version_key(key))
        return value.decode() if value is not None else None
    yield c, read, version, lambda k: prefix + k
    for k in client.scan_iter(match=f"*{prefix}*"):
        client.delete(k)
    client.close()


def v(column: int, source: int) -> str:
    return f"{padded(column)}/{padded(source)}"


def write(key: str, version: str, kind: str = "json") -> CacheWrite:
    return CacheWrite(key, kind, version, "" if kind == "del" else f'"{version}"', 60, 0.0)


@pytest.mark.parametrize("history, expected, counts", [
    # (column version, source position) in arrival order; expected value; (applied, refused, back)
    ([(5, 10), (6, 20)], (6, 20), (2, 0, 0)),
    ([(6, 20), (5, 10)], (6, 20), (1, 1, 0)),                # a stale replay: refused
    ([(5, 10), (3, 20)], None, (1, 0, 1)),                   # backwards: invalidated
    ([(5, 10), (3, 20), (4, 30)], None, (1, 0, 2)),          # still below the stored 5
    ([(5, 10), (3, 20), (5, 5)], None, (1, 1, 1)),           # an old replay stays refused
    ([(5, 10), (3, 20), (7, 30)], (7, 30), (2, 0, 1)),       # a newer version writes again
])
def test_fencing_tells_stale_replays_from_versions_going_backwards(cache, history, expected,
                                                                   counts):
    c, read, version, key = cache
    k = key("item:1")
    applied = refused = backwards = 0
    for column, source in history:
        result = c.write([write(k, v(column, source))])
        applied, refused = applied + result.applied, refused + result.refused
        backwards += len(result.backwards)
        assert result.backwards in ((), (k,))
    assert (applied, refused, backwards) == counts
    assert read(k) == (None if expected is None else f'"{v(*expected)}"')
    assert version(k) == v(*max(history))          # the newest version stays the fence


def test_a_backwards_delete_also_deletes_and_keeps_the_version(cache):
    c, read, version, key = cache
    k = key("item:2")
    c.write([write(k, v(5, 10))])
    result = c.write([write(k, v(3, 20), kind="del")])
    assert result.backwards == (k,) and read(k) is None and version(k) == v(5, 10)


# -- upgrading a single server from the untagged companion names ------------------------------
@pytest.fixture
def upgraded(stack):
    """(client, key) on the devstack's single server; the key's companions cleaned after."""
    client = stack.redis()
    key = f"fence-{uuid.uuid4().hex[:8]}:item:1"
    yield client, key
    client.delete(key, version_key(key), legacy_version_key(key), lease_key(key),
                  legacy_lease_key(key))
    client.close()


@pytest.mark.parametrize("old_version, refused", [
    (v(6, 20), True),               # a value's version written before the upgrade
    (v(9, 30), True),               # a delete's tombstone written before the upgrade
    (v(4, 5), False),               # an older one: the write is newer
])
def test_an_untagged_version_still_fences_after_the_upgrade(upgraded, old_version, refused):
    client, key = upgraded
    client.set(legacy_version_key(key), old_version, px=60000)
    result = RedisCache("", client=client, legacy_companions=True).write([write(key, v(5, 10))])
    assert result.refused == int(refused)
    if refused:
        assert client.get(key) is None and client.get(legacy_version_key(key)) is not None
    else:       # applied: the version moves to the tagged name
        assert client.get(version_key(key)) == v(5, 10).encode()
        assert client.get(legacy_version_key(key)) is None


def test_without_the_legacy_setting_an_untagged_version_is_not_seen(upgraded):
    """Why redis.legacy_companion_keys defaults to true: off, a stale write wins."""
    client, key = upgraded
    client.set(legacy_version_key(key), v(6, 20), px=60000)
    assert RedisCache("", client=client).write([write(key, v(5, 10))]).applied == 1


class _CountingRedis(redis.Redis):
    """A real client that counts the SCAN passes it starts (cursor 0)."""
    passes = 0

    def scan(self, cursor=0, *args, **kwargs):
        self.passes += str(cursor) == "0"      # scan_iter starts with "0"
        return super().scan(cursor, *args, **kwargs)


def test_a_table_invalidation_reads_the_keyspace_once_for_leases_and_once_for_keys(upgraded,
                                                                                   stack):
    """Each pass reads every key in Redis: the untagged leases are found in the tagged ones'
    pass, not in a third one."""
    _, key = upgraded
    client = _CountingRedis.from_url(stack.env["CACHESYNC_REDIS_URL"])
    try:
        cache = RedisCache("", client=client, legacy_companions=True)
        table = parse_mappings({"app.items": {"keys": [key.rsplit(":", 1)[0] + ":{id}"]}})
        client.set(legacy_lease_key(key), "old-client-token", px=60000)
        client.set(lease_key(key), "new-client-token", px=60000)
        client.set(key, "cached", px=60000)
        assert cache.invalidate_table(table.tables["app.items"]) == 1
        assert client.exists(key, legacy_lease_key(key), lease_key(key)) == 0
        assert client.passes == 2
    finally:
        client.close()


class _CountRecordingRedis(redis.Redis):
    """A real client that records the COUNT of every SCAN call."""
    counts: list

    def scan(self, cursor=0, *args, **kwargs):
        self.counts.append(kwargs.get("count"))
        return super().scan(cursor, *args, **kwargs)


def test_a_table_invalidation_hands_each_round_trip_to_its_pace(stack):
    """Every SCAN call (with the COUNT asked) and every UNLINK pipeline of the scan is timed
    and reported to ``pace``, which may sleep between them."""
    client = _CountRecordingRedis.from_url(stack.env["CACHESYNC_REDIS_URL"])
    client.counts = []
    prefix = f"paced-{uuid.uuid4().hex[:8]}:"
    try:
        client.mset({f"{prefix}{i}": "cached" for i in range(30)})
        table = parse_mappings({"app.items": {"keys": [prefix + "{id}"]}})
        reported = []
        removed = RedisCache("", client=client).invalidate_table(
            table.tables["app.items"], pace=lambda s, n: reported.append((s, n)), scan_count=20)
        assert removed == 30 and not client.exists(*(f"{prefix}{i}" for i in range(30)))
        assert client.counts and set(client.counts) == {20}
        scans = [n for _, n in reported if n]
        unlinks = [n for _, n in reported if not n]
        assert scans == [20] * len(client.counts)   # one report per SCAN call
        assert len(unlinks) >= 1                     # and per UNLINK pipeline
        assert all(s >= 0 for s, _ in reported)
    finally:
        client.delete(*(f"{prefix}{i}" for i in range(30)))
        client.close()


def test_invalidations_void_untagged_leases_too(upgraded):
    """An application still on the old client takes ``cachesync:lease:<key>``: an upgraded
    consumer's delete, fenced write and table invalidation void it."""
    client, key = upgraded
    cache = RedisCache("", client=client, legacy_companions=True)
    table = parse_mappings({"app.items": {"keys": [key.rsplit(":", 1)[0] + ":{id}"]}})
    for invalidate in (lambda: cache.delete([key]), lambda: cache.write([write(key, v(1, 1))]),
                       lambda: cache.invalidate_table(table.tables["app.items"])):
        client.set(legacy_lease_key(key), "old-client-token", px=60000)
        client.set(lease_key(key), "new-client-token", px=60000)
        invalidate()
        assert client.exists(legacy_lease_key(key), lease_key(key)) == 0
