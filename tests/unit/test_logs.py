"""Log flood control: a library's repeated error is shown once per window, then summarised."""

from __future__ import annotations

import io
import logging

from cachesync import logs


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _record(name: str, msg: str, *args, level=logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_library_message_repeated_within_the_window_is_held_back_then_counted():
    clock = Clock()
    f = logs.LibraryRepeats(window_s=30, clock=clock)
    first = _record("kafka.conn", "%s: connect attempt returned error %s", "broker", 111)
    assert f.filter(first)
    for i in range(227):
        clock.now = i * 0.1
        assert not f.filter(_record("kafka.conn", "%s: connect attempt returned error %s", "b", 111))
    clock.now = 31.0
    summary = _record("kafka.conn", "%s: connect attempt returned error %s", "broker", 111)
    assert f.filter(summary)
    assert summary.getMessage() == ("broker: connect attempt returned error 111 "
                                    "[227 more like this in the last 30s]")


def test_different_messages_levels_and_loggers_are_kept_apart():
    f = logs.LibraryRepeats(window_s=30, clock=Clock())
    assert f.filter(_record("kafka.conn", "a"))
    assert f.filter(_record("kafka.conn", "b"))
    assert f.filter(_record("kafka.client", "a"))
    assert f.filter(_record("kafka.conn", "a", level=logging.WARNING))
    assert not f.filter(_record("kafka.conn", "a"))


def test_cachesyncs_own_records_always_pass():
    f = logs.LibraryRepeats(window_s=30, clock=Clock())
    for _ in range(5):
        assert f.filter(_record("cachesync.consumer.engine", "redis delete failed"))
        assert f.filter(_record("cachesync", "stopping"))


def test_debug_level_shows_every_repeat(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.setup("DEBUG")
        for _ in range(3):
            logging.getLogger("kafka.conn").error("connect failed")
        assert stream.getvalue().count("connect failed") == 3
        stream.truncate(0)
        logs.setup("INFO")
        for _ in range(3):
            logging.getLogger("kafka.conn").error("connect failed")
        assert stream.getvalue().count("connect failed") == 1
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
