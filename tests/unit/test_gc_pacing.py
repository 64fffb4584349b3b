"""The collector's pace in the hot loops: set while a loop runs, restored after, cycles
still collected."""

import gc
import threading
import weakref

import pytest

from cachesync.runtime import gc_pacing
from cachesync.runtime.gc_pacing import OLDER_THRESHOLDS, YOUNG_THRESHOLD, paced
from cachesync.consumer.adapters.memory import (MemoryCache, MemoryDeadLetters,
                                                MemoryDedupStore, MemorySource)
from cachesync.consumer.engine import PythonEngine
from cachesync.schema.mapping import parse_mappings


@pytest.fixture(autouse=True)
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    assert gc_pacing._users == 0
    gc.set_threshold(*saved)


def test_paced_while_inside_and_restored_after():
    with paced():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_restored_when_the_loop_raises():
    with pytest.raises(RuntimeError):
        with paced():
            raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_and_concurrent_loops_restore_once_the_last_leaves():
    inside, leave = threading.Event(), threading.Event()

    def other_loop():
        with paced():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other_loop)
    with paced():
        t.start()
        assert inside.wait(10)
        with paced():
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD      # the others still run
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD          # the thread's loop still runs
    leave.set()
    t.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_process_with_collection_off_keeps_it_off():
    gc.set_threshold(0, 10, 10)
    with paced():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold() == (0, 10, 10)


def test_cycles_are_still_collected_without_an_explicit_collect():
    class Node:
        pass

    alive = []
    with paced():
        for _ in range(4 * YOUNG_THRESHOLD):
            n = Node()
            n.self = n                         # a cycle: only the collector frees it
            alive.append(weakref.ref(n))
            del n
        freed = sum(r() is None for r in alive)
    assert freed >= 3 * YOUNG_THRESHOLD


def test_the_engine_runs_paced_and_restores():
    seen = []

    class Source(MemorySource):
        def poll(self, max_records, timeout_s):
            seen.append(gc.get_threshold()[0])
            engine.stop()
            return []

    engine = PythonEngine(Source([]), MemoryDedupStore(), MemoryCache(), MemoryDeadLetters(),
                          parse_mappings({"shop.users": {"keys": ["user:{id}"]}}))
    engine.run()
    assert seen == [YOUNG_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)
