"""Log flood control: a library's repeated error is shown once per window, then summarised."""

from __future__ import annotations

import io
import logging

from cachesync.runtime import logs


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


def _json_lines(role: str, emit) -> list[dict]:
    import json
    import sys
    stream = io.StringIO()
    saved = sys.stderr
    sys.stderr = stream
    try:
        logs.setup("INFO", json_format=True, role=role)
        emit()
    finally:
        sys.stderr = saved
        logs.setup("INFO")
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_role_host_pid_and_the_named_table_and_partition():
    import os
    import socket
    log = logging.getLogger("cachesync.test")
    lines = _json_lines("consume", lambda: (
        log.warning("shop.users: null_key", extra={"table": "shop.users"}),
        log.warning("dead-lettering", extra={"partition": 2}),
        logging.getLogger("kafka.conn").error("broker down")))
    assert [(l["role"], l["host"], l["pid"]) for l in lines] == \
        [("consume", socket.gethostname(), os.getpid())] * 3
    assert lines[0]["table"] == "shop.users" and "partition" not in lines[0]
    assert lines[1]["partition"] == 2 and "table" not in lines[1]


def test_the_final_line_is_json_under_log_json_and_plain_otherwise(capsys):
    lines = _json_lines("replay", lambda: logs.final("stopped: Kafka unavailable", 1))
    assert lines == [{**lines[0], "level": "critical", "msg": "stopped: Kafka unavailable",
                      "exit_code": 1, "role": "replay"}]
    logs.setup("INFO")
    logs.final("stopped: Kafka unavailable", 1)
    assert capsys.readouterr().err == "cachesync: stopped: Kafka unavailable\n"


def test_a_child_process_logs_as_its_parent():
    seen = []
    _json_lines("tail", lambda: seen.append(logs.current_setup()))
    assert seen == [("INFO", True, "tail")]


def test_a_library_exception_is_one_line_and_ours_keep_their_traceback():
    try:
        raise ConnectionResetError("peer closed 50% of it")
    except ConnectionResetError:
        import sys
        exc = sys.exc_info()
    f = logs.LibraryRepeats()
    library = logging.LogRecord("kafka.net.transport", logging.ERROR, __file__, 1,
                                "%s: Error receiving network data closing socket", ("conn",), exc)
    assert f.filter(library)
    assert library.exc_info is None and library.getMessage() == (
        "conn: Error receiving network data closing socket "
        "(ConnectionResetError: peer closed 50% of it)")
    ours = logging.LogRecord("cachesync.consumer", logging.ERROR, __file__, 1, "failed", (), exc)
    assert f.filter(ours) and ours.exc_info is exc
