"""Checkpoints advance only to the end of the unbroken prefix of fully acked transactions."""

import pytest

from cachesync.producer_outbox.publish.inflight import InflightTracker


@pytest.mark.parametrize("script, expected", [
    # (txn, action) steps; txns: "open" implicitly in name order at first use.
    ([("t1", "send"), ("t1", "close"), ("t1", "ack")], "t1"),
    ([("t1", "send"), ("t1", "ack")], None),                          # not closed: mid-transaction
    ([("t1", "send"), ("t1", "close"), ("t2", "send"), ("t2", "close"), ("t2", "ack")], None),
    ([("t1", "send"), ("t1", "close"), ("t2", "send"), ("t2", "close"), ("t2", "ack"),
      ("t1", "ack")], "t2"),
    ([("t1", "send"), ("t1", "send"), ("t1", "close"), ("t1", "ack")], None),
    ([("t1", "close"), ("t2", "send"), ("t2", "close")], "t1"),      # empty txn is safe at once
])
def test_advance(script, expected):
    tracker, _ = _play(script)
    assert tracker.advance() == expected


def _play(script) -> tuple[InflightTracker, dict]:
    """A tracker after the (txn, action) steps; the txns by name."""
    tracker, txns = InflightTracker(), {}
    for name, action in script:
        if name not in txns:
            txns[name] = tracker.open(name)
        {"send": tracker.sent, "ack": tracker.acked, "close": tracker.close}[action](txns[name])
    return tracker, txns


def test_advance_pops_what_it_returned_and_counts_pending():
    tracker = InflightTracker()
    t1 = tracker.open("p1")
    tracker.sent(t1)
    tracker.close(t1, "p1-end")
    assert tracker.pending == 1 and tracker.advance() is None
    tracker.acked(t1)
    assert tracker.advance() == "p1-end" and tracker.advance() is None
    assert tracker.pending == 0 and tracker.open_transactions == 0


def test_ack_without_send_is_a_bug():
    tracker = InflightTracker()
    with pytest.raises(ValueError):
        tracker.acked(tracker.open("p"))


@pytest.mark.parametrize("script, expected", [
    # progress per transaction (the outbox): every closed, fully acked one, in commit order
    ([("t1", "send"), ("t1", "close"), ("t2", "send"), ("t2", "close"), ("t2", "ack")], ["t2"]),
    ([("t1", "send"), ("t1", "close"), ("t2", "send"), ("t2", "close"), ("t2", "ack"),
      ("t1", "ack")], ["t1", "t2"]),
    ([("t1", "send"), ("t1", "ack")], []),                          # not closed
    ([("t1", "send"), ("t1", "send"), ("t1", "close"), ("t1", "ack")], []),
    ([("t1", "close"), ("t2", "send"), ("t2", "close")], ["t1"]),
])
def test_take_acknowledged(script, expected):
    tracker, txns = _play(script)
    assert tracker.take_acknowledged() == expected
    assert tracker.take_acknowledged() == []                     # each is taken once
    assert tracker.open_transactions == len(txns) - len(expected)


def test_sends_are_stalled_since_the_last_acknowledgement_or_the_send_that_found_none_in_flight():
    t = InflightTracker()
    a, b = t.open(1), t.open(2)
    assert t.stalled_since() is None
    t.sent(b, 1, at=20.0)          # nothing in flight: the wait starts here
    t.sent(a, 2, at=None)          # more in flight: no clock needed
    assert t.stalled_since() == 20.0
    t.acked(b, 1, at=35.0)         # progress, whatever group it belongs to
    assert t.stalled_since() == 35.0
    t.acked(a, 2, at=40.0)
    assert t.stalled_since() is None            # nothing in flight: nothing to judge
    t.sent(a, 1, at=50.0)          # sending again after all settled: a new start
    assert t.stalled_since() == 50.0
