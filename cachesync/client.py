"""Application-side helper: cache-aside reads whose fills cannot resurrect stale data.

The race it closes (the seeds' read-write race): a reader misses, reads the OLD
row, a writer commits and cachesync invalidates, then the reader writes the old
value back and it stays until the TTL. With ``read_through`` the reader takes a
lease on its miss; cachesync's invalidation voids the lease; the late fill finds
its lease gone and is refused (the reader still returns what it loaded).

The invalidation holds the lease for ``redis.fill_hold_ms`` rather than deleting it: the
server writes a commit to the binlog before it is visible to other sessions, so a reader
that misses just after the invalidation may still load the old row. Such a reader fills
only until the hold ends, so that what it cached expires with the hold.
"""

from __future__ import annotations

import uuid
import weakref
from typing import Any, Awaitable, Callable, Protocol

import redis
import redis.asyncio

from cachesync.schema import resource_text
from cachesync.schema.keys import LEASE_HOLD, lease_key

DEFAULT_LEASE_MS = 10_000   # longer than any sane loader; an expired lease just skips one fill
# take_lease.lua's answers but a hold's value: the lease is the reader's, another reader's
OWN, BUSY = 1, 0


class Serializer(Protocol):
    """How an application's cache stores its values: ``dumps(value) -> bytes`` and
    ``loads(bytes) -> value`` (``pickle``, ``json`` with bytes, django-redis's client, a
    Rails/Laravel-compatible codec, ...). Any object with the two methods will do."""

    def dumps(self, value: Any) -> bytes | str | int: ...

    def loads(self, data: bytes) -> Any: ...


class _Raw:
    """No serializer: the loader returns the bytes or text to cache; reads return them as
    Redis gave them."""

    @staticmethod
    def dumps(value: Any) -> Any:
        return value

    @staticmethod
    def loads(data: bytes) -> Any:
        return data


RAW: Serializer = _Raw()


def read_through(client: redis.Redis, key: str, loader: Callable[[], Any],
                 ttl_s: float, lease_ms: int = DEFAULT_LEASE_MS,
                 fresh: Callable[[], bool] | None = None,
                 serializer: Serializer = RAW) -> Any:
    """Return the cached value of ``key`` or ``loader()``, filling the cache only if safe.

    ``loader`` reads the database (it runs after the lease is taken, which is what
    makes the fill safe). A None from the loader is returned and not cached.
    ``fresh``, for loaders that read a replica (:class:`ReplicaCaughtUp`): called once
    the lease is held (or found held by an invalidation), before the loader; False means
    the replica may predate an invalidation that already ran, so the value is returned but
    not cached.
    ``serializer`` (:class:`Serializer`): the loader returns an object, the cache holds
    ``serializer.dumps(object)`` and a hit returns ``serializer.loads(bytes)``; without
    it the loader returns the bytes or text to cache.
    Raises whatever ``loader``, ``fresh`` or the serializer raise and redis errors (the
    cache is optional to callers that catch them).
    """
    cached = client.get(key)
    if cached is not None:
        return serializer.loads(cached)
    token, lease = uuid.uuid4().hex, lease_key(key)
    # another reader's lease: load anyway but do not fill
    state = _script(client, "take_lease")(keys=[lease], args=[token, lease_ms, LEASE_HOLD])
    if state != BUSY and fresh is not None and not fresh():
        if state == OWN:
            _script(client, "release_lease")(keys=[lease], args=[token])
        state = BUSY
    value = loader()
    if value is not None and state != BUSY:
        _fill(client, state, key, lease, token, serializer.dumps(value), ttl_s)
    return value


async def read_through_async(client: redis.asyncio.Redis, key: str,
                             loader: Callable[[], Awaitable[Any]], ttl_s: float,
                             lease_ms: int = DEFAULT_LEASE_MS,
                             fresh: Callable[[], Awaitable[bool]] | None = None,
                             serializer: Serializer = RAW) -> Any:
    """The asyncio twin of :func:`read_through` (``redis.asyncio`` client, awaitable loader
    and ``fresh``)."""
    cached = await client.get(key)
    if cached is not None:
        return serializer.loads(cached)
    token, lease = uuid.uuid4().hex, lease_key(key)
    state = await _script(client, "take_lease")(keys=[lease], args=[token, lease_ms, LEASE_HOLD])
    if state != BUSY and fresh is not None and not await fresh():
        if state == OWN:
            await _script(client, "release_lease")(keys=[lease], args=[token])
        state = BUSY
    value = await loader()
    if value is not None and state != BUSY:
        await _fill(client, state, key, lease, token, serializer.dumps(value), ttl_s)
    return value


