"""Issue 13 end to end on real MariaDB, Kafka and Redis: ambiguous keys in update mode, a
column dropped mid-stream under a template that names it, a version column going backwards."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from cachesync.schema.event import encode
from cachesync.schema.keys import version_key
from tests.support import wait_for

pytestmark = pytest.mark.integration


def settle(engine, events: int, timeout: float = 60) -> None:
    wait_for(lambda: engine.stats.applied + engine.stats.dead_lettered >= events, timeout,
             what=f"{events} events applied or dead-lettered")


def test_update_mode_never_lets_one_row_hold_anothers_key(lab, caplog):
    caplog.set_level(logging.WARNING)
    lab.sql("CREATE TABLE bk (id INT PRIMARY KEY, a VARCHAR(20), b VARCHAR(20))")
    cfg = lab.write_config({"bk": {"keys": ["bk:{a}:{b}"], "mode": "update"}})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache("bk:x:y:z")                                      # what a reader filled earlier
    lab.sql("INSERT INTO bk VALUES (1, 'x:y', 'z'), (2, 'x', 'y:z'), (3, 'p', 'q')")
    settle(engine, 3)
    # both rows render bk:x:y:z: the key is invalidated and fenced, never written
    assert lab.redis.get(f"{lab.prefix}bk:x:y:z") is None
    assert lab.redis.get(version_key(f"{lab.prefix}bk:x:y:z")) is not None
    assert json.loads(lab.redis.get(f"{lab.prefix}bk:p:q")) == {"id": 3, "a": "p", "b": "q"}
    table = f"{lab.db}.bk"
    assert engine.tables.snapshot() == {("invalidated_instead_of_written", table,
                                         "ambiguous_key"): 2}
    assert f"{table}: ambiguous_key: key '{lab.prefix}bk:x:y:z'" in caplog.text


def test_a_column_dropped_mid_stream_invalidates_the_rows_other_keys_and_dead_letters(lab):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(50), name VARCHAR(50))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}", "user:email:{email}",
                                               "user:name:{name}"]}})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ann')")
    settle(engine, 1)
    lab.cache("user:1", "user:email:a@x", "user:email:b@x")
    lab.sql("ALTER TABLE users DROP COLUMN name")
    lab.sql("UPDATE users SET email = 'b@x' WHERE id = 1")
    settle(engine, 2)
    assert lab.cached("user:1", "user:email:a@x", "user:email:b@x") == []
    (letter,) = lab.topic_records(lab.dlq)
    assert dict(letter.headers)["reason"] == b"missing_column"
    assert engine.stats.applied == 1 and engine.stats.dead_lettered == 1
    assert engine.tables.snapshot() == {("unrenderable_templates", f"{lab.db}.users", ""): 1}


def test_a_version_going_backwards_invalidates_and_a_stale_replay_stays_refused(lab, caplog):
    caplog.set_level(logging.WARNING)
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT NOT NULL, name VARCHAR(20))")
    cfg = lab.write_config({"items": {"keys": ["item:{id}"], "mode": "update",
                                      "version_column": "v"}})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    key = f"{lab.prefix}item:1"
    lab.sql("INSERT INTO items VALUES (1, 5, 'five')")
    wait_for(lambda: lab.redis.get(key), 60, what="the first value")
    lab.sql("UPDATE items SET v = 3, name = 'three' WHERE id = 1")
    settle(engine, 2)
    assert lab.redis.get(key) is None                       # not 'five': the row has moved on
    table = f"{lab.db}.items"
    assert engine.tables.snapshot() == {("version_backwards", table, ""): 1}
    assert f"{table}: version_backwards: key '{key}'" in caplog.text
    assert engine.stats.fenced == 0
    # a newer version writes again
    lab.sql("UPDATE items SET v = 6, name = 'six' WHERE id = 1")
    wait_for(lambda: lab.redis.get(key), 60, what="the newest value")
    assert json.loads(lab.redis.get(key))["name"] == "six"
    # a true stale replay of the first change (under a new id, so dedup lets it through)
    # is refused by the fence as before, not counted as a version going backwards
    first = next(e.event for e in lab.topic_events() if e.event.op == "insert")
    lab.produce_raw(encode(dataclasses.replace(first, id=first.id + "-replayed")))
    wait_for(lambda: engine.stats.fenced == 1, 60, what="the stale replay refused")
    assert json.loads(lab.redis.get(key))["name"] == "six"
    assert engine.tables.snapshot() == {("version_backwards", table, ""): 1}


def test_consume_exports_the_per_table_counters_on_metrics(lab):
    from tests.support import address, scrape
    lab.sql("CREATE TABLE t (id INT PRIMARY KEY, email VARCHAR(20), v INT NOT NULL)")
    cfg = lab.write_config({"t": {"keys": ["t:{id}", "t:email:{email}"], "mode": "update",
                                  "version_column": "v"}})
    lab.start_tailer(cfg)
    consume = lab.spawn("consume", cfg)
    addr = address(lab, consume)
    lab.sql("INSERT INTO t VALUES (1, NULL, 5)")                 # a NULL key column
    lab.sql("UPDATE t SET v = 3 WHERE id = 1")                  # the version goes backwards
    table = (("table", f"{lab.db}.t"),)
    # the backwards count moves before the batch's null-key skips: await the batch's end
    # (both events consumed), then check both
    m = wait_for(lambda: (lambda s: s if s.get(("cachesync_consumer_events_consumed_total", ()))
                          == 2 else None)(scrape(addr)), 60, interval=0.2,
                 what="the insert and the update consumed")
    assert m[("cachesync_consumer_version_backwards_total", table)] == 1
    assert m[("cachesync_consumer_null_key_skips_total", table)] == 3     # per image: 1 + 2
