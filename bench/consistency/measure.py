"""The lab's verdicts, pure: commit history, stale reads beyond the window, nines, targets.

A read is **stale** when the value it returned had been superseded by a commit more than
the lag window before the read started. The window is the slowest commit -> invalidation
that cachesync's own probes measured in the same run and fault class; every strategy gets
the same allowance. A key is **left stale** when, once writes stopped and the window
passed, its cached value differs from the database's: it stays wrong until its TTL.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right

from bench.common import median
from cachesync.consumer.core.nines import nines, share  # noqa: F401 - the lab's nines


class History:
    """Per row, the commit time of each ``seq``; per value, the row and seq that wrote it.

    Thread-safe: writers record commits while readers' values are judged later.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._commits: dict[int, dict[int, float]] = {}
        self._value: dict[int, tuple[int, int]] = {}

    def base(self, row: int, seq: int, value: int) -> None:
        """The row's state before the measured interval (committed long ago)."""
        self.commit(row, seq, value, float("-inf"))

    def commit(self, row: int, seq: int, value: int, at: float) -> None:
        with self._lock:
            self._commits.setdefault(row, {})[seq] = at
            self._value[value] = (row, seq)

    def superseded_at(self, value: int) -> float | None:
        """When the commit after the one that wrote ``value`` happened; None while it is
        the row's newest (or was never committed: a SET before its commit)."""
        with self._lock:
            where = self._value.get(value)
            if where is None:
                return None
            row, seq = where
            return self._commits[row].get(seq + 1)

    def writes(self) -> int:
        """Commits made in the measured interval (not the base states)."""
        with self._lock:
            return sum(1 for seqs in self._commits.values() for t in seqs.values()
                       if t != float("-inf"))


def stale_reads(reads: list[tuple[float, int, bool]], history: History,
                window: float) -> list[tuple[float, int, bool, float]]:
    """The reads ``(start, value, loaded)`` whose value was superseded more than ``window``
    before they started, each with its age (start - superseded at)."""
    out = []
    for start, value, loaded in reads:
        at = history.superseded_at(value)
        if at is not None and at < start - window:
            out.append((start, value, loaded, start - at))
    return out


def window(probe_lags: list[float]) -> float:
    """The lag window: the slowest commit -> key-gone that cachesync's probes measured.
    Raises ValueError when there was no probe (no honest window without one)."""
    if not probe_lags:
        raise ValueError("no cachesync probe completed: no lag window to judge by")
    return max(probe_lags)


def verdict(reads: list[tuple[float, int, bool]], history: History, window_s: float,
            left: list[float | None], seconds: float) -> dict:
    """One cell's figures. ``left`` holds, per key left stale, how long ago its value
    was superseded at the final check (None if unknown)."""
    stale = stale_reads(reads, history, window_s)
    ages = [age for *_, age in stale] + [a for a in left if a is not None]
    return {"reads": len(reads), "reads_per_s": round(len(reads) / seconds, 1),
            "writes": history.writes(), "stale_reads": len(stale),
            "stale_read_ratio": len(stale) / len(reads) if reads else None,
            "nines": nines(len(stale), len(reads)),
            "stale_from_db_load": sum(1 for _, _, loaded, _ in stale if loaded),
            "stale_keys_after": len(left),
            "longest_stale_ms": round(max(ages) * 1000, 1) if ages else 0.0}


FIELDS = ("stale_read_ratio", "stale_reads", "reads", "reads_per_s", "writes",
          "stale_keys_after", "longest_stale_ms", "stale_from_db_load")


def medians(cells: list[dict]) -> dict:
    """Median of each figure over runs; nines from the median ratio."""
    out = {f: median([c[f] for c in cells if c.get(f) is not None]) for f in FIELDS}
    ratio = out["stale_read_ratio"]
    out["nines"] = round(-math.log10(ratio), 2) if ratio else None
    out["injected"] = {k: median([c["injected"][k] for c in cells])
                       for k in cells[0].get("injected", {})}
    lags = [c["replica_lag_ms"] for c in cells if c.get("replica_lag_ms")]
    if lags:
        out["replica_lag_ms"] = {"p50": median([x["p50"] for x in lags]),
                                 "max": max(x["max"] for x in lags)}
    return out


