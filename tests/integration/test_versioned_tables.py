"""MariaDB system-versioned tables on real services: Redis holds what SELECT returns, or nothing."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.support import address, scrape, start, wait_for

pytestmark = pytest.mark.integration

ITEMS = {"items": {"keys": ["item:{id}"], "mode": "update"}}


def db_state(lab, columns: str) -> dict[str, dict]:
    """What Redis must hold: each current row as ``SELECT * ... WHERE id = ...`` returns it."""
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM items")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    assert sorted(names) == sorted(columns.split())         # the invisible columns are absent
    return {f"{lab.prefix}item:{r['id']}": r for r in rows}


def redis_state(lab) -> dict[str, dict]:
    keys = sorted(k.decode() for k in lab.redis.scan_iter(match=f"{lab.prefix}item:*", count=1000))
    return {k: json.loads(v) for k, v in zip(keys, lab.redis.mget(keys)) if v is not None}


def settle(lab, engine, marker: int) -> None:
    """Wait until the row ``marker`` (written last) is cached and the consumer has read every
    record of the topic: nothing the test wrote is still on its way."""
    wait_for(lambda: redis_state(lab).get(f"{lab.prefix}item:{marker}"), 90,
             what=f"item {marker} cached")
    lab.settled_records(engine)


def test_update_mode_caches_the_current_row_and_removes_a_deleted_one(lab):
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT, name VARCHAR(20))")
    cfg = lab.write_config(ITEMS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("ALTER TABLE items ADD SYSTEM VERSIONING")      # after the start: read again
    lab.sql("INSERT INTO items (id, v, name) VALUES (1, 1, 'a'), (2, 1, 'b'), (3, 1, 'c')")
    lab.sql("UPDATE items SET v = 2 WHERE id = 1")           # logs the history row beside it
    lab.sql("UPDATE items SET v = 3, name = 'cc' WHERE id = 3")
    lab.sql("DELETE FROM items WHERE id = 2")                # logged as an update closing it
    lab.sql("INSERT INTO items (id, v, name) VALUES (9, 0, 'marker')")
    settle(lab, engine, 9)
    assert redis_state(lab) == db_state(lab, "id v name")
    assert f"{lab.prefix}item:2" not in redis_state(lab)

    # every event of a row has the declared key: one partition, in commit order
    events = [d for d in lab.topic_events() if d.event.table == "items"]
    assert {(d.record.key.decode(), d.event.pk) for d in events if d.event.pk[0][1] == 1} == {
        (f"{lab.db}.items:1", (("id", 1),))}

    lab.sql("DELETE HISTORY FROM items")                     # deletes of history rows only
    lab.sql("UPDATE items SET v = 4 WHERE id = 1")
    lab.sql("INSERT INTO items (id, v, name) VALUES (10, 0, 'marker')")
    settle(lab, engine, 10)
    assert redis_state(lab) == db_state(lab, "id v name")
    assert engine.stats.dead_lettered == 0


def test_transaction_precise_versioning_is_logged_as_statements_and_invalidates_the_table(lab):
    """MariaDB logs the DML of a transaction-precise table as statements, even with
    binlog_format=ROW (its period columns hold transaction ids a replica cannot reuse):
    every one invalidates the table, and update mode writes nothing for it."""
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT, "
            "s BIGINT UNSIGNED GENERATED ALWAYS AS ROW START, "
            "e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME(s, e)) "
            "WITH SYSTEM VERSIONING")
    cfg = lab.write_config(ITEMS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    planted = [f"{lab.prefix}item:{i}" for i in (1, 2)]
    for key in planted:
        lab.redis.set(key, json.dumps({"id": 0, "v": 0}))
    lab.sql("INSERT INTO items (id, v) VALUES (1, 1), (2, 1)")
    lab.sql("UPDATE items SET v = 2 WHERE id = 1")
    lab.sql("DELETE FROM items WHERE id = 2")
    wait_for(lambda: not any(lab.redis.exists(k) for k in planted), 90, what="planted keys removed")
    events = lab.settled_records(engine)
    reasons = [d.event.extra.get("reason") for d in events if d.event.table == "items"]
    assert reasons and set(reasons) == {"statement"}
    assert redis_state(lab) == {}


def test_drop_system_versioning_leaves_an_ordinary_table(lab):
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT, name VARCHAR(20)) WITH SYSTEM VERSIONING")
    cfg = lab.write_config(ITEMS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO items VALUES (1, 1, 'a'), (2, 1, 'b')")
    lab.sql("UPDATE items SET v = 2 WHERE id = 1")
    lab.sql("ALTER TABLE items DROP SYSTEM VERSIONING")
    lab.sql("UPDATE items SET v = 3 WHERE id = 1")
    lab.sql("DELETE FROM items WHERE id = 2")
    lab.sql("INSERT INTO items VALUES (9, 0, 'marker')")
    settle(lab, engine, 9)
    assert redis_state(lab) == db_state(lab, "id v name")


def own_account(lab) -> tuple[str, dict]:
    """A new account with the grants of the devstack's cachesync account, and the environment
    that makes a cachesync process use it."""
    user, password = f"cs_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with lab.stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW GRANTS FOR cachesync@'127.0.0.1'")
        grants = [g for (g,) in cur.fetchall()]
        cur.execute(f"CREATE USER {user}@'127.0.0.1' IDENTIFIED BY %s", (password,))
        for grant in grants:
            cur.execute(re.sub(r" TO .*", f" TO {user}@'127.0.0.1'", grant))
    secret = lab.tmp / f"{user}.password"
    secret.write_text(password)
    return user, {"CACHESYNC_MYSQL_USER": user, "CACHESYNC_MYSQL_PASSWORD_FILE": str(secret)}


def test_update_mode_publishes_keys_only_while_the_column_types_cannot_be_read(lab):
    """The tailer's account gets a statement time limit no read of information_schema meets
    (MariaDB's MAX_STATEMENT_TIME, applied at connect: the open binlog and checkpoint
    connections go on), so the read after ADD SYSTEM VERSIONING fails: whether the table is
    versioned is unknown, and its update-mode rows go out invalidate-only (the history row an
    UPDATE logs never overwrites the new value) until a later read succeeds."""
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, v INT, name VARCHAR(20))")
    cfg = lab.write_config(ITEMS)
    user, env = own_account(lab)
    try:
        tailer = start(lab, cfg, "tail", env=env)
        engine = lab.start_engine(cfg)
        lab.sql("INSERT INTO items (id, v, name) VALUES (1, 1, 'a'), (2, 1, 'b')")
        settle(lab, engine, 2)
        lab.sql(f"ALTER USER {user}@'127.0.0.1' WITH MAX_STATEMENT_TIME 0.000001")
        lab.sql("ALTER TABLE items ADD SYSTEM VERSIONING")
        lab.sql("UPDATE items SET v = 2 WHERE id = 1")      # logs the history row beside it
        wait_for(lambda: not lab.redis.exists(f"{lab.prefix}item:1"), 90, what="item 1 removed")
        rows = [d.event for d in lab.settled_records(engine)
                if d.event.table == "items" and d.event.op in ("insert", "update", "delete")]
        exact = [e for e in rows if "invalidate_only" not in e.extra]
        assert sorted((e.op, e.pk) for e in exact) == [
            ("insert", (("id", 1),)), ("insert", (("id", 2),))]   # before the lock
        # the UPDATE: the current row's update and the history row's insert, keys only
        assert sorted((e.op, e.extra["invalidate_only"]) for e in rows if e not in exact) == [
            ("insert", "column_types_unread"), ("update", "column_types_unread")]
        assert redis_state(lab) == {f"{lab.prefix}item:2": {"id": 2, "v": 1, "name": "b"}}
        assert f"could not read the column types of {lab.db}.items" in lab.log(tailer)
        metrics = address(lab, tailer)      # the column types' read and the foreign keys'
        wait_for(lambda: scrape(metrics)[("cachesync_tailer_schema_read_failures_total", ())]
                 == 2, what="two failed schema reads counted")

        lab.sql(f"ALTER USER {user}@'127.0.0.1' WITH MAX_STATEMENT_TIME 0")
        lab.sql("ALTER TABLE items COMMENT 'read again'")    # names the table: read again
        lab.sql("UPDATE items SET v = 3 WHERE id = 1")
        lab.sql("INSERT INTO items (id, v, name) VALUES (9, 0, 'marker')")
        settle(lab, engine, 9)
        assert redis_state(lab) == db_state(lab, "id v name")
        assert engine.stats.dead_lettered == 0
    finally:
        lab.sql(f"DROP USER {user}@'127.0.0.1'")
