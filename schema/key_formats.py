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
from typing import Callable, Sequence


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
        framework = FRAMEWORK.get(self.name)
        return key if framework is None else framework.stored(self, key)


@dataclass(frozen=True)
class Framework:
    """What cachesync knows of one web framework's cache, in one place."""

    name: str
    stored: Callable[[KeyFormat, str], str]     # the Redis key its cache stores for a key
    row_key: Callable[[str, list[str]], str]    # `init`'s key of a table's row (placeholders)
    bookkeeping: tuple[str, ...]    # its own tables, left out by `init` (globs, any case)
    settings: tuple[str, ...]       # `init`'s `framework:` lines: where the app sets them


def plain_row_key(table: str, placeholders: list[str]) -> str:
    """``table:id`` (``table:a:b`` for a composite key): `init`'s key of a row in the plain
    form."""
    return f"{table}:" + ":".join(placeholders)


def spring_key(cache_name: str, args: Sequence[str]) -> str:
    """The key template Spring's cache abstraction gives ``@Cacheable(cacheNames=...)`` with
    the default key generator: ``cache::arg`` for one argument, ``cache::SimpleKey [a,b]``
    for several (``SimpleKey.toString``). ``args`` are template fields or texts."""
    if not args:
        raise ValueError("spring_key: a cached method without arguments has one key "
                         "(SimpleKey []) that no row can name")
    body = args[0] if len(args) == 1 else "SimpleKey [" + ",".join(args) + "]"
    return f"{cache_name}::{body}"


FRAMEWORK: dict[str, Framework] = {f.name: f for f in (
    Framework(
        "django",
        # django.core.cache.backends.base.default_key_func
        lambda f, key: f"{f.key_prefix}:{f.version}:{key}",
        plain_row_key,
        ("django_migrations", "django_session", "django_admin_log", "django_content_type",
         "django_site", "django_cache*", "auth_*"),
        ("  key_prefix: \"\"      # CACHES['default']['KEY_PREFIX']",
         "  version: 1          # CACHES['default']['VERSION'] (or CACHESYNC_FRAMEWORK_VERSION)")),
    Framework(
        "rails",
        # ActiveSupport::Cache::Store#namespace_key
        lambda f, key: f"{f.key_prefix}:{key}" if f.key_prefix else key,
        # Rails.cache.fetch(record) -> authors/1
        lambda table, placeholders: f"{table}/" + "/".join(placeholders),
        ("schema_migrations", "ar_internal_metadata", "active_storage_*", "action_text_*",
         "action_mailbox_*", "solid_queue_*", "solid_cache_*", "solid_cable_*"),
        ("  key_prefix: \"\"      # the cache store's namespace: (none: \"\")",)),
    Framework(
        "laravel",
        # the Redis connection's prefix, then the store's
        lambda f, key: f"{f.connection_prefix}{f.key_prefix}{key}",
        plain_row_key,
        ("migrations", "failed_jobs", "jobs", "job_batches", "password_reset_tokens",
         "password_resets", "personal_access_tokens", "sessions", "cache", "cache_locks",
         "telescope_*", "pulse_*"),
        ("  connection_prefix: laravel_database_   # database.redis.options.prefix (REDIS_PREFIX)",
         "  key_prefix: laravel_cache_           # cache.prefix (CACHE_PREFIX)")),
    Framework(
        "spring",
        # CacheKeyPrefix: [key-prefix]cacheName::key
        lambda f, key: f"{f.key_prefix}{key}",
        # @Cacheable("authors") -> authors::1 (SimpleKey [a,b] for a composite key)
        spring_key,
        ("flyway_schema_history", "databasechangelog", "databasechangeloglock",
         "spring_session", "spring_session_attributes", "batch_*", "qrtz_*", "shedlock"),
        ("  key_prefix: \"\"      # spring.cache.redis.key-prefix (none: \"\")",)),
)}
FRAMEWORKS = tuple(FRAMEWORK)
FORMATS = ("plain", *FRAMEWORKS)

