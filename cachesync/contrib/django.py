"""Lease-guarded fills through a Django application's own cache (django-redis).

``get_or_fill`` is ``cache.get_or_set`` whose fill cannot resurrect a stale row: the key
is built by the cache itself (``cache.make_key``: ``KEY_FUNCTION``, ``KEY_PREFIX``,
``VERSION``), the value goes through the cache's own serializer and compressor (pickle by
default, or the configured ones), and the fill is lease-guarded as
:func:`cachesync.client.read_through`'s is. Whatever ``cache.get`` reads back is what it
would have read had the view called ``cache.set``.

Django and django-redis are the application's dependencies, imported when a function here
is called; the sidecar never imports this module.
"""

from __future__ import annotations

from typing import Any, Callable

from cachesync.client import DEFAULT_LEASE_MS, read_through

_DEFAULT = object()     # "the cache's TIMEOUT", as Django's DEFAULT_TIMEOUT means it


class _BackendCodec:
    """django-redis's client as a :class:`cachesync.client.Serializer`: its ``encode`` and
    ``decode`` apply the configured serializer and compressor (and store integers as
    integers), exactly as ``cache.set`` and ``cache.get`` do."""

    def __init__(self, client):
        self._client = client

    def dumps(self, value: Any):
        return self._client.encode(value)

    def loads(self, data: bytes) -> Any:
        return self._client.decode(data)


def get_or_fill(key: str, loader: Callable[[], Any], timeout: Any = _DEFAULT,
                version: int | None = None, alias: str = "default",
                lease_ms: int = DEFAULT_LEASE_MS) -> Any:
    """The cached object of ``key`` (the key as the view passes it to ``cache.get``), or
    ``loader()`` cached for ``timeout`` seconds (default: the cache's ``TIMEOUT``) if no
    invalidation raced the load. A None from the loader is returned and not cached.

    Raises ValueError for a timeout of None (cachesync's fills always expire: the TTL bounds
    staleness if every invalidation were lost) or 0, TypeError when the cache ``alias`` is
    not a django-redis cache; whatever the loader raises; redis errors.
    """
    from django.core.cache import caches
    cache = caches[alias]
    codec, client = _django_redis(cache, alias)
    ttl_s = cache.default_timeout if timeout is _DEFAULT else timeout
    if ttl_s is None or ttl_s <= 0:
        raise ValueError(f"timeout: expected a positive number of seconds, got {timeout!r} "
                         "(cachesync's fills expire, so that the TTL bounds staleness)")
    full_key = str(cache.make_key(key, version=version))
    return read_through(client, full_key, loader, ttl_s=ttl_s, lease_ms=lease_ms,
                        serializer=codec)


def redis_key(key: str, version: int | None = None, alias: str = "default") -> str:
    """The Redis key the cache ``alias`` stores ``key`` under (``cache.make_key``): what
    cachesync's ``key_format: django`` renders from the template ``key``."""
    from django.core.cache import caches
    return str(caches[alias].make_key(key, version=version))


def _django_redis(cache, alias: str):
    """(codec, redis client) of a django-redis cache; raises TypeError for another backend."""
    try:
        from django_redis import get_redis_connection
        from django_redis.cache import RedisCache
    except ImportError:
        raise TypeError("cachesync.contrib.django needs django-redis "
                        "(pip install django-redis)") from None
    if not isinstance(cache, RedisCache):
        raise TypeError(f"CACHES[{alias!r}] is {type(cache).__module__}."
                        f"{type(cache).__name__}; cachesync.contrib.django fills "
                        "django_redis.cache.RedisCache caches")
    return _BackendCodec(cache.client), get_redis_connection(alias)
