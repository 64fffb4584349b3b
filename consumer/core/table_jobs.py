"""Table-level invalidation off the row stream: which scan an event belongs to, and how far
offsets may be committed while scans run (pure; consumer.table_jobs runs the scans)."""

from __future__ import annotations

import enum
import hashlib
from typing import Iterable, Mapping

TopicPartition = tuple[str, int]


class JobState(enum.Enum):
    RUN = "run"          # the scan is ours to run (new, ours already, or its owner's lease ran out)
    WAIT = "wait"        # another consumer's scan of the same event is under way
    DONE = "done"        # the event's scan completed: nothing left to do


def job_id(event) -> str:
    """The scan of a table-level event, the same for each of its partition copies (their
    message ids differ by partition): its source position, row index and table."""
    s = event.source
    material = f"{s.server}|{s.position}|{s.row_index}|{event.db}.{event.table}"
    return hashlib.blake2b(material.encode("utf-8"), digest_size=16).hexdigest()


def held_back(offsets: Mapping[TopicPartition, int],
              holds: Iterable[tuple[TopicPartition, int]]) -> dict[TopicPartition, int]:
    """``offsets`` to commit, none past a held record: a partition holding the record at
    offset ``o`` (a table event whose scan has not completed) commits at most ``o``, so a
    restart delivers that event again and its scan is not lost."""
    out = dict(offsets)
    for tp, offset in holds:
        if tp in out and out[tp] > offset:
            out[tp] = offset
    return out
