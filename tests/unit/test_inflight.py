"""Checkpoints advance only to the end of the unbroken prefix of fully acked transactions."""

import pytest

from cachesync.producer_outbox.inflight import InflightTracker


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


def test_the_oldest_unsettled_send_is_the_earliest_still_unacknowledged():
    t = InflightTracker()
    a, b, c = t.open(1), t.open(2), t.open(3)
    assert t.oldest_unsettled() is None
    t.sent(b, 1, at=20.0)
    t.sent(a, 2, at=30.0)          # an earlier group sending later (an XA group released)
    t.sent(c, 1)                   # unstamped: not judged
    assert t.oldest_unsettled() == 20.0
    t.acked(b)
    assert t.oldest_unsettled() == 30.0
    t.sent(a, 1, at=40.0)          # still unsettled since 30
    t.acked(a, 3)
    assert t.oldest_unsettled() is None
    t.sent(a, 1, at=50.0)          # settled, then sending again: a new start
    assert t.oldest_unsettled() == 50.0
