"""Without a terminal, progress is a log line every interval and one at the end."""

import logging

from cachesync.progress import Progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_without_a_terminal_progress_is_periodic_lines_then_a_final_one(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="cachesync.progress")
    with Progress("dedup purge (records)", 30_000, interval_s=5, clock=clock) as bar:
        for _ in range(30):
            clock.now += 1
            bar.update(1000)
    lines = [r for r in caplog.records if r.name == "cachesync.progress"]
    assert [r.progress["done"] for r in lines] == [5000, 10000, 15000, 20000, 25000, 30000, 30000]
    assert [r.progress["final"] for r in lines] == [False] * 6 + [True]
    assert lines[-1].getMessage() == "dedup purge (records): done, 30,000 of 30,000 in 30.0s"


def test_hidden_progress_says_nothing(caplog):
    caplog.set_level(logging.INFO, logger="cachesync.progress")
    with Progress("replay", 10, interval_s=0, show=False) as bar:
        bar.update(10)
    assert not [r for r in caplog.records if r.name == "cachesync.progress"]
