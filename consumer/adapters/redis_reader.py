"""Redis cache reader: values, key scans and TTLs for the commands that look at the cache."""

from __future__ import annotations

from typing import Iterator, Sequence

import redis

from cachesync.consumer.adapters.redis_cache import redis_call, template_keys
from cachesync.consumer.adapters.redis_cluster import masters, read_cached, run_pipeline
from cachesync.schema.errors import FatalError, RetryableError


class RedisCacheReader:
    """The CacheReader port on one Redis client (a single server, a Sentinel master or a
    Cluster); it owns the client. Use one per thread (a client is not shared between
    threads by the callers)."""

    def __init__(self, client: redis.Redis):
        self._client = client

    def read(self, mapping, keys: Sequence[str]) -> list:
        """MGET (per node on a cluster), or pipelined HGETALL for an update-mode hash table."""
        return _reading(lambda: read_cached(self._client, mapping, list(keys))) if keys else []

    def ping(self) -> None:
        _reading(self._client.ping)

    def scan(self, template) -> Iterator[str]:
        """The template's keys on every master, matched as ``invalidate_table`` matches
        them (its glob, then its regex in full), as text (invalid UTF-8 replaced)."""
        try:
            for node in masters(self._client):
                for key in template_keys(node, template):
                    yield key.decode("utf-8", "replace")
        except redis.RedisError as e:
            _reading(_raising(e))

    def without_ttl(self, keys: Sequence[str]) -> list[str]:
        """One pipelined TTL per key (routed per key on a cluster); -1 is a key without one."""
        if not keys:
            return []
        ttls = _reading(lambda: run_pipeline(
            self._client, lambda pipe: [pipe.ttl(key) for key in keys]))
        return [key for key, ttl in zip(keys, ttls) if ttl == -1]

    def close(self) -> None:
        self._client.close()


def _reading(fn):
    """``redis_call(fn)``, and an error reply classified too: NOPERM (the ACL user may not
    run a read) is fatal, any other one (a key of an unexpected type) is retryable, so a
    caller handles CachesyncError only."""
    try:
        return redis_call(fn)
    except redis.exceptions.NoPermissionError as e:
        raise FatalError(f"Redis refused a read (the cachesync user's ACL): {e}") from e
    except redis.RedisError as e:
        raise RetryableError(f"Redis answered with an error: {e}") from e


def _raising(error: Exception):
    def fn():
        raise error
    return fn
