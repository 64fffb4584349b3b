"""Retry and bounded purge, shared by the producer and the consumer: pure, no I/O library.

``call`` is the one retry loop: transient errors (the policy's list) are retried with a
jittered, capped backoff, each wait logged; a stop request during a wait ends it with
``Stopped``. ``purge_in_batches`` is the one "delete old rows until a short batch" loop.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from cachesync.schema.errors import RetryableError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Stopped(Exception):
    """Stop was requested while a call waited to retry; the call did not complete."""


@dataclass(frozen=True)
class RetryPolicy:
    """Full-jitter exponential backoff (AWS architecture blog), capped.

    ``max_attempts=None`` retries forever (the engines' choice for transient
    outages: never skip); each wait is logged by ``call``.
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


def call(fn: Callable[[], T], what: str, stop: threading.Event | None = None,
         policy: RetryPolicy = RetryPolicy(),
         on_retry: Callable[[BaseException, int], None] | None = None) -> T:
    """``fn()``, retried while the policy calls its error transient.

    Raises the error the policy gives up on (or does not retry), or ``Stopped`` when
    ``stop`` is set during a wait. ``on_retry(error, attempt)`` runs before each wait.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as e:
            attempt += 1
            if not policy.should_retry(e, attempt):
                raise
            wait = policy.backoff(attempt)
            if on_retry is not None:
                on_retry(e, attempt)
            log.warning("%s failed (attempt %d), retrying in %.2fs: %s", what, attempt, wait, e)
            if (stop or threading.Event()).wait(wait):
                raise Stopped(f"stop requested while retrying {what}") from e


def purge_in_batches(purge: Callable[[int], int], batch: int,
                     max_batches: int | None = None) -> int:
    """Call ``purge(batch)`` until it deletes fewer than ``batch`` rows; returns the total.

    ``max_batches`` bounds one run (None: until a short batch), so a large backlog
    of old rows never holds up the caller for long; the next run goes on.
    """
    total, runs = 0, 0
    while max_batches is None or runs < max_batches:
        deleted = purge(batch)
        total, runs = total + deleted, runs + 1
        if deleted < batch:
            break
    return total
