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


class Terminal:
    """A stand-in for stderr on a terminal (isatty), keeping what was written."""

    def __init__(self):
        self.written = []

    def isatty(self):
        return True

    def write(self, text):
        self.written.append(text)

    def flush(self):
        pass

    def text(self):
        return "".join(self.written)


def test_on_a_terminal_an_unknown_total_is_a_running_count(monkeypatch):
    terminal, clock = Terminal(), Clock()
    monkeypatch.setattr("sys.stderr", terminal)
    with Progress("relay purge (rows)", clock=clock) as bar:
        for _ in range(3):
            clock.now += 1
            bar.update(500)
    assert "\rrelay purge (rows): 1,500 in 3s" in terminal.text()
    assert terminal.text().endswith("\n")


def test_a_total_given_later_turns_the_count_into_a_bar(monkeypatch):
    terminal, clock = Terminal(), Clock()
    monkeypatch.setattr("sys.stderr", terminal)
    with Progress("dlq replay cachesync.dlq (dead letters read)", clock=clock) as bar:
        clock.now += 1
        bar.update(1)
        bar.set_total(4)
        bar.update(3)
    assert "dead letters read): 1 in 1s" in terminal.text()
    assert "100%" in terminal.text()        # click's bar, drawn to the end


def test_without_a_terminal_a_later_total_shows_in_the_lines(caplog):
    clock = Clock()
    caplog.set_level(logging.INFO, logger="cachesync.progress")
    with Progress("audit d.users (rows)", interval_s=5, clock=clock) as bar:
        bar.set_total(200)
        clock.now += 6
        bar.update(200)
    lines = [r for r in caplog.records if r.name == "cachesync.progress"]
    assert [r.getMessage() for r in lines] == ["audit d.users (rows): 200 of 200 in 6.0s",
                                               "audit d.users (rows): done, 200 of 200 in 6.0s"]
    assert lines[-1].progress == {"label": "audit d.users (rows)", "done": 200, "total": 200,
                                  "elapsed_s": 6.0, "final": True}
