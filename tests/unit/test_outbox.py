"""The outbox's pure parts: input validation, row -> event, unconfirmed sends, one relay round."""

from __future__ import annotations

import logging

import pytest

from cachesync.consumer.core.plan import plan_batch
from cachesync.producer_outbox.outbox import (MAX_PAYLOAD_BYTES, OutboxError, OutboxRow, event_kafka_key,
                                    outbox_values, to_event)
from cachesync.config import RelaySettings
from cachesync.producer_outbox.relay import Relay, Unconfirmed, _warn_due
from cachesync.schema.errors import ConfigError, RetryableError
from cachesync.schema.event import decode, encode
from cachesync.schema.mapping import parse_mappings


@pytest.mark.parametrize("args, message", [
    (("", "1", "t", {}, ()), "aggregate_type must be a non-empty string"),
    (("a", None, "t", {}, ()), "aggregate_id must be a non-empty string"),
    (("a", "1", "t" * 65, {}, ()), "event_type is longer than 64 bytes"),
    (("a", "1", "t", {"x": {1, 2}}, ()), "not JSON-serialisable"),
    (("a", "1", "t", {"x": float("nan")}, ()), "not JSON-serialisable"),
    (("a", "1", "t", [1], ()), "must be a JSON object"),
    (("a", "1", "t", {"x": "y" * MAX_PAYLOAD_BYTES}, ()), "the limit is 900,000 bytes"),
    (("a", "1", "t", {}, "one-key"), "not one string"),
    (("a", "1", "t", {}, ["ok", ""]), "keys must be non-empty strings"),
    (("a", "1", "t", {}, ["ok", "cachesync:ver:ok"]), "under 'cachesync:', cachesync's own"),
])
def test_emit_input_is_refused_with_a_clear_message(args, message):
    with pytest.raises(OutboxError, match=message):
        outbox_values(*args)


def test_valid_input_becomes_column_values():
    assert outbox_values("board", 7, "bumped", {"n": 1}, ["k:1", "k:1", "k:2"]) == (
        "board", "7", "bumped", '{"n":1}', '["k:1", "k:2"]')
    assert outbox_values("board", "x", "t", None, ())[3:] == (None, None)


ROW = OutboxRow(seq=42, event_id="e" * 32, aggregate_type="board", aggregate_id="7",
                event_type="bumped", payload='{"n": 1}', cache_keys='["lb:7", "page:home"]',
                created_ts=1700000000.5, attempts=1)


def test_row_becomes_an_outbox_change_event_that_round_trips():
    event = to_event(ROW, "app", "db:3306")
    assert (event.id, event.source.kind, event.table, event.op) == ("e" * 32, "outbox", "board",
                                                                    "update")
    assert event.pk == (("aggregate_id", "7"),) and event.after == {"n": 1}
    assert event.keys == ("lb:7", "page:home") and event.extra == {"event_type": "bumped"}
    assert decode(encode(event)) == event
    assert event_kafka_key(ROW, "app") == "app.board:7"


def test_consumer_invalidates_the_allowed_explicit_keys_of_an_aggregate():
    # issue 15: explicit keys need the aggregate type's allow-list (they were deleted unchecked)
    mappings = parse_mappings({"app.users": {"keys": ["user:{id}"]},
                               "app.board": {"explicit_keys": ["lb:{board}", "page:home"]}})
    plan = plan_batch([to_event(ROW, "app", "s")], mappings)
    assert plan.keys == ["lb:7", "page:home"] and not plan.poison
    no_keys = OutboxRow(**{**ROW.__dict__, "cache_keys": None})
    unmapped = parse_mappings({"app.users": {"keys": ["user:{id}"]}})
    assert plan_batch([to_event(no_keys, "app", "s")], unmapped).poison  # unknown table: DLQ
    [(_, refused)] = plan_batch([to_event(ROW, "app", "s")], unmapped).poison
    assert refused.reason == "key_not_allowed"                 # no allow-list: refused


def test_unconfirmed_tracks_sends_acks_and_failures():
    u = Unconfirmed()
    assert u.add("a", 0.0) and u.add("b", 1.0)
    assert not u.add("a", 2.0)                 # still in flight: a re-claim only renews
    assert (u.pending, u.oldest_age(10.0)) == (2, 10.0)
    u.acked("a")
    u.failed("b", RuntimeError("x"))
    u.acked("b")                               # a late ack of a failed send is ignored
    assert u.take_acked() == ["a"] and u.take_acked() == []
    u.restore_acked(["a"])
    assert u.take_acked() == ["a"]
    assert [f[0] for f in u.take_failures()] == ["b"] and u.pending == 0


