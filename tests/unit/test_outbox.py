"""The outbox's pure parts: input validation, row -> event; the relay through the producer's
ports (its source and checkpoint store over a fake outbox table, the memory publisher)."""

from __future__ import annotations

import logging
import threading
from itertools import islice

import pytest
from kafka.errors import KafkaTimeoutError

from cachesync.consumer.core.plan import plan_batch
from cachesync.producer_outbox.outbox import (MAX_PAYLOAD_BYTES, OutboxError, OutboxRow, event_kafka_key,
                                    outbox_values, to_event)
from cachesync.runtime.config import RelaySettings, TailerSettings
from cachesync.producer_outbox.memory import MemoryPublisher, MemorySource
from cachesync.producer_outbox.publish.pipeline import DELIVERY_TIMEOUT_S, WEDGED_MARGIN_S, Pipeline
from cachesync.producer_outbox.ports import Begin, Commit
from cachesync.producer_outbox.outbox_relay.relay import Relay
from cachesync.producer_outbox.outbox_relay.change_source import OutboxSource, _warn_due
from cachesync.producer_outbox.outbox_relay.store import OutboxCheckpoints
from cachesync.schema.errors import ConfigError, FatalError, RetryableError
from cachesync.schema.retry import RetryPolicy
from tests.support import wait_for
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
    """relay_store.OutboxStore over a list: ``rows`` are due (claims take them in order);
    the next ``mark_errors`` markings raise as a lost MySQL connection does."""

    def __init__(self, rows):
        self.rows, self.marked, self.claims = list(rows), [], []
        self.mark_errors = 0
        self.closed = False

    def claim(self, limit, lease_s):
        self.claims.append(limit)
        out, self.rows = self.rows[:limit], self.rows[limit:]
        return out

    def mark_published(self, ids):
        if self.mark_errors:
            self.mark_errors -= 1
            raise RetryableError("MySQL server has gone away")
        self.marked.extend(ids)
        return len(ids)

    def purge(self, retention_s, batch, by_created=False):
        return 0

    def close(self):
        self.closed = True


def rows(n):
    return [OutboxRow(**{**ROW.__dict__, "seq": i, "event_id": f"{i:032x}"}) for i in range(n)]


def ids(n):
    return [f"{i:032x}" for i in range(n)]


def outbox_ports(store, **options):
    source = OutboxSource(store, RelaySettings(**options), "app", "s", threading.Event())
    return source, OutboxCheckpoints(store, source.forget)


def test_each_row_is_a_group_marked_published_once_acknowledged_whatever_the_order():
    store = FakeStore(rows(5))
    source, checkpoints = outbox_ports(store, burst_limit=5)
    items = list(islice(source.changes(), 16))          # 5 groups of 3, the poll's pulse
    assert [type(i).__name__ for i in items] == ["Begin", "Record", "Commit"] * 5 + ["Pulse"]
    publisher = MemoryPublisher(auto_ack=False)
    pipeline = Pipeline(publisher, checkpoints, "t", TailerSettings(pack_rows=1))
    pipeline.run(MemorySource(items))
    assert [s.msg_id for s in publisher.sent] == ids(5)
    assert {s.key for s in publisher.sent} == {"app.board:7"}
    assert decode(publisher.sent[0].value) == to_event(rows(1)[0], "app", "s")
    publisher.ack_all([ids(5)[3], ids(5)[1]])
    pipeline.save_checkpoint()
    assert store.marked == [ids(5)[1], ids(5)[3]]    # past the unacknowledged first row
    assert source.unconfirmed == 3
    publisher.ack_all()
    pipeline.save_checkpoint()
    assert sorted(store.marked) == ids(5) and len(store.marked) == 5 and source.unconfirmed == 0


def test_claims_stop_while_max_unconfirmed_rows_wait_for_their_marks():
    store = FakeStore(rows(10))
    source, checkpoints = outbox_ports(store, burst_limit=4, max_unconfirmed=6,
                                       poll_interval_s=0.01)
    changes = source.changes()
    items = list(islice(changes, 13 + 7 + 1))    # a burst, the 2 that fit, a poll with no room
    assert store.claims == [4, 2] and source.unconfirmed == 6
    checkpoints.save_each([i.checkpoint for i in items if type(i) is Commit][:3])
    assert source.unconfirmed == 3
    assert type(next(changes)) is Begin and store.claims == [4, 2, 3]


def test_a_row_leased_again_while_in_flight_here_is_not_sent_twice():
    store = FakeStore(rows(2))
    source, _ = outbox_ports(store, poll_interval_s=0.01)
    assert len(list(islice(source.changes(), 7))) == 7      # 2 groups and a pulse
    store.rows = rows(1)                                    # its lease ended: claimed again
    assert source.poll() == [] and store.claims == [500, 500]


def run_relay(store, auto_ack: bool):
    """A started relay thread over ``store``; the publishers its factory made."""
    made = []

    def factory():
        made.append(MemoryPublisher(auto_ack=auto_ack))
        return made[-1]
    relay = Relay(store, factory, RelaySettings(poll_interval_s=0.01), "t", "app", "s",
                  retry=RetryPolicy(base_s=0.01, cap_s=0.01))
    thread = Running(relay.run)
    thread.start()
    return relay, thread, made


class Running(threading.Thread):
    """A daemon thread that keeps what its target raised."""

    def __init__(self, target):
        super().__init__(daemon=True)
        self._target_fn, self.error = target, None

    def run(self):
        try:
            self._target_fn()
        except Exception as e:      # the test asserts on it
            self.error = e