def target(table: dict[str, dict], cachesync: str, others: tuple[str, ...]) -> dict:
    """The issue's targets for one fault class: ``cachesync`` leaves 0 stale keys; where any
    other strategy leaves stale keys or reads, its stale-read ratio is 0 or >= 100x lower
    than the best other's."""
    mine = table[cachesync]
    best = min(others, key=lambda s: table[s]["stale_read_ratio"])
    best_ratio = table[best]["stale_read_ratio"]
    others_fail = any(table[s]["stale_keys_after"] or table[s]["stale_read_ratio"]
                      for s in others)
    ratio = mine["stale_read_ratio"]
    if not ratio:
        reads = "zero against zero" if not best_ratio else "met (zero)"
    elif not others_fail:
        reads = "missed: others zero, cachesync not"
    else:
        reads = "met" if best_ratio and best_ratio / ratio >= 100 else "missed"
    return {"stale_keys_zero": mine["stale_keys_after"] == 0,
            "stale_reads": reads, "best_other": best, "best_other_ratio": best_ratio,
            "cachesync_ratio": ratio,
            "advantage": round(best_ratio / ratio, 1) if ratio and best_ratio else None,
            "others_leave_stale": others_fail}


# -- the large cells: per change and per read, in nines ------------------------------------
GRACE_S = 1.0      # after an outage, every delayed invalidation must land within this


def supersessions(base: dict[int, tuple[int, int]],
                  changes: list[tuple[int, int, int, float]]) -> dict[int, float]:
    """value -> when a commit superseded it. ``base``: row -> (seq, value) before the cell;
    ``changes``: (row, seq, value, commit time). A value still current is absent."""
    by_row: dict[int, list[tuple[int, int, float]]] = {}
    for row, seq, value, at in changes:
        by_row.setdefault(row, []).append((seq, value, at))
    out = {}
    for row, history in by_row.items():
        history.sort()
        previous = base[row][1]
        for _, value, at in history:
            out[previous] = at
            previous = value
    return out


EXAMPLES = 20      # reads stale beyond the lag (outside skips) kept to be looked at


def stale_read_counts(times, values, superseded: dict[int, float], window: float,
                      skip: list[tuple[float, float]] = ()) -> dict:
    """Reads ``(times[i], values[i])`` judged against the history: ``stale`` when the value
    had been superseded before the read started, ``stale_beyond_lag`` when more than
    ``window`` before. Reads starting inside a ``skip`` interval are counted apart
    (``skipped``) and judged in the ``*_in_skip`` figures. The first EXAMPLES reads stale
    beyond the lag outside a skip are kept (``beyond_lag_examples``)."""
    reads = stale = beyond = 0
    skipped = stale_skip = beyond_skip = 0
    examples: list[tuple[float, int, float]] = []     # (read, value, superseded at)
    get = superseded.get
    spans = merged(skip)
    starts, ends = [a for a, _ in spans], [b for _, b in spans]
    for t, value in zip(times, values):
        at = get(value)
        i = bisect_right(starts, t) - 1 if starts else -1
        inside = i >= 0 and t <= ends[i]
        if inside:
            skipped += 1
        else:
            reads += 1
        if at is None or at >= t:
            continue
        late = at < t - window
        if inside:
            stale_skip += 1
            beyond_skip += late
        else:
            stale += 1
            beyond += late
            if late and len(examples) < EXAMPLES:
                examples.append((t, value, at))
    return {"reads": reads, "stale": stale, "stale_beyond_lag": beyond,
            "skipped": skipped, "stale_in_skip": stale_skip, "stale_beyond_lag_in_skip": beyond_skip,
            "beyond_lag_examples": examples}


def merged(spans) -> list[tuple[float, float]]:
    """Intervals sorted and overlapping ones joined."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def deadlines(commits: list[float], outages: list[tuple[float, float]],
              grace: float = GRACE_S) -> list[tuple[float, bool]]:
    """Per commit, when its invalidation must have landed, and whether an outage moved that:
    ``grace`` after the commit, or after the end of an outage that began before then and
    ended after the commit (outages chain)."""
    out = []
    spans = sorted(outages)
    for commit in commits:
        due, moved = commit + grace, False
        for start, end in spans:
            if start <= due and end >= commit:
                due, moved = max(due, end + grace), True
        out.append((due, moved))
    return out


def read_figure(counts: dict) -> dict:
    """Per read: stale reads and stale reads beyond the lag, as shares (nines, bounds)."""
    n = counts["reads"]
    return {"reads": n, "stale": share(counts["stale"], n),
            "beyond_lag": share(counts["stale_beyond_lag"], n)}
