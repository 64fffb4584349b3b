"""Outbox rows read from the binlog -> the relay's events (pure), and tailer.outbox_tables."""

from __future__ import annotations

import datetime
import logging

import pytest

from cachesync.runtime import config
from cachesync.producer_outbox.outbox import OutboxRow, event_kafka_key, to_event
from cachesync.producer_outbox.decode.outbox_binlog import OutboxRouter
from cachesync.schema.errors import ConfigError, FatalError
from cachesync.schema.event import decode, encode

CREATED = datetime.datetime(2026, 11, 23, 5, 0, 0, 250000)
CREATED_TS = 1_795_410_000.25      # CREATED as UTC


def image(**over):
    """An outbox row as the binlog decodes it (created_at: the server's local DATETIME)."""
    row = {"seq": 7, "event_id": "0" * 31 + "7", "aggregate_type": "board", "aggregate_id": "42",
           "event_type": "bumped", "payload": '{"n":1}', "cache_keys": '["board:42", "page:home"]',
           "created_at": CREATED, "published_at": None, "attempts": 0, "next_attempt_at": CREATED}
    return {**row, **over}


def relay_row(img) -> OutboxRow:
    """The row as the relay's SELECT reads it (UNIX_TIMESTAMP in a UTC session)."""
    return OutboxRow(img["seq"], img["event_id"], img["aggregate_type"], img["aggregate_id"],
                     img["event_type"], img["payload"], img["cache_keys"], CREATED_TS, 1)


def test_an_inserted_row_is_the_record_the_relay_sends():
    router = OutboxRouter({("app", "cachesync_outbox")}, "relay-host:3306")
    [rec] = router.records("app", "cachesync_outbox", [image()])
    row = relay_row(image())
    assert rec.key == event_kafka_key(row, "app") == "app.board:42"
    assert rec.msg_id == row.event_id
    assert rec.value == encode(to_event(row, "app", "relay-host:3306"))
    assert rec.aggregate_type == "board"
    event = decode(rec.value)
    assert (event.id, event.version, event.keys) == (row.event_id, 7, ("board:42", "page:home"))
    assert router.events == 1 and router.invalid == 0


def test_created_at_is_read_in_the_servers_time_zone():
    router = OutboxRouter({("app", "o")}, "s", utc_offset_s=3600)     # server at UTC+1
    [rec] = router.records("app", "o", [image(created_at=CREATED + datetime.timedelta(hours=1))])
    assert decode(rec.value).source.commit_ts == pytest.approx(CREATED_TS)


def test_covers_only_the_configured_tables():
    router = OutboxRouter({("app", "cachesync_outbox")}, "s")
    assert router.covers("app", "cachesync_outbox")
    assert not router.covers("app", "other") and not router.covers("other", "cachesync_outbox")


@pytest.mark.parametrize("over, dropped, kept_keys", [
    ({"payload": "{not json"}, "payload", ("board:42", "page:home")),
    ({"payload": "[1, 2]"}, "payload", ("board:42", "page:home")),
    ({"cache_keys": '"board:42"'}, "cache_keys", ()),
    ({"cache_keys": '["ok", 3]'}, "cache_keys", ()),
])
def test_a_row_that_bypassed_emit_goes_out_without_the_bad_column(over, dropped, kept_keys,
                                                                   caplog):
    router = OutboxRouter({("app", "o")}, "s")
    with caplog.at_level(logging.WARNING):
        [rec] = router.records("app", "o", [image(**over)])
    event = decode(rec.value)
    assert event.keys == kept_keys
    assert (event.after is None) == (dropped == "payload")
    assert router.invalid == 1
    assert f"of app.o: {dropped}" in caplog.text and rec.msg_id in caplog.text


def test_both_columns_bad_still_publish_the_event_for_the_consumer_to_dead_letter():
    router = OutboxRouter({("app", "o")}, "s")
    [rec] = router.records("app", "o", [image(payload="x", cache_keys="y")])
    event = decode(rec.value)
    assert (event.after, event.keys, event.id) == (None, (), image()["event_id"])


def test_an_event_over_the_record_limit_goes_out_without_its_payload(caplog):
    router = OutboxRouter({("app", "o")}, "s", max_record_bytes=2000)
    with caplog.at_level(logging.WARNING):
        [rec] = router.records("app", "o", [image(payload='{"x": "%s"}' % ("y" * 5000))])
    event = decode(rec.value)
    assert event.after is None and event.keys == ("board:42", "page:home")
    assert len(rec.value) < 2000 and router.invalid == 1
    assert "over the 2000-byte Kafka record limit" in caplog.text


def test_an_oversized_event_whose_keys_are_not_json_goes_out_with_neither():
    router = OutboxRouter({("app", "o")}, "s", max_record_bytes=2000)
    [rec] = router.records("app", "o", [image(payload='{"x": "%s"}' % ("y" * 5000),
                                              cache_keys="not json")])
    event = decode(rec.value)
    assert event.after is None and event.keys == () and router.invalid == 2


def test_a_table_without_the_outbox_columns_is_a_fatal_error_naming_it():
    router = OutboxRouter({("app", "users")}, "s")
    with pytest.raises(FatalError, match=r"app\.users.*event_id, aggregate_type"):
        router.records("app", "users", [{"seq": 1, "name": "x"}])


@pytest.mark.parametrize("value, names", [
    ("", frozenset()),
    ("app.cachesync_outbox", {("app", "cachesync_outbox")}),
    ("app.o1, shop.o2 ", {("app", "o1"), ("shop", "o2")}),
])
def test_outbox_tables_setting_parses_db_table_pairs(value, names):
    assert config.TailerSettings(outbox_tables=value).outbox_table_names == names


@pytest.mark.parametrize("value", ["cachesync_outbox", "app.o;DROP", "app.o,,x.y", "a.b.c"])
def test_outbox_tables_setting_refuses_what_is_not_a_list_of_db_table(tmp_path, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"tailer: {{outbox_tables: '{value}'}}\ntables: {{app.users: {{keys: ['u:{{id}}']}}}}\n")
    with pytest.raises(ConfigError, match="tailer.outbox_tables: expected a comma-separated list"):
        config.load(path, {})


def test_an_outbox_table_cannot_also_be_mapped(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tailer: {outbox_tables: app.o}\ntables: {app.o: {keys: ['o:{seq}']}}\n")
    with pytest.raises(ConfigError, match="lists app.o, which tables: also maps"):
        config.load(path, {})