def test_a_failed_send_closes_the_producer_and_the_row_returns_after_its_lease():
    store = FakeStore(rows(3))
    relay, thread, made = run_relay(store, auto_ack=False)
    try:
        wait_for(lambda: made and len(made[0].sent) == 3, 10, what="3 sends")
        first, failed, third = ids(3)
        made[0].ack_all([first, third])
        made[0].fail_all(KafkaTimeoutError("broker gone"), [failed])
        wait_for(lambda: len(made) == 2, 10, what="a fresh producer")
        assert made[0].closed and sorted(store.marked) == [first, third]
        store.rows = rows(3)[1:2]              # its lease ended: due again
        wait_for(lambda: [s.msg_id for s in made[1].sent] == [failed], 10, what="a resend")
        made[1].ack_all()
        wait_for(lambda: failed in store.marked, 10, what="the resent row marked")
        assert (relay.sent, relay.published) == (4, 3)
    finally:
        relay.stop()
        thread.join(10)
    assert store.closed and made[1].closed and not thread.is_alive() and thread.error is None


def test_a_wedged_producer_is_replaced_and_its_rows_return_after_their_lease(caplog):
    """A producer that neither acknowledges nor fails its sends (seen with kafka-python after
    a broker restart) is closed once they are older than its delivery timeout plus a margin;
    a fresh one sends the rows again when their lease ends."""
    now = [0.0]
    store, made = FakeStore(rows(3)), []

    def factory():
        made.append(MemoryPublisher(auto_ack=False))
        return made[-1]
    relay = Relay(store, factory, RelaySettings(poll_interval_s=0.01), "t", "app", "s",
                  retry=RetryPolicy(base_s=0.01, cap_s=0.01), clock=lambda: now[0])
    thread = Running(relay.run)
    thread.start()
    try:
        wait_for(lambda: made and len(made[0].sent) == 3, 10, what="3 sends")
        now[0] += DELIVERY_TIMEOUT_S + WEDGED_MARGIN_S
        wait_for(lambda: len(made) == 2, 10, what="a fresh producer")
        assert made[0].closed and relay.producers_wedged == 1 and store.marked == []
        assert "wedged: 3 send(s) neither acknowledged nor failed, none settled for 150s" in (
            caplog.text)
        store.rows = rows(3)                    # their leases ended: due again
        wait_for(lambda: len(made[1].sent) == 3, 10, what="the resends")
        made[1].ack_all()
        wait_for(lambda: sorted(store.marked) == ids(3), 10, what="the resent rows marked")
    finally:
        relay.stop()
        thread.join(10)
    assert not thread.is_alive() and thread.error is None and relay.producers_wedged == 1


def test_a_mysql_error_while_marking_keeps_the_producer_and_marks_later_without_resending():
    store = FakeStore(rows(2))
    store.mark_errors = 2              # the save in the pipeline and the one after it
    relay, thread, made = run_relay(store, auto_ack=True)
    try:
        wait_for(lambda: len(store.marked) == 2, 10, what="both rows marked")
        assert len(made) == 1 and not made[0].closed and len(made[0].sent) == 2
    finally:
        relay.stop()
        thread.join(10)
    assert not thread.is_alive() and thread.error is None


def test_rows_leased_again_warn_once_per_round_naming_the_most_retried(caplog):
    leased = [OutboxRow(**{**ROW.__dict__, "seq": i, "event_id": f"{i:032x}", "attempts": a})
              for i, a in enumerate([1, 3, 6, 4])]
    source, _ = outbox_ports(FakeStore(leased), warn_after_attempts=3)
    with caplog.at_level(logging.WARNING, logger="cachesync.producer_outbox.outbox_relay.relay"):
        source.poll()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"2 outbox event(s) leased again without a confirmed publish; the most "
                        f"retried: {2:032x} (seq 2, {ROW.aggregate_type} {ROW.aggregate_id}) "
                        f"at attempt 6"]


def test_a_row_that_cannot_be_encoded_stays_unpublished_with_a_warning_and_a_count(caplog):
    bad = OutboxRow(**{**ROW.__dict__, "payload": "{not json"})
    store = FakeStore([bad, *rows(1)])
    source, _ = outbox_ports(store, poll_interval_s=0.01)
    with caplog.at_level(logging.WARNING, logger="cachesync.producer_outbox.outbox_relay.relay"):
        items = list(islice(source.changes(), 4))
    assert [type(i).__name__ for i in items] == ["Begin", "Record", "Commit", "Pulse"]
    assert items[1].msg_id == ids(1)[0] and source.unconfirmed == 1
    assert source.unencodable == 1      # cachesync_relay_rows_unencodable
    assert any("cannot be encoded; it stays unpublished" in r.getMessage() and
               r.table == "app.board" for r in caplog.records)


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


def test_a_fatal_store_error_stops_the_relay_even_after_progress():
    class LosesItsGrant(FakeStore):
        def claim(self, limit, lease_s):
            if self.marked:
                raise FatalError("UPDATE command denied to user 'cachesync'")
            return super().claim(limit, lease_s)
    store = LosesItsGrant(rows(2))
    relay, thread, made = run_relay(store, auto_ack=True)
    thread.join(10)
    assert not thread.is_alive() and isinstance(thread.error, FatalError)
    assert len(store.marked) == 2 and store.closed
