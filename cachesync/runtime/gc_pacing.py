"""The garbage collector's pace for the hot loops (consumer engine, tailer, publisher child).

Each event the consumer decodes, and each row the tailer reads, allocates a handful of
container objects (a dict per image, the event and its source, tuples, a delivery).
CPython runs a young-generation collection every 700 such allocations and, every
tenth and hundredth of those, an older one that walks every object still alive: at
full speed the collector took about half of the consumer's decode and a quarter of its
planning (``bench/``'s consumer data, decoded and planned offline: 11.5 -> 5.9 and
6.3 -> 4.5 µs per event with it off). None of these objects is part of a reference
cycle, so collecting less often frees nothing later than it would have been freed.

``paced()`` freezes what exists when the loop starts (modules, settings, mappings: never
garbage, so no collection should walk them again; whatever garbage is among them is
freed when the loop ends) and runs the young collection every
``YOUNG_THRESHOLD`` allocations instead, for as long as the loop runs. Cycles are
still collected, so memory stays bounded: at most a young generation of that many
objects waits for its collection. Nested and concurrent loops in one process
(tests, benchmarks, direct mode) share one setting; the last to leave restores the
thresholds it found.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 50_000          # allocations between young collections (CPython: 700)
OLDER_THRESHOLDS = (20, 20)       # young collections per middle one, middle per full one

_lock = threading.Lock()
_users = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def paced() -> Iterator[None]:
    """Run the block with the collector paced for a hot loop (see the module)."""
    global _users, _saved
    with _lock:
        if _users == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            if _saved[0] > 0:            # 0: collection is off; leave the process's choice
                gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
