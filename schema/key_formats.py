"""The key forms web frameworks' caches give to the keys an application passes them (pure).

A table's key templates are written as the application names the key in its cache API
(``cache.get("author:1")``, ``Rails.cache.fetch("author:1")``); the key format turns each
template into the key the framework actually stores in Redis, with the prefix and version
taken from the settings, so that a version bump is one setting and never orphans a mapping.

| format    | Redis key                                   | the application's settings                  |
|-----------|---------------------------------------------|---------------------------------------------|
| plain     | ``{key}``                                   |                                             |
| django    | ``{key_prefix}:{version}:{key}``            | ``CACHES[...]['KEY_PREFIX']``, ``VERSION``  |
| rails     | ``{key_prefix}:{key}`` (``{key}`` without)  | ``RedisCacheStore`` ``namespace:``          |
| laravel   | ``{connection_prefix}{key_prefix}{key}``    | ``database.redis.options.prefix``, ``cache.prefix`` |
| spring    | ``{key_prefix}{key}`` (key: ``cache::id``)  | ``spring.cache.redis.key-prefix``           |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

FRAMEWORKS = ("django", "rails", "laravel", "spring")
FORMATS = ("plain", *FRAMEWORKS)


@dataclass(frozen=True)
class KeyFormat:
    """One framework's key form with the application's prefix(es) and version."""

    name: str = "plain"
    key_prefix: str = ""
    version: int = 1
    connection_prefix: str = ""

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ValueError(f"key format: expected one of {list(FORMATS)}, got {self.name!r}")
        for label, text in (("key_prefix", self.key_prefix),
                            ("connection_prefix", self.connection_prefix)):
            if "{" in text or "}" in text:
                raise ValueError(f"{label} {text!r}: a prefix cannot hold '{{' or '}}' (they "
                                 "delimit template fields)")

    def full(self, key: str) -> str:
        """The Redis key of ``key`` (a template's text or a rendered key) as the framework's
        cache stores it."""
        if self.name == "django":          # django.core.cache.backends.base.default_key_func
            return f"{self.key_prefix}:{self.version}:{key}"
        if self.name == "rails":           # ActiveSupport::Cache::Store#namespace_key
            return f"{self.key_prefix}:{key}" if self.key_prefix else key
        if self.name == "laravel":         # the Redis connection's prefix, then the store's
            return f"{self.connection_prefix}{self.key_prefix}{key}"
        if self.name == "spring":          # CacheKeyPrefix: [key-prefix]cacheName::key
            return f"{self.key_prefix}{key}"
        return key


def spring_key(cache_name: str, args: Sequence[str]) -> str:
    """The key template Spring's cache abstraction gives ``@Cacheable(cacheNames=...)`` with
    the default key generator: ``cache::arg`` for one argument, ``cache::SimpleKey [a,b]``
    for several (``SimpleKey.toString``). ``args`` are template fields or texts."""
    if not args:
        raise ValueError("spring_key: a cached method without arguments has one key "
                         "(SimpleKey []) that no row can name")
    body = args[0] if len(args) == 1 else "SimpleKey [" + ",".join(args) + "]"
    return f"{cache_name}::{body}"
