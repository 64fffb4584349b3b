"""One error hierarchy for cachesync: retryable, poison, fatal.

Every component classifies a failure into exactly one of these so that the
engines can decide without guessing: retry (never skip), dead-letter (and move
on), or stop loudly.
"""

from __future__ import annotations


class CachesyncError(Exception):
    """Base class of every error cachesync raises on purpose."""


class RetryableError(CachesyncError):
    """A dependency is unavailable for now (Redis, MySQL, Kafka); retry, never skip."""


class PoisonError(CachesyncError):
    """A message that can never be applied; it goes to the dead-letter topic.

    ``reason`` is a short machine-readable code, ``raw`` the original bytes.
    """

    def __init__(self, reason: str, detail: str, raw: bytes | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.raw = raw


class DecodeError(PoisonError):
    """The bytes are not a ChangeEvent this version understands."""


class UnknownTableError(PoisonError):
    """The event names a table that has no mapping."""

    def __init__(self, table: str, raw: bytes | None = None):
        super().__init__("unknown_table", f"no mapping for table {table!r}", raw)


class FatalError(CachesyncError):
    """Configuration, permissions or server settings are wrong; stop with this message."""


class ConfigError(FatalError):
    """The configuration is invalid; the message names the field."""
