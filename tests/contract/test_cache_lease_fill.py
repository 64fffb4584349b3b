"""One lease-fill contract (a pre-fill by read_through's protocol), three backends: the
in-memory cache, lease_take.lua / lease_fill.lua on a real Redis, and on a real Redis Cluster
(keys of many slots in one call).

A lease is taken only on a key that holds no value and no other reader's lease; a fill is
written only while its lease is still the filler's, so an invalidation between the lease and
the fill (a row change the filler's read may predate) refuses it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Callable

import pytest

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.core.writes import CacheWrite
from cachesync.schema.keys import lease_key
from cachesync.schema.mapping import parse_mappings
from tests.support.variants import redis_cluster

TOKEN = "filler-token"


@dataclass
class Backend:
    cache: object
    key: Callable[[str], str]                 # the test's name of a key
    read: Callable[[str], object]             # value (str), a hash (dict of str) or None
    lease: Callable[[str], str | None]        # the token holding a key's lease
    hold: Callable[[str, str], None]          # another reader takes a key's lease
    put: Callable[[str, str], None]           # an application's SET


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def backend(request):
    if request.param == "memory":
        c = MemoryCache()

        def read(k):
            value = c.data.get(k)
            if isinstance(value, str) and value.startswith("["):
                fields = json.loads(value)
                return dict(zip(fields[::2], fields[1::2]))
            return value
        yield Backend(c, lambda k: k, read, c.leases.get, c.leases.__setitem__,
                      c.data.__setitem__)
        return
    client = request.getfixturevalue("stack").redis() if request.param == "redis" else redis_cluster()
    prefix = f"lf-{uuid.uuid4().hex[:8]}:"

    def read(k):
        if client.type(k) == b"hash":
            return {f.decode(): v.decode() for f, v in client.hgetall(k).items()}
        value = client.get(k)
        return value.decode() if value is not None else None

    def lease(k):
        value = client.get(lease_key(k))
        return value.decode() if value is not None else None
    yield Backend(RedisCache("", client=client), lambda k: prefix + k, read, lease,
                  lambda k, t: client.set(lease_key(k), t, px=60_000),
                  lambda k, v: client.set(k, v, ex=60))
    for k in client.scan_iter(match=f"*{prefix}*"):
        client.delete(k)
    client.close()


def fill(key: str, value: dict, kind: str = "json") -> CacheWrite:
    text = json.dumps(value) if kind == "json" else json.dumps(
        [x for f, v in value.items() for x in (f, v)])
    return CacheWrite(key, kind, "", text, 60, 0.1)


def test_leases_only_on_missing_keys_nobody_else_fills_and_fills_drop_them(backend):
    b = backend
    keys = [b.key(f"user:{i}") for i in range(40)]       # many hash slots on a cluster
    b.put(keys[0], "cached by the application")
    b.hold(keys[1], "another-reader")
    taken = b.cache.take_leases(keys + keys[2:4], TOKEN, 30_000)   # a repeated key counts once
    assert taken == keys[2:]
    assert b.lease(keys[1]) == "another-reader" and b.lease(keys[0]) is None
    writes = [fill(k, {"id": i}) for i, k in enumerate(keys[2:], start=2)]
    writes[1] = fill(keys[3], {"id": "3", "name": "x"}, kind="hash")
    result = b.cache.fill_leased(writes, TOKEN)
    assert (result.applied, result.refused) == (38, 0)
    assert b.read(keys[2]) == '{"id": 2}' and b.read(keys[3]) == {"id": "3", "name": "x"}
    assert all(b.lease(k) is None for k in keys[2:])
    assert b.read(keys[0]) == "cached by the application" and b.read(keys[1]) is None
    # the leases are gone with the fills: the same token cannot fill again
    assert b.cache.fill_leased([fill(keys[2], {"id": "again"})], TOKEN).refused == 1
    assert b.read(keys[2]) == '{"id": 2}'


def test_an_invalidation_between_the_lease_and_the_fill_refuses_the_fill(backend):
    b = backend
    deleted, table_wide, kept = (b.key(k) for k in ("user:1", "user:2", "user:3"))
    assert b.cache.take_leases([deleted, table_wide, kept], TOKEN, 30_000) == \
        [deleted, table_wide, kept]
    b.cache.delete([deleted])                       # the consumer applies a row change
    mapping = parse_mappings({"app.users": {"keys": [b.key("user:{id}")]}}).get("app", "users")
    b.cache.invalidate_table(mapping)               # ... then a TRUNCATE: every lease of it
    assert b.cache.fill_leased([fill(k, {"id": 1}) for k in (deleted, table_wide)],
                               TOKEN).refused == 2
    assert b.read(deleted) is None and b.read(table_wide) is None
    assert b.cache.take_leases([kept], "a-later-filler", 30_000) == [kept]    # voided too


def test_a_lease_taken_over_by_another_reader_refuses_the_fill_and_release_gives_back_only_its_own(
        backend):
    b = backend
    mine, theirs = b.key("user:7"), b.key("user:8")
    b.cache.take_leases([mine, theirs], TOKEN, 30_000)
    b.cache.delete([theirs])
    b.hold(theirs, "another-reader")                 # took it after the invalidation
    assert b.cache.fill_leased([fill(theirs, {"id": 8})], TOKEN).refused == 1
    b.cache.release_leases([mine, theirs], TOKEN)
    assert b.lease(mine) is None and b.lease(theirs) == "another-reader"
    assert b.read(theirs) is None
