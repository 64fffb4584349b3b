"""How long a process took from its launch to each step of its start.

``tail`` and ``consume`` mark their steps (settings loaded, lock held, first binlog read,
first poll, ...); the last one logs a single INFO line with the time of each step since the
process was launched, so an operator sees what a restart costs and where:
``start: first poll after 0.84 s, 0.61 s CPU, 0.02 s waiting for a CPU (command 0.38,
settings 0.41, topics 0.42, metrics 0.52, engine 0.71)``; a step that ends after it (the
tailer's Kafka publisher) gets a line of its own. ``bench/start.py`` reads these lines.

"Waiting for a CPU" is how long the thread that reached the step sat runnable in the kernel's
run queue (``/proc/thread-self/schedstat``): on a busy host it is most of the wall time, and
the wall time minus it is what the same start takes where a CPU is free.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

_lock = threading.Lock()
_marks: dict[str, float] = {}
_started = threading.Event()       # set by done(): the process reads (or polls) now


_BOOT_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def _clock() -> float:
    """Seconds since boot (the clock /proc's process start times count in), or the monotonic
    clock where the system has no boot clock."""
    return time.clock_gettime(_BOOT_CLOCK)


def _launched() -> float:
    """When this process was created on :func:`_clock` (from /proc; tick precision, 10 ms),
    or when this module was imported where /proc does not say."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        try:
            with open("/proc/self/stat", "rb") as f:
                # the command name (field 2) may hold spaces: count the fields after its ')'
                ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
            return ticks / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return _IMPORTED


def launched_at() -> float:
    """When this process was created, on the wall clock."""
    return time.time() - (_clock() - _LAUNCHED)


_IMPORTED = _clock()
_LAUNCHED = _launched()     # steps are timed on the same clock: no wall-clock reading between


def mark(step: str) -> None:
    """Record ``step`` (the first time only); a step after the start's end is logged."""
    with _lock:
        if step in _marks:
            return
        _marks[step] = _clock()
    if _started.is_set():
        log.info("start: %s after %.2f s", step, _marks[step] - _LAUNCHED)


def done(step: str) -> None:
    """Record the last ``step`` of the start and log every step's time since launch, the CPU
    time this process spent until then (the part a busy host does not stretch) and how long
    this thread waited for a CPU, once."""
    cpu, waited = time.process_time(), cpu_wait_s()
    with _lock:
        if step in _marks:
            return
        _marks[step] = _clock()
        steps = sorted(_marks.items(), key=lambda kv: kv[1])
    _started.set()
    since = {name: at - _LAUNCHED for name, at in steps}
    waiting = f", {waited:.2f} s waiting for a CPU" if waited is not None else ""
    log.info("start: %s after %.2f s, %.2f s CPU%s (%s)", step, since[step], cpu, waiting,
             ", ".join(f"{name} {s:.2f}" for name, s in since.items() if name != step))


def cpu_wait_s() -> float | None:
    """Seconds this thread has spent runnable but waiting for a CPU since it began (Linux
    schedstat's run delay), or None where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def after_start(work: Callable[[], None], name: str, at_latest_s: float = 10.0) -> None:
    """Run ``work`` in a daemon thread once the start is done (or ``at_latest_s`` after this
    call, for a process that waits, such as a standby tailer): work that only reports, kept
    off the way to the first read. A failure of ``work`` is logged as a WARNING."""
    def run():
        _started.wait(at_latest_s)
        try:
            work()
        except Exception as e:
            log.warning("%s failed: %s: %s", name, type(e).__name__, e)
    threading.Thread(target=run, name=f"cachesync-{name}", daemon=True).start()


def reset() -> None:
    """Forget every step (a test process runs many commands; a real one runs one)."""
    with _lock:
        _marks.clear()
    _started.clear()


def since_launch() -> dict[str, float]:
    """Each recorded step's seconds since launch."""
    with _lock:
        return {name: round(at - _LAUNCHED, 3) for name, at in _marks.items()}