@pytest.mark.parametrize("attempts, expected", [(1, False), (4, False), (5, True), (6, False),
                                                (10, True)])
def test_warning_at_the_nth_attempt_and_every_n_after(attempts, expected):
    assert _warn_due(attempts, 5) is expected


@pytest.mark.parametrize("field, value", [("burst_limit", 0), ("max_unconfirmed", 0),
                                          ("redeliver_interval_s", 0.0), ("retention_s", -1.0)])
def test_relay_options_are_validated(field, value):
    with pytest.raises(ConfigError, match=f"relay.{field}"):
        RelaySettings(**{field: value})


class FakeStore:
    def __init__(self, rows):
        self.rows, self.marked, self.claims = list(rows), [], []

    def claim(self, limit, lease_s):
        self.claims.append(limit)
        out, self.rows = self.rows[:limit], self.rows[limit:]
        return out

    def mark_published(self, ids):
        self.marked.extend(ids)
        return len(ids)

    def purge(self, retention_s, batch, by_created=False):
        return 0

    def close(self):
        pass


class FakePublisher:
    def __init__(self):
        self.sent = []

    def send(self, topic, key, value, msg_id, on_ack, on_error):
        self.sent.append((key, msg_id, on_ack, on_error))

    def close(self, timeout_s):
        self.closed = True


def rows(n):
    return [OutboxRow(**{**ROW.__dict__, "seq": i, "event_id": f"{i:032x}"}) for i in range(n)]


def test_a_round_is_bounded_and_marks_only_acknowledged_rows():
    store, pub = FakeStore(rows(10)), FakePublisher()
    relay = Relay(store, lambda: pub, RelaySettings(burst_limit=4, max_unconfirmed=6), "t", "app",
                  "s")
    assert relay.round() == 4
    assert relay.round() == 2                  # only 2 more fit under max_unconfirmed
    assert relay.round() == 0 and store.claims == [4, 2]
    pub.sent[0][2]()                           # Kafka acks the first send
    pub.sent[1][3](RuntimeError("broker gone"))
    with pytest.raises(RetryableError, match="did not acknowledge 1 outbox event"):
        relay.round()
    assert store.marked == [f"{0:032x}"] and pub.closed   # a fresh producer next round


def test_rows_leased_again_warn_once_per_round_naming_the_most_retried(caplog):
    leased = [OutboxRow(**{**ROW.__dict__, "seq": i, "event_id": f"{i:032x}", "attempts": a})
              for i, a in enumerate([1, 3, 6, 4])]
    relay = Relay(FakeStore(leased), FakePublisher, RelaySettings(warn_after_attempts=3), "t",
                  "app", "s")
    with caplog.at_level(logging.WARNING, logger="cachesync.producer_outbox.relay"):
        relay.round()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"2 outbox event(s) leased again without a confirmed publish; the most "
                        f"retried: {2:032x} (seq 2, {ROW.aggregate_type} {ROW.aggregate_id}) "
                        f"at attempt 6"]


@pytest.mark.parametrize("name, quoted", [
    ("cachesync_outbox", "`cachesync_outbox`"),
    ("app.cachesync_outbox", "`app`.`cachesync_outbox`"),
    ("app$1.t_2", "`app$1`.`t_2`"),
])
def test_the_outbox_table_name_is_quoted_never_pasted(name, quoted):
    from cachesync.producer_outbox.outbox import _table_name
    assert _table_name(name) == quoted


# issue 15: a configured name must match the identifier pattern (it was only quoted, so a
# name such as "o`; DROP ..." was accepted and quoted rather than refused)
@pytest.mark.parametrize("name", ["", "x" * 65, "a\0b", "o`; DROP TABLE users; --", "a.b.c",
                                  "app.", "my-outbox", "outbox ", 42])
def test_a_table_name_that_is_not_an_identifier_is_refused(name):
    from cachesync.producer_outbox.outbox import OutboxError, _table_name
    with pytest.raises(OutboxError, match="table: .* is not a table name"):
        _table_name(name)


def test_ensure_outbox_table_refuses_a_bad_name_before_any_sql():
    from cachesync.producer_outbox.outbox import OutboxError, ensure_outbox_table

    class NoSQL:
        def cursor(self):
            raise AssertionError("no SQL may run")
    with pytest.raises(OutboxError, match="is not a table name"):
        ensure_outbox_table(NoSQL(), "x`; DROP TABLE t; --")
