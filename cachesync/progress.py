"""Progress of a long command: a bar on a terminal, periodic log lines otherwise.

A bar is drawn only when stderr is a terminal and the logs are plain text; without a
terminal (a Job, a pipe) or under ``--log-json`` the same progress goes out as a log line
every ``interval_s`` (a JSON line with a ``progress`` object under ``--log-json``), and once
more at the end, so a long ``audit`` or ``dedup purge`` is never silent.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

import click

from cachesync import logs

log = logging.getLogger("cachesync.progress")
INTERVAL_S = 5.0


class Progress:
    """``with Progress("dedup purge", total) as p: p.update(n)``; ``total`` may be None."""

    def __init__(self, label: str, total: int | None = None, interval_s: float = INTERVAL_S,
                 show: bool = True, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.done = label, total, 0
        self._interval, self._clock, self._show = interval_s, clock, show
        self._bar = None
        self._started = self._last = clock()

    def __enter__(self) -> "Progress":
        if self._show and sys.stderr.isatty() and not logs.json_enabled():
            self._bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr)
            self._bar.__enter__()
        return self

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._show and self._clock() - self._last >= self._interval:
            self._last = self._clock()
            self._line()

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self._show and exc[0] is None:
            self._line(final=True)

    def _line(self, final: bool = False) -> None:
        elapsed = self._clock() - self._started
        of = f" of {self.total:,}" if self.total is not None else ""
        log.info("%s: %s%s%s in %.1fs", self.label, "done, " if final else "", f"{self.done:,}",
                 of, elapsed, extra={"progress": {"label": self.label, "done": self.done,
                                                  "total": self.total, "elapsed_s": round(elapsed, 1),
                                                  "final": final}})
