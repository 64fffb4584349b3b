"""Table-level events on Spark: one scan of the keyspace per event, not one per partition copy.

A TRUNCATE (DROP, RENAME, a statement-logged write) of a mapped table reaches every Kafka
partition as a copy of one event, and a micro-batch's tasks meet those copies side by side
(on several executors) or one after the other. Each task hands them to the python engine's
``TableInvalidator`` (``consumer.table_jobs``) over the group's job store beside the cache
(``RedisTableJobs``): the first copy scans; every other copy, in this task or in another,
waits for that scan's record to say done and reuses it. Rows of other tables keep being
applied while a scan runs.

Spark owns the offsets and moves them only once every task of the batch returned, so a task
returns only once every scan it started or waited for completed (what the python engine
does by holding the event's offset). A task lost mid-scan is run again: its retry finds the
job record still owned by the lost attempt, and takes the scan over once that owner's lease
(``consumer.claim_lease_s``) runs out.
"""

from __future__ import annotations

import logging
import threading

from cachesync.consumer.table_jobs import TableInvalidator, paced_by

log = logging.getLogger(__name__)

# how often a task waiting for a scan says so in its log
WAIT_LOG_S = 30.0


def task_table_scans(cache, jobs, stats, stop: threading.Event, lease_s: float,
                     options=None) -> TableInvalidator:
    """The table-level scans of one task, counted in its ``stats``; ``stop`` gives them up;
    paced as ``options`` (the consumer settings) say, as in the python engine."""
    return TableInvalidator(cache, jobs, stats, stop=stop, lease_s=lease_s,
                            **(paced_by(options) if options is not None else {}))


def finish_scans(scans: TableInvalidator, batch_id: int) -> None:
    """Return once every scan the task started or waited for completed; raises what made
    one fail (the task fails, Spark runs it again and commits nothing meanwhile)."""
    while not all(scan.done.wait(WAIT_LOG_S) for scan in scans.scans()):
        running = [s.table for s in scans.scans() if not s.done.is_set()]
        log.info("batch %d: waiting for the table-level scan of %s", batch_id,
                 ", ".join(sorted(set(running))))
    scans.check()
