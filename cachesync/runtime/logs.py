"""Logging setup: one line per meaningful event, plain or JSON."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from typing import Callable

OWN_LOGGER = "cachesync"
# A dependency's client library repeats the same error on every reconnect attempt (kafka-python:
# several lines per second while a broker is down). Above DEBUG, each repeated message of a
# library is shown once per window, then summarised with the number held back.
REPEAT_WINDOW_S = 30.0


# Record attributes copied into a JSON line when a log call passes them in ``extra``
CONTEXT_FIELDS = ("table", "partition", "exit_code", "progress")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the process's role, host and
    pid, and the table / partition / exit code the call named (``extra={"table": ...}``)."""

    def __init__(self, role: str = "") -> None:
        super().__init__()
        self.role = role
        self._process = {"role": role or "cli", "host": socket.gethostname(), "pid": os.getpid()}

    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage(), **self._process}
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def json_enabled() -> bool:
    """Whether :func:`setup` chose JSON lines (the root logger's handler formats them)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def current_setup() -> tuple[str, bool, str]:
    """The arguments of :func:`setup` in effect (a child process logs as its parent does)."""
    root = logging.getLogger()
    formats = [h.formatter for h in root.handlers if isinstance(h.formatter, JsonFormatter)]
    return (logging.getLevelName(root.getEffectiveLevel()), bool(formats),
            formats[0].role if formats else "")


def final(message: str, exit_code: int) -> None:
    """The process's last word before it exits with ``exit_code``: ``cachesync: <message>`` on
    stderr, or under ``--log-json`` a JSON line at level critical carrying the exit code."""
    if json_enabled():
        logging.getLogger(OWN_LOGGER).critical(message, extra={"exit_code": exit_code})
    else:
        sys.stderr.write(f"cachesync: {message}\n")
        sys.stderr.flush()


class LibraryRepeats(logging.Filter):
    """Lets a third-party library's message through once per ``window_s``, then once more
    with how many identical ones (same logger, level and format string) were held back.
    cachesync's own records always pass: they are written once per event already."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._window, self._clock = window_s, clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], list] = {}    # key -> [shown at, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == OWN_LOGGER or record.name.startswith(OWN_LOGGER + "."):
            return True
        key, now = (record.name, record.levelno, str(record.msg)), self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self._window:
                seen[1] += 1
                return False
            held = seen[1] if seen is not None else 0
            self._seen[key] = [now, 0]
        if held:
            record.msg = f"{record.msg} [{held} more like this in the last {self._window:.0f}s]"
        if record.exc_info:
            _exception_in_one_line(record)
        return True


def _exception_in_one_line(record: logging.LogRecord) -> None:
    """A library's exception as ``(Type: message)`` after its message instead of a traceback
    (kafka-python logs socket errors of a closing client with theirs): a user reads one line,
    and ``--log-level debug`` still shows the traceback."""
    kind, error = record.exc_info[0], record.exc_info[1]
    what = kind.__name__ if kind is not None else "error"
    record.msg = f"{record.getMessage()} ({what}: {error})" if error is not None else \
        f"{record.getMessage()} ({what})"
    record.args = None
    record.exc_info = record.exc_text = None


def setup(level: str = "INFO", json_format: bool = False, role: str = "") -> None:
    """Log to stderr at ``level``; ``DEBUG`` shows everything, every library's lines included.
    ``role`` (the command: consume, tail, ...) goes into every JSON line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(role) if json_format else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    debug = root.level <= logging.DEBUG
    if not debug:
        handler.addFilter(LibraryRepeats())
    # kafka-python logs every connection state change at INFO; python-mysql-replication its
    # whole stream configuration on every connect.
    for chatty in ("kafka", "pymysqlreplication"):
        logging.getLogger(chatty).setLevel(logging.DEBUG if debug else max(logging.WARNING, root.level))
