"""Application-side helper: cache-aside reads whose fills cannot resurrect stale data.

The race it closes (the seeds' read-write race): a reader misses, reads the OLD
row, a writer commits and cachesync invalidates, then the reader writes the old
value back and it stays until the TTL. With ``read_through`` the reader takes a
lease on its miss; cachesync's invalidation deletes the lease; the late fill finds
its lease gone and is refused (the reader still returns what it loaded).
"""

from __future__ import annotations

import uuid
import weakref
from typing import Awaitable, Callable

import redis
import redis.asyncio

from cachesync.schema import resource_text
from cachesync.schema.keys import lease_key

DEFAULT_LEASE_MS = 10_000   # longer than any sane loader; an expired lease just skips one fill

def read_through(client: redis.Redis, key: str, loader: Callable[[], bytes | str | None],
                 ttl_s: int, lease_ms: int = DEFAULT_LEASE_MS) -> bytes | str | None:
    """Return the cached value of ``key`` or ``loader()``, filling the cache only if safe.

    ``loader`` reads the database (it runs after the lease is taken, which is what
    makes the fill safe). A None from the loader is returned and not cached.
    Raises whatever ``loader`` raises and redis errors (the cache is optional to
    callers that catch them).
    """
    cached = client.get(key)
    if cached is not None:
        return cached
    token = uuid.uuid4().hex
    # NX: if another reader holds the lease, load anyway but do not fill.
    have_lease = client.set(lease_key(key), token, nx=True, px=lease_ms)
    value = loader()
    if value is not None and have_lease:
        _fill_script(client)(keys=[key, lease_key(key)], args=[token, value, ttl_s * 1000])
    return value


async def read_through_async(client: redis.asyncio.Redis, key: str,
                             loader: Callable[[], Awaitable[bytes | str | None]], ttl_s: int,
                             lease_ms: int = DEFAULT_LEASE_MS) -> bytes | str | None:
    """The asyncio twin of :func:`read_through` (``redis.asyncio`` client, awaitable loader)."""
    cached = await client.get(key)
    if cached is not None:
        return cached
    token = uuid.uuid4().hex
    have_lease = await client.set(lease_key(key), token, nx=True, px=lease_ms)
    value = await loader()
    if value is not None and have_lease:
        await _fill_script(client)(keys=[key, lease_key(key)], args=[token, value, ttl_s * 1000])
    return value


# One Script per client: redis-py Script objects hash the Lua once and fall back from
# EVALSHA to EVAL by themselves; building one per miss would re-hash on a hot path.
_SCRIPTS: "weakref.WeakKeyDictionary[object, object]" = weakref.WeakKeyDictionary()


def _fill_script(client):
    script = _SCRIPTS.get(client)
    if script is None:
        script = _SCRIPTS[client] = client.register_script(resource_text("lua/fill_if_lease.lua"))
    return script
