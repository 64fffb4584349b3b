"""The parts of the tailer's flushes a poll has not brought yet (``schema.flushes``).

A source that polled fewer records than it asked for (no backlog) looks at the last record
of each partition polled: when it carries a ``flush`` header, the flush's other partitions
that this consumer is assigned should end with the same flush (or a later one of the same
tailer process) too. Those that do not are still on their way, a fetch response behind.
"""

from __future__ import annotations

from typing import Callable, Collection, Sequence

from cachesync.consumer.core.offsets import Record
from cachesync.schema.flushes import HEADER, parse


def unfinished(records: Sequence[Record],
               assigned: Callable[[], Collection[tuple[str, int]]]) -> set[tuple[str, int]]:
    """The (topic, partition)s, among ``assigned()`` (called only when a flush is marked),
    whose end of a flush marked in ``records`` has not been polled."""
    last: dict[tuple[str, int], Record] = {}
    for r in records:
        last[(r.topic, r.partition)] = r
    marks = {}
    for tp, r in last.items():
        for name, value in r.headers:
            if name == HEADER:
                flush = parse(value)
                if flush is not None:
                    marks[tp] = flush
                break
    if not marks:
        return set()
    owned = assigned()
    missing = set()
    for (topic, _), flush in marks.items():
        for partition in flush.partitions:
            tp = (topic, partition)
            if tp in marks:
                there = marks[tp]
                if there.token == flush.token and there.seq >= flush.seq:
                    continue
            if tp in owned:
                missing.add(tp)
    return missing
