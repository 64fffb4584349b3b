"""Retry policy: an explicit list of transient errors and a bounded, jittered backoff."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cachesync.schema.errors import RetryableError


@dataclass(frozen=True)
class RetryPolicy:
    """Full-jitter exponential backoff (AWS architecture blog), capped.

    ``max_attempts=None`` retries forever (the engines' choice for transient
    outages: never skip); each wait is logged by the caller.
    """

    transient: tuple[type[BaseException], ...] = (RetryableError,)
    base_s: float = 0.05
    cap_s: float = 5.0
    max_attempts: int | None = None
    rand: random.Random = field(default_factory=random.Random, compare=False)

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, self.transient)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt`` (1-based retry count)."""
        ceiling = min(self.cap_s, self.base_s * (2 ** min(attempt, 32)))
        return self.rand.uniform(0, ceiling)

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        if not self.is_transient(error):
            return False
        return self.max_attempts is None or attempt < self.max_attempts
