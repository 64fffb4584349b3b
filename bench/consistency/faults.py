"""The fault classes of the consistency lab, and the per-writer injector that makes them.

Each class names what goes wrong; every strategy runs under the same class with the same
probabilities. The faults are made on real services: a crashed writer's cache step is
never sent, a lost cache call is never sent, an outside write is a real UPDATE without
any cache step, replica reads go to the devstack's MariaDB replica (real replication
lag), hot rows are real row-lock contention.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Callable

log = logging.getLogger("bench.consistency")

P_FAULT = 0.02          # crash after commit, lost cache call: 2 % of writes (calls)
OUTSIDE_SHARE = 0.10    # share of the updates made by a batch job that never touches the cache


@dataclasses.dataclass(frozen=True)
class Faults:
    """One fault class: what the workload injects."""

    name: str
    what: str
    crash_p: float = 0.0          # the writer commits, then dies before its cache step
    cache_fail_p: float = 0.0     # each SET/DEL a writer sends is lost (logged, ignored)
    outside_share: float = 0.0    # updates made without any cache step (a batch job)
    replica_reads: bool = False   # readers fill from the replica
    hot_rows: bool = False        # 8 writers on 4 rows instead of 2 writers on 32


CLASSES = (
    Faults("none", "no fault: the racing workload alone (control)"),
    Faults("crash", f"writer dies after commit, before its cache step ({P_FAULT:.0%})",
           crash_p=P_FAULT),
    Faults("cache_fail", f"writer's SET/DEL lost, logged and ignored ({P_FAULT:.0%})",
           cache_fail_p=P_FAULT),
    Faults("outside_writes", f"{OUTSIDE_SHARE:.0%} of updates by a batch job (no cache step)",
           outside_share=OUTSIDE_SHARE),
    Faults("replica_lag", "readers fill from the MariaDB replica", replica_reads=True),
    Faults("hot_rows", "8 writers on 4 rows", hot_rows=True),
    Faults("all", "all of the above at once", crash_p=P_FAULT, cache_fail_p=P_FAULT,
           outside_share=OUTSIDE_SHARE, replica_reads=True, hot_rows=True),
)


def shape(base: dict, faults: Faults) -> dict:
    """The workload's size under ``faults``: hot rows means 8 writers on 4 rows, twice the rate."""
    if not faults.hot_rows:
        return dict(base)
    return {**base, "rows": 4, "writers": 8, "write_rate": 2 * base["write_rate"]}


class Injector:
    """One writer's dice: whether it crashes, whether a cache call is lost, whether a write
    is an outside write. Counts what it injected (a run with no fault proves nothing)."""

    def __init__(self, faults: Faults, rng: random.Random):
        self.faults, self.rng = faults, rng
        self.counts = {"crashes": 0, "lost_cache_calls": 0, "outside_writes": 0}

    def outside(self) -> bool:
        return self._roll(self.faults.outside_share, "outside_writes")

    def crashed(self) -> bool:
        return self._roll(self.faults.crash_p, "crashes")

    def cache_call(self, fn: Callable, *args) -> None:
        """Send ``fn(*args)`` unless the call is lost, as a timeout the app logs and ignores."""
        if self._roll(self.faults.cache_fail_p, "lost_cache_calls"):
            log.debug("cache call %s%r lost (injected timeout), ignored", fn.__name__, args)
            return
        fn(*args)

    def _roll(self, p: float, counter: str) -> bool:
        hit = p > 0 and self.rng.random() < p
        self.counts[counter] += hit
        return hit


def injected(injectors: list[Injector]) -> dict:
    """The faults several writers' injectors made, summed."""
    total = {"crashes": 0, "lost_cache_calls": 0, "outside_writes": 0}
    for inj in injectors:
        for k, v in inj.counts.items():
            total[k] += v
    return total
