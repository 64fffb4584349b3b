"""ActiveStandby: tail only while the lock is held; stand down when it is lost (fakes: no I/O)."""

from __future__ import annotations

import threading

import pytest

from cachesync.producer_outbox.binlog.reading import LostPositionError
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.standby import ActiveStandby, while_held
from cachesync.supervisor import RestartingTailer


class FakeLock:
    name = "cachesync:tailer:t"

    def __init__(self, grants: int):
        self.grants, self.holding, self.released = grants, False, 0

    def acquire(self, stop: threading.Event) -> bool:
        if self.grants == 0 or stop.is_set():
            return False
        self.grants -= 1
        self.holding = True
        return True

    def try_acquire(self) -> bool:
        return self.acquire(threading.Event())

    def held(self) -> bool:
        return self.holding

    def release(self) -> None:
        self.holding = False
        self.released += 1


class Tailer:
    """Runs until stop(); ``on_run`` may act (lose the lock, raise) while it runs."""

    def __init__(self, on_run=None):
        self._stop, self._on_run = threading.Event(), on_run

    def run(self):
        if self._on_run:
            self._on_run()
        assert self._stop.wait(10), "never stopped"

    def stop(self):
        self._stop.set()


def standby(lock, make_tailer) -> ActiveStandby:
    return ActiveStandby(lock, lambda: RestartingTailer(while_held(lock, make_tailer)),
                         check_every_s=0.01)


def test_a_lost_lock_stops_the_tailer_and_waits_for_the_lock_again():
    lock = FakeLock(grants=2)
    terms = []

    def make():
        terms.append(1)
        if len(terms) == 1:
            return Tailer(on_run=lambda: setattr(lock, "holding", False))   # cut while running
        return Tailer(on_run=runner.stop)                                  # second term: stop
    runner = standby(lock, make)
    runner.run()
    assert runner.terms == 2 and lock.released == 2


def test_a_tailer_failing_because_its_lock_was_taken_is_a_handover_not_a_crash():
    lock = FakeLock(grants=1)

    def fail_after_losing():
        lock.holding = False
        raise RuntimeError("A slave with the same server_uuid/server_id is already connected")
    runner = standby(lock, lambda: Tailer(on_run=fail_after_losing))
    runner.run()                       # returns when no more grants: stood down, no exception
    assert runner.terms == 1 and lock.released == 1


def test_a_fatal_error_while_holding_the_lock_propagates_and_releases_it():
    lock = FakeLock(grants=1)

    def fatal():
        raise FatalError("binlog_format is STATEMENT")
    runner = standby(lock, lambda: Tailer(on_run=fatal))
    with pytest.raises(FatalError):
        runner.run()
    assert lock.released == 1


def test_no_tailer_is_built_once_the_lock_is_gone():
    lock = FakeLock(grants=0)
    with pytest.raises(RetryableError, match="no longer held"):
        while_held(lock, lambda: pytest.fail("built without the lock"))()


class _Settings:
    """The one setting ResyncingTailer reads."""

    def __init__(self, on_lost_position: str):
        self.tailer = type("T", (), {"on_lost_position": on_lost_position})()


class _LosesPositionOnce:
    """A RestartingTailer stand-in whose first run finds its position purged."""

    def __init__(self):
        self.runs, self.last = 0, None

    def run(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise LostPositionError("the binlog position gtid=0-1-42 is gone from the server")

    def stop(self) -> None:
        pass


def test_a_lost_position_resyncs_inside_the_active_term_with_on_lost_position_resync(monkeypatch):
    from cachesync import resync as tail      # ResyncingTailer lives beside resync (tail, run)
    lock, inner, resyncs = FakeLock(grants=1), _LosesPositionOnce(), []
    monkeypatch.setattr(tail, "resync", lambda settings: resyncs.append(lock.held()))
    ActiveStandby(lock, lambda: tail.ResyncingTailer(_Settings("resync"), inner)).run()
    assert resyncs == [True]            # resynced once, while this process held the lock
    assert inner.runs == 2              # then tailed on from the stored position


def test_a_lost_position_stops_the_tailer_with_on_lost_position_fail(monkeypatch):
    from cachesync import resync as tail
    lock, resyncs = FakeLock(grants=1), []
    monkeypatch.setattr(tail, "resync", lambda settings: resyncs.append(settings))
    with pytest.raises(LostPositionError):
        ActiveStandby(lock, lambda: tail.ResyncingTailer(_Settings("fail"),
                                                         _LosesPositionOnce())).run()
    assert resyncs == [] and lock.released == 1


def test_a_process_that_gets_the_lock_at_once_leaves_the_check_to_its_tailer():
    """The tailer checks the server before it reads: no second check before it."""
    checked, ran = [], []
    lock = FakeLock(grants=1)

    def make():
        ran.append(len(checked))
        return Tailer(on_run=lambda: lock.release())
    ActiveStandby(lock, lambda: RestartingTailer(while_held(lock, make)),
                  preflight=lambda: checked.append(1), check_every_s=0.01).run()
    assert ran == [0] and checked == []


class HeldElsewhere(FakeLock):
    def try_acquire(self) -> bool:
        return False


def test_a_standby_checks_the_server_before_it_waits_and_stops_at_once_if_it_never_could():
    lock = HeldElsewhere(grants=0)
    with pytest.raises(FatalError, match="lacks REPLICATION SLAVE"):
        ActiveStandby(lock, lambda: pytest.fail("never built"),
                      preflight=lambda: (_ for _ in ()).throw(
                          FatalError("the cachesync user lacks REPLICATION SLAVE"))).run()


class Refused(FakeLock):
    def try_acquire(self) -> bool:
        raise FatalError("MySQL refused: Access denied for user 'weak' to database 'cachesync'")


@pytest.mark.parametrize("grants_missing, message", [
    (True, "lacks REPLICATION SLAVE"),      # the check names what is missing
    (False, "Access denied"),               # else the lock's own refusal
])
def test_a_lock_the_server_refuses_is_explained_by_the_check(grants_missing, message):
    def preflight():
        if grants_missing:
            raise FatalError("the cachesync user lacks REPLICATION SLAVE")
    with pytest.raises(FatalError, match=message):
        ActiveStandby(Refused(grants=0), lambda: pytest.fail("never built"),
                      preflight=preflight).run()
