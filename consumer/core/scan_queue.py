"""Which scan a table-level event shares (pure: the caller runs the scans).

A scan removes every key a table's templates can produce, so one that starts after an event
arrived covers it, whatever the event was. Per table, ``ScanQueue`` keeps at most one scan
running and one waiting: an event that arrives while the table's scan runs (or while the
waiting one has not started yet) joins the waiting scan, so N events of a table during one
scan cost one more scan, not N. Tables are independent: one table's scan never waits for
another's. A scan is named by the job id of the event that opened it; the events that joined
it are fixed when it starts (``started``) and are done only when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Admission:
    """What to do with an arriving event: the scan it belongs to, and whether the caller
    starts that scan now (the table has no scan running)."""

    scan: str
    start: bool


@dataclass
class _Table:
    running: str | None = None
    waiting: str | None = None
    waiting_started: bool = False       # handed to the caller to run (start=True given)
    joined: dict[str, list[str]] = field(default_factory=dict)    # scan -> later events


class ScanQueue:
    """Per-table coalescing of table-level scans: ``add`` an event, ``started`` and ``ended``
    report what the caller's workers do; each returns what to run next."""

    def __init__(self):
        self._tables: dict[str, _Table] = {}

    def add(self, table: str, job: str) -> Admission:
        """The scan the event ``job`` of ``table`` belongs to: the table's waiting scan (it
        has not started, so it covers the event), else a new one, to be started now if no
        scan of the table runs, or when the running one ends."""
        t = self._tables.setdefault(table, _Table())
        if t.waiting is not None:
            t.joined[t.waiting].append(job)
            return Admission(t.waiting, start=False)
        t.waiting, t.joined[job] = job, []
        t.waiting_started = t.running is None
        return Admission(job, start=t.waiting_started)

    def started(self, table: str, scan: str) -> tuple[str, ...]:
        """``scan`` begins its work: later events of the table wait for the next one. Returns
        the events that joined it (besides its own), all of which it covers."""
        t = self._tables[table]
        if t.waiting == scan:
            t.waiting, t.running = None, scan
        return tuple(t.joined.get(scan, ()))

    def ended(self, table: str, scan: str) -> str | None:
        """``scan`` ended (done, failed or stopped); returns the table's waiting scan if the
        caller must start it now, else None."""
        t = self._tables[table]
        t.joined.pop(scan, None)
        if t.running == scan:
            t.running = None
        if t.waiting is not None and not t.waiting_started and t.running is None:
            t.waiting_started = True
            return t.waiting
        if t.running is None and t.waiting is None:
            del self._tables[table]
        return None

    def busy(self) -> dict[str, tuple[str | None, str | None]]:
        """``{table: (running scan, waiting scan)}`` of every table with either (tests, logs)."""
        return {name: (t.running, t.waiting) for name, t in self._tables.items()}
