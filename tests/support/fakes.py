"""Fakes of the consumer's ports for unit tests, shared between test modules."""

from __future__ import annotations

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.schema.errors import RetryableError


class FlakyCache(MemoryCache):
    """Fails the first ``failures`` deletes, as Redis being down would."""

    def __init__(self, failures: int = 0):
        super().__init__()
        self.failures = failures

    def delete(self, keys):
        if self.failures:
            self.failures -= 1
            raise RetryableError("redis down")
        return super().delete(keys)
