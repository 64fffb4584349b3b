"""Consistency stated in nines, pure: the share of changes applied within a time bound.

A change counts as applied within ``T`` when its commit -> invalidation (or fenced write)
lag is at most ``T``; the figure is that share as a ratio and as nines,
``-log10(late / changes)``. When no change was late the nines are unbounded, so the figure
carries the 95 % upper bound on the late share instead: 3/n (the rule of three), which
says "at least ``-log10(3/n)`` nines". The lab (``bench.consistency``) and the monitors
(``cachesync consume``, ``cachesync monitor``, the Spark driver) compute them here, so
both speak one language.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

BOUNDS_S = (0.1, 1.0)            # the time bounds every figure is stated at
QUANTILES = (0.5, 0.99, 0.999)   # commit -> invalidation percentiles reported beside them
RESOLUTION = 0.01                # a quantile's relative error (bucket width, log scale)
FLOOR_S = 1e-4                   # lags at or below this share the first bucket
_LOG_STEP = math.log1p(RESOLUTION)


def nines(failed: int, total: int) -> float | None:
    """-log10 of the failed share: 2.0 = 99 %; None when nothing failed (or nothing was
    counted): see :func:`upper_bound` for what can be said then."""
    if not total or not failed:
        return None
    return round(-math.log10(failed / total), 2) + 0.0     # all failed: 0.0, never -0.0


def upper_bound(failed: int, total: int) -> float | None:
    """The 95 % upper bound on the failed share when none of ``total`` failed: 3/n (the rule
    of three); None when some failed (the share itself is the figure) or nothing counted."""
    if not total or failed:
        return None
    return 3 / total


def share(failed: int, total: int) -> dict:
    """One figure: how many, how many failed, the share that did not, its nines, and where
    nothing failed the 95 % upper bound on the failed share and the nines it supports."""
    bound = upper_bound(failed, total)
    return {"n": total, "failed": failed,
            "ratio": (total - failed) / total if total else None,
            "nines": nines(failed, total),
            "upper_bound": bound,
            "nines_at_least": round(-math.log10(bound), 2) if bound and bound < 1 else None}


def label(seconds: float) -> str:
    """``0.1`` -> ``"100ms"``, ``1.0`` -> ``"1s"``: a bound as a figure's name."""
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"


def quantile_name(q: float) -> str:
    """The key of quantile ``q`` in :meth:`LagFigures.figures`: ``p99.9_ms`` for 0.999."""
    return f"p{q * 100:g}_ms"


def _bucket(lag: float) -> int:
    if lag <= FLOOR_S:
        return 0
    return 1 + int(math.log(lag / FLOOR_S) / _LOG_STEP)


def _upper_edge(bucket: int) -> float:
    return FLOOR_S * math.exp(bucket * _LOG_STEP)


class LagFigures:
    """Commit -> apply lags of changes: exact counts over each bound, and a log-scale
    histogram (buckets 1 % wide) for the percentiles, so memory stays bounded whatever
    the traffic. A change never applied is added with its lag so far (it is late)."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS_S):
        self.bounds = bounds
        self.count = 0
        self.late = dict.fromkeys(bounds, 0)    # bound -> changes applied later than it
        self._buckets: Counter = Counter()
        self.longest = 0.0

    def add(self, lags: Iterable[float]) -> None:
        """Add a batch's lags (a negative lag counts as 0)."""
        bounds, late, buckets = self.bounds, self.late, self._buckets
        count, longest = self.count, self.longest
        for lag in lags:
            if not lag > 0.0:
                lag = 0.0
            count += 1
            for bound in bounds:
                if lag > bound:
                    late[bound] += 1
            buckets[_bucket(lag)] += 1
            if lag > longest:
                longest = lag
        self.count, self.longest = count, longest

    def merge(self, other: "LagFigures") -> None:
        """Add ``other``'s changes (same bounds) to these."""
        self.count += other.count
        for bound in self.bounds:
            self.late[bound] += other.late[bound]
        self._buckets.update(other._buckets)
        self.longest = max(self.longest, other.longest)

    def quantile(self, q: float) -> float | None:
        """The lag at or below which a share ``q`` of the changes were applied (rounded up
        to its bucket's upper edge: at most 1 % high); None before the first change."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for bucket in sorted(self._buckets):
            seen += self._buckets[bucket]
            if seen >= rank:
                return min(_upper_edge(bucket), self.longest) if bucket else FLOOR_S
        return self.longest

    def figures(self) -> dict:
        """``{"changes", "within": {"100ms": share, "1s": share}, "p50_ms", "p99_ms",
        "p99.9_ms", "max_ms"}``."""
        out = {"changes": self.count,
               "within": {label(b): share(self.late[b], self.count) for b in self.bounds}}
        for q in QUANTILES:
            value = self.quantile(q)
            out[quantile_name(q)] = round(value * 1000, 1) if value is not None else None
        out["max_ms"] = round(self.longest * 1000, 1) if self.count else None
        return out


def summary(figures: dict) -> str:
    """One line for a log: ``1,234 changes: 99.9 % (3.0 nines) within 100ms, ... p99.9 850 ms``."""
    parts = []
    for name, s in figures["within"].items():
        if s["ratio"] is None:
            continue
        nines_text = (f"{s['nines']:g} nines" if s["nines"] is not None
                      else f">= {s['nines_at_least']:g} nines, 95 % bound" if s["nines_at_least"]
                      else "none late")
        parts.append(f"{s['ratio'] * 100:.4g} % ({nines_text}) within {name}")
    pct = ", ".join(f"{k[:-3]} {figures[k]:g} ms" for k in map(quantile_name, QUANTILES)
                    if figures.get(k) is not None)
    return f"{figures['changes']:,} changes: " + "; ".join(parts) + (f"; {pct}" if pct else "")
