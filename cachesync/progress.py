"""Progress of a long command: a bar on a terminal, periodic log lines otherwise.

A bar is drawn only when stderr is a terminal and the logs are plain text; without a
terminal (a Job, a pipe) or under ``--log-json`` the same progress goes out as a log line
every ``interval_s`` (a JSON line with a ``progress`` object under ``--log-json``), and once
more at the end, so a long ``audit`` or ``dedup purge`` is never silent. When the total is
not known (yet), the terminal shows a running count instead of a bar.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

import click

from cachesync.runtime import logs

log = logging.getLogger(__name__)
INTERVAL_S = 5.0
COUNTER_REDRAW_S = 0.2      # a running count on a terminal redraws at most this often


class Progress:
    """``with Progress("dedup purge", total) as p: p.update(n)``; ``total`` may be None,
    and may be given later with :meth:`set_total` (the first part of a command that counts
    what there is to do)."""

    def __init__(self, label: str, total: int | None = None, interval_s: float = INTERVAL_S,
                 show: bool = True, clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.done = label, total, 0
        self._interval, self._clock, self._show = interval_s, clock, show
        self._terminal = False
        self._bar = None
        self._started = self._last = self._drawn = clock()

    def __enter__(self) -> "Progress":
        self._terminal = self._show and sys.stderr.isatty() and not logs.json_enabled()
        if self._terminal and self.total is not None:
            self._open_bar()
        return self

    def set_total(self, total: int) -> None:
        """The total, once known: on a terminal the running count becomes a bar."""
        self.total = total
        if self._terminal and self._bar is None:
            self._clear_counter()
            self._open_bar()
            self._bar.update(self.done)

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._terminal:
            self._draw_counter()
        elif self._show and self._clock() - self._last >= self._interval:
            self._last = self._clock()
            self._line()

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif self._terminal:
            self._draw_counter(force=True)
            sys.stderr.write("\n")
        elif self._show and exc[0] is None:
            self._line(final=True)

    def _open_bar(self) -> None:
        self._bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr)
        self._bar.__enter__()

    def _draw_counter(self, force: bool = False) -> None:
        if force or self._clock() - self._drawn >= COUNTER_REDRAW_S:
            self._drawn = self._clock()
            sys.stderr.write(f"\r{self.label}: {self.done:,} in "
                             f"{self._clock() - self._started:.0f}s")
            sys.stderr.flush()

    def _clear_counter(self) -> None:
        if self.done:
            sys.stderr.write("\r\033[K")

    def _line(self, final: bool = False) -> None:
        elapsed = self._clock() - self._started
        of = f" of {self.total:,}" if self.total is not None else ""
        log.info("%s: %s%s%s in %.1fs", self.label, "done, " if final else "", f"{self.done:,}",
                 of, elapsed, extra={"progress": {"label": self.label, "done": self.done,
                                                  "total": self.total, "elapsed_s": round(elapsed, 1),
                                                  "final": final}})
