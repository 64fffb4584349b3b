"""Running components in threads of one process: restarts, one stop, one outcome.

Used by ``cachesync run`` (tailer + consumer) and ``cachesync run --direct``
(tailer + in-process engine). Signals are handled by the caller in the main
thread; everything here is stoppable from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol

from cachesync.schema.retry import RetryPolicy
from cachesync.schema.errors import ConfigError, FatalError, RetryableError

log = logging.getLogger(__name__)

RESTART_POLICY = RetryPolicy(base_s=0.5, cap_s=30.0)
# a tailer that ran this long before failing was healthy: the restart after it backs off as
# after a first failure, not as after every failure since the process started (one failure
# a day would otherwise wait up to RESTART_POLICY's cap, its changes uninvalidated)
HEALTHY_RUN_S = 60.0
JOIN_TIMEOUT_S = 60.0


class Runnable(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...


class RestartingTailer:
    """Runs a freshly built tailer until a clean stop; a transient failure restarts it from
    the stored checkpoint (never skipping), a fatal one (also when it is the cause of a
    transient-looking publish failure, e.g. Redis refusing credentials in direct mode)
    propagates."""

    def __init__(self, build: Callable[[], Runnable], policy: RetryPolicy = RESTART_POLICY,
                 healthy_s: float = HEALTHY_RUN_S, clock: Callable[[], float] = time.monotonic):
        """``healthy_s``: a tailer that ran at least this long before failing starts the
        backoff over (see HEALTHY_RUN_S)."""
        self._build, self._policy = build, policy
        self._healthy_s, self._clock = healthy_s, clock
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._current: Runnable | None = None
        self.last: Runnable | None = None

    def run(self) -> None:
        """Run tailers until one stops cleanly or stop() is called; raises what is not
        transient. Each failure in a row waits longer (the policy's backoff); a tailer that
        ran ``healthy_s`` before it failed starts the count over."""
        attempt = 0
        while not self._stopping.is_set():
            started = self._clock()
            try:
                self._run_one()
                return
            except Exception as e:
                attempt = 1 if self._clock() - started >= self._healthy_s else attempt + 1
                if not self._policy.should_retry(e, attempt):
                    raise
                wait = self._policy.backoff(attempt)
                log.warning("tailer failed (failure %d in a row), restarting from the "
                            "checkpoint in %.2fs: %s", attempt, wait, e)
                if self._stopping.wait(wait):
                    return

    def _run_one(self) -> None:
        if self._stopping.is_set():
            return
        self._start_one()
        try:
            self.last.run()
        except RetryableError as e:
            if isinstance(e.__cause__, FatalError):
                raise e.__cause__ from e
            raise

    def _start_one(self) -> None:
        tailer = self._build()
        with self._lock:
            self._current = self.last = tailer
            if self._stopping.is_set():   # stop() arrived while we were building
                tailer.stop()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._current is not None:
                self._current.stop()


class Component:
    """A Runnable in a thread that records how it ended and signals ``done``."""

    def __init__(self, name: str, runnable: Runnable, done: threading.Event):
        self.name, self.runnable, self._done = name, runnable, done
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"cachesync-{name}", daemon=True)

    def _main(self) -> None:
        try:
            self.runnable.run()
        except BaseException as e:  # noqa: BLE001 - re-raised by run_together in the main thread
            self.error = e
        finally:
            self._done.set()


def run_together(components: dict[str, Runnable], install_stop: Callable[[Callable], None]) -> None:
    """Run every component in its own thread until one ends or stop is requested, then
    stop all and wait for them. Raises the most severe error any of them raised
    (configuration > fatal > transient > other)."""
    done = threading.Event()
    threads = [Component(name, r, done) for name, r in components.items()]
    install_stop(done.set)
    for c in threads:
        c.thread.start()
    done.wait()
    for c in threads:
        c.runnable.stop()
    for c in threads:
        c.thread.join(JOIN_TIMEOUT_S)
        if c.thread.is_alive():
            raise RetryableError(f"{c.name} did not stop within {JOIN_TIMEOUT_S:.0f}s")
    errors = [c.error for c in threads if c.error is not None]
    for kind in (ConfigError, FatalError, RetryableError, BaseException):
        for error in errors:
            if isinstance(error, kind):
                raise error
    log.info("stopped: %s", ", ".join(c.name for c in threads))
