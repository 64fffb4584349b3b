"""Table-level invalidations run beside the row stream: one scan per table-level event.

A TRUNCATE, DROP, RENAME or statement-logged write of a mapped table reaches every
partition as a copy of one event. ``TableInvalidator.submit`` (called by the applier in
batch order) stores the table fence at once (update mode: from then on a write of an older
row of the table is a delete) and hands the scan of the table's keys to a worker thread, so
the rows of every other table keep flowing meanwhile. The copies share one scan: the first
one's (``consumer.core.table_jobs.job_id``); the others, here or in another consumer of the
group, wait for its record in the job store (``RedisTableJobs``) to say done. Different events of one table that arrive while
its scan runs share the next scan (``consumer.core.scan_queue.ScanQueue``), whose end records
each of them as done.

Until its scan completes, each copy holds its partition's offset (``holds``): the engine
commits no offset past it, so a crash mid-scan delivers the event again and the scan runs
again (its owner's lease in the job store runs out). Fill leases of the table are removed
before its keys (``RedisCache.invalidate_table``), so a ``read_through`` fill that read the
row before the change is refused.

A scan shares Redis with the row stream: after each of its round trips it pauses as
``consumer.core.scan_pace.ScanPace`` says (``consumer.table_scan_busy_share``), so the
other tables' claims, deletes and confirms find Redis free most of the time.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from cachesync.consumer.core.plan import EventPlan
from cachesync.consumer.core.scan_pace import ScanPace
from cachesync.consumer.core.scan_queue import ScanQueue
from cachesync.consumer.core.table_jobs import JobState, TopicPartition, job_id
from cachesync.consumer.core.writes import padded
from cachesync.schema.retry import RetryPolicy, Stopped, call

log = logging.getLogger(__name__)

# how long a scan is its owner's without a renewal (the engine passes consumer.claim_lease_s:
# a crashed owner's scan is taken over as soon as its claims are); renewed every third of it
JOB_LEASE_S = 5.0
# how often a copy waiting for another consumer's scan asks the job store again
WAIT_POLL_S = 0.5
SCAN_WORKERS = 2        # table events scanned at the same time (each one SCAN loop)
KEEP_SCANS = 256        # completed scans remembered (metrics; copies arriving late)


@dataclass
class TableScan:
    """One table-level event's scan as this consumer sees it (metrics and logs)."""

    job: str
    table: str
    reason: str
    started: float
    keys: int = 0                   # keys removed so far
    finished: float | None = None
    reused: bool = False            # another consumer's scan did the work
    failure: BaseException | None = None    # what stopped it (not Stopped): raised by check()
    fence: str | None = None        # update mode: the event's padded version (newer keys stay)
    copies: int = 1                 # events it covers: partition copies, and later events of
    #                                 the table that waited for it
    joined: list = field(default_factory=list)  # later events of the table it covers (job ids)
    mapping: object = None          # the table's mapping (what the scan renders)
    paused: float = 0.0             # seconds the scan paused to leave Redis to the row stream
    done: threading.Event = field(default_factory=threading.Event)


def paced_by(options) -> dict:
    """TableInvalidator's pace and SCAN COUNT from the consumer's settings."""
    return {"pace": ScanPace(options.table_scan_busy_share, options.table_scan_keys_per_s),
            "scan_count": options.table_scan_count}


