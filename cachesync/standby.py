"""Active and standby tailers: run the tailer only while this process holds the tailer lock.

``ActiveStandby`` waits for the lock (a standby), runs a fresh ``RestartingTailer`` while it
holds it, and checks every second that it still does. A lost lock (the lock connection was
killed or cut off) stops the tailer at once and goes back to waiting, so another process
can take over from the stored checkpoint.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from cachesync.producer_outbox.binlog.leader import CHECK_EVERY_S, TailerLock
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.supervisor import RestartingTailer

log = logging.getLogger(__name__)


def while_held(lock: TailerLock, build: Callable[[], object]) -> Callable[[], object]:
    """``build``, refused (RetryableError) once ``lock`` is no longer held: a restart after a
    transient failure must not open a binlog stream that a new active tailer now owns."""
    def checked(*args):
        if not lock.held():
            raise RetryableError(f"tailer lock {lock.name} is no longer held here")
        return build(*args)
    return checked


class ActiveStandby:
    """A Runnable: ``run()`` until ``stop()``; raises what the running tailer raises."""

    def __init__(self, lock: TailerLock, build: Callable[[], RestartingTailer],
                 preflight: Callable[[], object] = lambda: None,
                 check_every_s: float = CHECK_EVERY_S):
        """``preflight`` runs before waiting for the lock: a standby that could never tail
        (wrong password, missing grant) stops at once with its FatalError instead of waiting.
        A process that gets the lock at once skips it: the tailer it runs checks the same
        server before it reads (Tailer.preflight), and checking twice delays every start."""
        self._lock, self._build, self._check_every_s = lock, build, check_every_s
        self._preflight = preflight
        self._stopping = threading.Event()
        self._guard = threading.Lock()
        self._current: RestartingTailer | None = None
        self.terms = 0              # how often this process became the active tailer
        self.active = False         # holding the lock and tailing (else a standby)

    @property
    def last(self):
        """The last tailer built (for its counters), or None."""
        return self._current.last if self._current is not None else None

    def run(self) -> None:
        try:
            held = self._lock.try_acquire()
        except FatalError:
            # the lock's table is refused (a grant missing): the preflight names every
            # missing grant at once, and its message is the clearer one
            self._preflight()
            raise
        if not held:
            self._preflight()
        while held or self._lock.acquire(self._stopping):
            held = False
            if not self._one_term():
                return
            log.error("tailer lock %s lost (its MySQL connection was killed or cut off): "
                      "stopped tailing; waiting to become active again", self._lock.name)

    def stop(self) -> None:
        self._stopping.set()
        with self._guard:
            if self._current is not None:
                self._current.stop()

    def _one_term(self) -> bool:
        """Tail while the lock holds; True when the lock was lost (False: stopped)."""
        supervisor, lost, ended = self._build(), threading.Event(), threading.Event()
        with self._guard:
            self._current, self.terms, self.active = supervisor, self.terms + 1, True
            if self._stopping.is_set():
                supervisor.stop()
        watch = threading.Thread(target=self._watch, args=(supervisor, lost, ended),
                                 name="cachesync-tailer-lock", daemon=True)
        watch.start()
        try:
            supervisor.run()
        except Exception as e:
            # Once the lock is gone a new active tailer connects with the same server id and
            # the server cuts this one's binlog stream: that failure is the handover, not a fault.
            if not (lost.is_set() or not self._lock.held()):
                raise
            lost.set()
            log.info("tailer stopped after losing its lock: %s", e)
        finally:
            self.active = False
            ended.set()
            watch.join()
            self._lock.release()
        return lost.is_set() and not self._stopping.is_set()

    def _watch(self, supervisor: RestartingTailer, lost: threading.Event,
               ended: threading.Event) -> None:
        while not ended.wait(self._check_every_s):
            if not self._lock.held():
                lost.set()
                supervisor.stop()
                return