def _fill(client, state, key: str, lease: str, token: str, data: Any, ttl_s: float):
    """The fill of a reader that took the lease (``state`` OWN; fill_if_lease.lua: only
    while it is still the reader's) or found it held by an invalidation (``state`` the hold's
    value; fill_if_held.lua: only while that same hold lasts, and for no longer); returns the
    script call's result (awaitable on asyncio)."""
    token, data, ttl_ms = _fill_args(token, data, ttl_s)
    if state == OWN:
        return _script(client, "fill_if_lease")(keys=[key, lease], args=[token, data, ttl_ms])
    return _script(client, "fill_if_held")(keys=[key, lease], args=[data, ttl_ms, state])


def _fill_args(token: str, data: Any, ttl_s: float) -> list:
    """ARGV of fill_if_lease.lua; raises ValueError for a TTL under a millisecond (every
    fill expires: the TTL bounds staleness if every invalidation were lost)."""
    ttl_ms = int(ttl_s * 1000)
    if ttl_ms < 1:
        raise ValueError(f"ttl_s: expected a positive number of seconds, got {ttl_s!r}")
    return [token, data, ttl_ms]


class ReplicaCaughtUp:
    """``read_through``'s ``fresh`` check for loaders that read a replica: the lease bound
    to the replica's position.

    An invalidation can run before the replica applied the change it invalidates
    (cachesync tails the primary). A reader that misses after it and loads from the
    lagging replica would cache the old row until the TTL. Called with the lease held,
    this reads the primary's position and waits up to ``wait_s`` for the replica to
    apply it: every change whose invalidation ran before the lease is then in what the
    loader reads, and every later one voids the lease. Costs, per miss, one primary
    round trip (a variable, no row) and one on the replica. ``primary`` and ``replica``
    are DB-API connections (pymysql) in autocommit; ``flavor`` is "mariadb" or "mysql".
    """

    _POSITION = {"mariadb": "SELECT @@GLOBAL.gtid_binlog_pos",
                 "mysql": "SELECT @@GLOBAL.gtid_executed"}
    # MASTER_GTID_WAIT: 0 reached, -1 timed out; WAIT_FOR_EXECUTED_GTID_SET: 0 / 1
    _WAIT = {"mariadb": "SELECT MASTER_GTID_WAIT(%s, %s) = 0",
             "mysql": "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s) = 0"}

    def __init__(self, primary, replica, wait_s: float = 0.05, flavor: str = "mariadb"):
        if flavor not in self._POSITION:
            raise ValueError(f"flavor: expected 'mariadb' or 'mysql', got {flavor!r}")
        self.primary, self.replica, self.wait_s, self.flavor = primary, replica, wait_s, flavor

    def __call__(self) -> bool:
        """True when the replica holds every transaction the primary had committed."""
        with self.primary.cursor() as cur:
            cur.execute(self._POSITION[self.flavor])
            (position,), = cur.fetchall()
        with self.replica.cursor() as cur:
            cur.execute(self._WAIT[self.flavor], (position, self.wait_s))
            (reached,), = cur.fetchall()
        return bool(reached)


# One Script per client: redis-py Script objects hash the Lua once and fall back from
# EVALSHA to EVAL by themselves; building one per miss would re-hash on a hot path.
_SCRIPTS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def _script(client, name: str):
    """The registered ``lua/<name>.lua`` of ``client`` (fill_if_lease, release_lease)."""
    scripts = _SCRIPTS.get(client)
    if scripts is None:
        scripts = _SCRIPTS[client] = {}
    if name not in scripts:
        scripts[name] = client.register_script(resource_text(f"lua/{name}.lua"))
    return scripts[name]
