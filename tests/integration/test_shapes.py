"""Row shapes and stream events that break naive tailers: DDL mid-stream, odd keys, big transactions."""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration


def test_ddl_mid_stream_does_not_break_decoding(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL)")
    cfg = lab.write_config({"users": {"keys": ["user:{id}", "user:email:{email}"]}})
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (1, 'a@x')")
    wait_for(lambda: lab.dedup_rows("done") == 1, what="the insert applied")
    lab.sql("ALTER TABLE users ADD COLUMN nickname VARCHAR(50) NULL FIRST")
    lab.cache("user:1", "user:email:a@x", "user:email:b@x")   # cached before the write
    lab.sql("UPDATE users SET nickname = 'al', email = 'b@x' WHERE id = 1")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x", "user:email:b@x"),
             what="invalidation after the column was added in front")
    lab.sql("ALTER TABLE users DROP COLUMN nickname")
    lab.cache("user:2")
    lab.sql("INSERT INTO users VALUES (2, 'c@x')")
    wait_for(lambda: not lab.cached("user:2"), what="invalidation after the column was dropped")


def test_composite_binary_and_unicode_primary_keys(lab):
    lab.sql("CREATE TABLE docs (tenant VARCHAR(20) CHARACTER SET utf8mb4 NOT NULL, "
            "uid VARBINARY(16) NOT NULL, title VARCHAR(50) NOT NULL, PRIMARY KEY (tenant, uid))")
    cfg = lab.write_config({"docs": {"keys": ["doc:{tenant}:{uid}"]}})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache("doc:zürich-東京:0x00ff10", "doc:a,b:0x2c")
    lab.sql("INSERT INTO docs VALUES ('zürich-東京', x'00ff10', 't1'), ('a,b', x'2c', 't2')")
    wait_for(lambda: not lab.cached("doc:zürich-東京:0x00ff10", "doc:a,b:0x2c"),
             what="composite/binary/unicode keys invalidated")
    keys = {e.key.decode() for e in lab.topic_events()}
    assert keys == {f"{lab.db}.docs:zürich-東京,0x00ff10", f"{lab.db}.docs:a\\,b,0x2c"}
    assert engine.stats.dead_lettered == 0


def test_a_transaction_far_larger_than_the_inflight_bound(lab):
    """20,000 rows in one transaction pass a tailer whose in-flight bound is 500 rows."""
    rows = 20_000
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT NOT NULL)")
    cfg = lab.write_config({"items": {"keys": ["item:{id}"]}}, tailer={"max_inflight": 500})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO items SELECT seq, seq FROM seq_0_to_%d" % (rows - 1))
    wait_for(lambda: engine.stats.applied == rows, 120, interval=0.2,
             what=f"all {rows} rows of the big transaction applied")
    assert lab.dedup_rows("done") == rows
