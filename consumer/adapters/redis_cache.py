"""Redis cache writer: pipelined deletes and fenced writes, errors classified as retryable."""

from __future__ import annotations

import random
from typing import Sequence

import redis

from cachesync.consumer.core.writes import APPLIED, BACKWARDS, CacheWrite
from cachesync.consumer.ports import WriteResult, chunks
from cachesync.schema import resource_text
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.keys import lease_key, version_key

# Keys per pipeline round trip: large enough to amortise the RTT, small enough
# that one slow batch does not hold Redis for long.
PIPELINE_CHUNK = 2000
# Fenced writes per script call: one call runs atomically, so keep it short.
WRITE_CHUNK = 200
# The version key outlives its value a little, so the value can never be
# unfenced while it is still readable.
VERSION_MARGIN_MS = 1000


class RedisCache:
    def __init__(self, url: str, client: redis.Redis | None = None,
                 rand: random.Random | None = None):
        self._client = client or redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._rand = rand or random.Random()
        self._fenced = self._client.register_script(resource_text("lua/fenced_write.lua"))

    def delete(self, keys: Sequence[str]) -> int:
        """UNLINK keys and their fill leases; raises RetryableError when Redis is unreachable.

        Deleting the lease voids any read_through fill that started before this
        invalidation, so a reader that loaded the old row cannot write it back.
        Returns how many cache keys (not leases) existed.
        """
        def run():
            existed = 0
            for part in chunks(list(keys), PIPELINE_CHUNK // 2):
                pipe = self._client.pipeline(transaction=False)
                pipe.unlink(*part)
                pipe.unlink(*(lease_key(k) for k in part))
                existed += int(pipe.execute()[0])
            return existed
        return redis_call(run)

    def write(self, writes: Sequence[CacheWrite]) -> WriteResult:
        """Apply fenced writes (update mode); returns how many were applied and refused.

        Refused means Redis holds a newer version (or a newer delete's tombstone).
        TTLs get their jitter here: ``ttl * (1 - jitter * U[0,1))``, never longer
        than configured, so the TTL stays a bound on staleness.
        """
        def run():
            pipe = self._client.pipeline(transaction=False)
            parts = list(chunks(list(writes), WRITE_CHUNK))
            for part in parts:
                keys, args = [], []
                for w in part:
                    ttl_ms = max(1, int(w.ttl_s * 1000 * (1 - w.ttl_jitter * self._rand.random())))
                    keys += [w.key, version_key(w.key), lease_key(w.key)]
                    args += [w.kind, w.version, w.value, ttl_ms, ttl_ms + VERSION_MARGIN_MS]
                self._fenced(keys=keys, args=args, client=pipe)
            outcomes = [(w.key, int(x)) for part, result in zip(parts, pipe.execute())
                        for w, x in zip(part, result)]
            applied = sum(1 for _, x in outcomes if x == APPLIED)
            backwards = tuple(key for key, x in outcomes if x == BACKWARDS)
            return WriteResult(applied, len(outcomes) - applied - len(backwards), backwards)
        return redis_call(run) if writes else WriteResult(0, 0)

    def close(self) -> None:
        self._client.close()


def redis_call(fn, what: str = "Redis"):
    """Run ``fn()``; refused credentials raise FatalError, an unreachable or loading
    server RetryableError (the engines retry those and never skip)."""
    try:
        return fn()
    except redis.AuthenticationError as e:
        raise FatalError(f"{what} refused the credentials: {e}") from e
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
        raise RetryableError(f"{what} unavailable: {e}") from e