class TableInvalidator:
    """Runs table-level scans on worker threads; ``holds()`` says which offsets wait for one."""

    def __init__(self, cache, jobs, stats, retry: RetryPolicy = RetryPolicy(),
                 stop: threading.Event | None = None, lease_s: float = JOB_LEASE_S,
                 clock: Callable[[], float] = time.monotonic, workers: int = SCAN_WORKERS,
                 pace: ScanPace = ScanPace(), scan_count: int | None = None):
        self._cache, self._jobs, self._stats, self._retry = cache, jobs, stats, retry
        self._pace = pace
        # SCAN COUNT per call; None: the cache's own default
        self._scan_count = {} if scan_count is None else {"scan_count": scan_count}
        self._stop = stop or threading.Event()
        self._lease_s, self._clock = lease_s, clock
        self._owner = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._scans: dict[str, TableScan] = {}          # job id -> its scan (kept for metrics)
        self._holds: list[tuple[TopicPartition, int, TableScan]] = []
        self._queue = ScanQueue()       # per table: the scan under way, the one events join
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cachesync-table")

    def submit(self, ep: EventPlan, origin: tuple[TopicPartition, int] | None) -> None:
        """Fence the table now (update mode) and start or join the event's scan; ``origin``
        ((topic, partition), offset) of its record is held until the scan completes."""
        event, mapping = ep.event, ep.table
        fence = padded(event.version) if mapping.updates else None
        if fence is not None:
            self._call("redis table fence", lambda: self._cache.fence_table(mapping, fence))
        job = job_id(event)
        with self._lock:
            scan = self._scans.get(job)
            if scan is None or (scan.done.is_set() and scan.finished is None):
                scan = self._coalesced(job, ep, fence)
            else:
                scan.copies += 1
            if origin is not None and not scan.done.is_set():
                self._holds.append((origin[0], origin[1], scan))
        self._stats.table_invalidations += 1

    def _coalesced(self, job: str, ep: EventPlan, fence: str | None) -> TableScan:
        """The scan of a new table event (under the lock), as ``ScanQueue`` decides: the
        table's waiting scan, which starts after this event and so covers it, or a new one,
        started now or once the table's running scan ends."""
        event, mapping = ep.event, ep.table
        table = event.qualified_table
        admission = self._queue.add(table, job)
        scan = self._scans.get(admission.scan) if admission.scan != job else None
        if scan is not None:
            scan.copies += 1
            if fence is not None and (scan.fence is None or fence > scan.fence):
                scan.fence = fence
        else:
            scan = TableScan(job, table, event.extra.get("reason", "?"), self._clock(),
                             fence=fence, mapping=mapping)
        self._scans[job] = scan
        if admission.start:
            self._start(scan)
        self._forget_old()
        return scan

    def _start(self, scan: TableScan) -> None:
        self._pool.submit(self._run, scan)

    def _starting(self, scan: TableScan) -> None:
        """The scan runs: later events of its table wait for the next one."""
        with self._lock:
            scan.joined = list(self._queue.started(scan.table, scan.job))

    def _ended(self, scan: TableScan) -> None:
        """The scan ended: the table's next one starts."""
        with self._lock:
            waiting = self._queue.ended(scan.table, scan.job)
            if waiting is not None and not self._stop.is_set():
                self._start(self._scans[waiting])

    def _forget_old(self) -> None:
        finished = [j for j, s in self._scans.items() if s.finished is not None]
        for j in finished[:max(0, len(finished) - KEEP_SCANS)]:
            del self._scans[j]

    def check(self) -> None:
        """Raise what made a scan fail (an error retries could not cure: the engine stops,
        the event's offset uncommitted)."""
        for scan in self.scans():
            if scan.failure is not None:
                raise scan.failure

    def holds(self) -> list[tuple[TopicPartition, int]]:
        """(partition, offset) of each table event whose scan has not completed."""
        with self._lock:
            self._holds = [h for h in self._holds if h[2].finished is None]
            return [(tp, offset) for tp, offset, _ in self._holds]

    def scans(self) -> list[TableScan]:
        """Every scan this consumer started or waited for, newest last (metrics)."""
        with self._lock:
            return list(self._scans.values())

    def wait_idle(self, timeout_s: float) -> bool:
        """Whether every scan completed within ``timeout_s`` (tests, shutdown)."""
        deadline = self._clock() + timeout_s
        for scan in self.scans():
            if not scan.done.wait(max(0.0, deadline - self._clock())):
                return False
        return all(s.finished is not None for s in self.scans())

    def close(self) -> None:
        """Stop: a scan under way gives up at its next chunk, its offset still held (the
        next start runs it again)."""
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- the worker ------------------------------------------------------------------
    def _run(self, scan: TableScan) -> None:
        mapping = scan.mapping
        self._starting(scan)
        try:
            state, removed = self._begin(scan)
            owned = self._begin_joined(scan)
            if state is JobState.DONE and not owned:
                scan.reused = True
            else:
                mine = ([scan.job] if state is not JobState.DONE else []) + owned
                removed = self._scan(scan, mapping, mine)
                for job in mine:    # done only now that the scan covering them all ended
                    self._call("table scan record", lambda: self._jobs.finish(
                        job, self._owner, removed))
            self._finished(scan, removed)
        except Stopped:
            pass
        except Exception as e:
            log.error("table-level invalidation of %s failed; its offset stays held and the "
                      "next start runs it again: %s", scan.table, e)
            scan.failure = e
        finally:
            scan.done.set()
            self._ended(scan)

    def _begin_joined(self, scan: TableScan) -> list[str]:
        """The joined events' jobs this scan records as done: those no other consumer ran or
        runs (the scan covers them all, whoever records them)."""
        with self._lock:
            joined = list(scan.joined)
        return [job for job in joined if self._call("table scan record", lambda: self._jobs.begin(
            job, self._owner, self._lease_s))[0] is JobState.RUN]

    def _begin(self, scan: TableScan) -> tuple[JobState, int]:
        """Wait while another consumer's scan of the event is under way."""
        while True:
            state, removed = self._call("table scan record", lambda: self._jobs.begin(
                scan.job, self._owner, self._lease_s))
            if state is not JobState.WAIT:
                return state, removed
            if self._stop.wait(WAIT_POLL_S):
                raise Stopped("stop requested while waiting for another consumer's scan")

    def _scan(self, scan: TableScan, mapping, jobs: list[str]) -> int:
        """Remove the table's keys, keeping the leases of ``jobs`` (the events this consumer
        records the scan for) while it runs."""
        renewed = [self._clock()]

        def alive() -> None:
            """Stop when asked; keep the jobs' leases while the scan runs (both passes)."""
            if self._stop.is_set():
                raise Stopped("stop requested during a table-level scan")
            if self._clock() - renewed[0] > self._lease_s / 3:
                for job in jobs:
                    self._jobs.renew(job, self._owner, self._lease_s)
                renewed[0] = self._clock()

        def progress(n: int) -> None:
            scan.keys += n
            alive()

        def pace(call_s: float, examined: int) -> None:
            pause = self._pace.pause_after(call_s, examined)
            if pause > 0:
                scan.paused += pause
                self._stop.wait(pause)
            alive()
        log.info("table-level change of %s (%s): scanning for its keys", scan.table, scan.reason)

        def attempt() -> int:
            scan.keys = 0
            return self._cache.invalidate_table(mapping, None, progress, keep_newer=scan.fence,
                                                pace=pace, **self._scan_count)
        return self._call("redis table invalidation", attempt)

    def _finished(self, scan: TableScan, removed: int) -> None:
        scan.keys = removed
        scan.finished = self._clock()
        took = scan.finished - scan.started
        if scan.reused:
            self._stats.table_scans_reused += 1
            log.warning("table-level change of %s (%s): invalidated by another consumer's scan "
                        "(%d keys removed); waited %.1fs", scan.table, scan.reason, removed, took)
        else:
            self._stats.table_scans += 1
            self._stats.table_keys_deleted += removed
            log.warning("table-level change of %s (%s): invalidated every key of its templates, "
                        "%d removed in %.1fs (%.1fs of it paused to leave Redis to the row "
                        "stream; %d table events covered)", scan.table, scan.reason, removed, took,
                        scan.paused, scan.copies)

    def _call(self, what: str, fn):
        return call(fn, what, self._stop, self._retry)
