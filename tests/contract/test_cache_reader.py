"""One CacheReader contract, three backends: the in-memory cache and Redis, single server and
Cluster (keys over many slots of three masters).

Values are written through the CacheWriter port (they get TTLs); ``put`` stands for an
application's SET without a TTL.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.adapters.redis_reader import RedisCacheReader
from cachesync.consumer.core.writes import CacheWrite, padded
from cachesync.schema.errors import RetryableError
from cachesync.schema.mapping import parse_mappings
from tests.support.variants import redis_cluster

_versions = itertools.count(1)


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def cache(request):
    """(reader, writer, put(key, text) without a TTL, key prefix)."""
    if request.param == "memory":
        c = MemoryCache()
        yield c, c, c.data.__setitem__, f"r{uuid.uuid4().hex[:6]}:"
        return
    client = request.getfixturevalue("stack").redis() if request.param == "redis" else redis_cluster()
    prefix = f"reader-{uuid.uuid4().hex[:8]}:"
    reader = RedisCacheReader(client)
    yield reader, RedisCache("", client=client), client.set, prefix
    for k in client.scan_iter(match=f"*{prefix}*"):
        client.delete(k)
    reader.close()


def table(prefix: str, **spec):
    return parse_mappings({"app.users": {"keys": [prefix + "user:{id}"], **spec}}).get("app", "users")


def write(key: str, value: str, kind: str = "json") -> CacheWrite:
    return CacheWrite(key, kind, padded(next(_versions)), value, 60, 0.0)


def test_read_gives_values_in_order_and_none_when_absent(cache):
    reader, writer, put, p = cache
    keys = [f"{p}user:{i}" for i in range(40)]        # many slots on the cluster
    writer.write([write(k, f'{{"id":{i}}}') for i, k in enumerate(keys) if i % 3])
    put(keys[0], "filled by the app")
    found = reader.read(table(p), keys)
    assert found[0] == b"filled by the app"
    assert found[1:] == [None if i % 3 == 0 else f'{{"id":{i}}}'.encode()
                         for i in range(1, 40)]
    assert reader.read(table(p), []) == []


def test_read_of_an_update_mode_hash_table_gives_a_dict_per_key(cache):
    reader, writer, _, p = cache
    mapping = table(p, mode="update", value="hash")
    writer.write([write(f"{p}user:1", '["name","ann","age","7"]', kind="hash")])
    assert reader.read(mapping, [f"{p}user:1", f"{p}user:2"]) == [
        {b"name": b"ann", b"age": b"7"}, {}]


def test_scan_finds_exactly_the_keys_the_template_renders(cache):
    reader, writer, put, p = cache
    mine = {f"{p}user:{i}" for i in range(25)}
    writer.write([write(k, '"x"') for k in sorted(mine)])
    put(f"{p}user:email:a@b", "another template's key")
    put(f"{p}users", "not rendered by the template")
    mapping = table(p)
    assert set(reader.scan(mapping.keys[0])) == mine


def test_without_ttl_names_the_existing_keys_that_have_none(cache):
    reader, writer, put, p = cache
    written, filled, absent = f"{p}user:1", f"{p}user:2", f"{p}user:3"
    writer.write([write(written, '"x"')])
    put(filled, "no ttl")
    assert reader.without_ttl([written, filled, absent]) == [filled]
    assert reader.without_ttl([]) == []


def test_ping_answers(cache):
    reader, *_ = cache
    assert reader.ping() is None


def test_an_unreachable_redis_is_a_retryable_error():
    import redis
    reader = RedisCacheReader(redis.Redis(port=1, socket_connect_timeout=1))
    mapping = table("x:")
    for call in (reader.ping, lambda: reader.read(mapping, ["x:user:1"]),
                 lambda: list(reader.scan(mapping.keys[0])), lambda: reader.without_ttl(["k"])):
        with pytest.raises(RetryableError):
            call()
