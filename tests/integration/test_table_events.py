"""Issue 12, table-level events on a real MariaDB: TRUNCATE, DROP, RENAME and DML logged
as a statement invalidate every cached key of the mapped table, in delete and update mode."""

from __future__ import annotations

import json

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
DELETE_MODE = {"users": {"keys": ["user:{id}", "user:email:{email}"]},
               "orders": {"keys": ["order:{id}"]}}
UPDATE_MODE = {"users": {"keys": ["user:{id}", "user:email:{email}"], "mode": "update",
                         "value_columns": ["id", "email", "name"]},
               "orders": {"keys": ["order:{id}"]}}
# cached keys of users, keys of another table and of another template sharing the prefix
USER_KEYS = [f"user:{i}" for i in range(1, 51)] + [f"user:email:{i}@x" for i in range(1, 51)]
OTHER_KEYS = ["order:1", "user:1:avatar", "unrelated"]


@pytest.fixture(params=["delete", "update"])
def pipeline(lab, request):
    lab.sql(USERS_DDL)
    lab.sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, '{i}@x', 'n{i}')" for i in range(1, 51)))
    tables = DELETE_MODE if request.param == "delete" else UPDATE_MODE
    cfg = lab.write_config(tables, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache(*USER_KEYS, *OTHER_KEYS)
    return lab, engine, request.param


def table_events(lab):
    return [e.event for e in lab.topic_events() if e.event.op == "truncate"]


@pytest.mark.parametrize("statement, reason", [
    ("TRUNCATE TABLE users", "truncate"),
    ("DROP TABLE users", "drop"),
    ("RENAME TABLE users TO users_old", "rename"),
    ("ALTER TABLE users RENAME TO people", "rename"),
    ("CREATE OR REPLACE TABLE users (id BIGINT PRIMARY KEY)", "drop"),
    ("DROP DATABASE {db}", "drop_database"),
])
def test_whole_table_ddl_invalidates_every_cached_key(pipeline, statement, reason):
    lab, engine, _ = pipeline
    lab.sql(statement.format(db=lab.db))
    wait_for(lambda: not lab.cached(*USER_KEYS), what=f"every users key gone after {statement}")
    untouched = [k for k in OTHER_KEYS if not (reason == "drop_database" and k == "order:1")]
    assert lab.cached(*OTHER_KEYS) == untouched
    events = table_events(lab)
    partitions = 3
    tables = {"users", "orders"} if reason == "drop_database" else {"users"}
    assert len(events) == partitions * len(tables)
    assert {(e.table, e.extra["reason"]) for e in events} == {(t, reason) for t in tables}
    wait_for(lambda: engine.stats.table_invalidations == len(events), what="each copy applied")
    assert engine.table_scans.wait_idle(30)          # the scans beside the rows completed
    # orders has order:1 cached: a dropped database takes its keys too
    assert engine.stats.table_keys_deleted == len(USER_KEYS) + (reason == "drop_database")


def test_statement_logged_update_invalidates_the_table(pipeline):
    lab, engine, _ = pipeline
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute("UPDATE users SET name = 'renamed' WHERE id = 7")
    wait_for(lambda: not lab.cached(*USER_KEYS), what="users keys gone after a statement UPDATE")
    assert lab.cached(*OTHER_KEYS) == OTHER_KEYS
    assert {e.extra["reason"] for e in table_events(lab)} == {"statement"}


def test_rows_after_a_truncate_are_applied_after_it(pipeline):
    lab, _, mode = pipeline
    lab.sql("TRUNCATE TABLE users")
    lab.sql("INSERT INTO users VALUES (1, '1@x', 'after')")
    if mode == "update":      # written after the truncate removed the cached value
        wait_for(lambda: lab.redis.get(lab.prefix + "user:1") == b'{"id":1,"email":"1@x",'
                                                                 b'"name":"after"}',
                 what="the insert after the truncate written")
    # the row inserted after it renders user:1 and user:email:1@x again
    others = [k for k in USER_KEYS if k not in ("user:1", "user:email:1@x")]
    wait_for(lambda: not lab.cached(*others), what="the truncate applied")


def test_an_older_update_replayed_after_a_truncate_stays_out(lab):
    """Update mode: the fence a truncate leaves turns an older write into a delete,
    even when it comes back with an id the dedup store has not seen."""
    lab.sql(USERS_DDL)
    lab.sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    cfg = lab.write_config(UPDATE_MODE, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (1, '1@x', 'old')")
    wait_for(lambda: lab.redis.get(lab.prefix + "user:1") is not None, what="user:1 written")
    old = next(e for e in lab.topic_events() if e.event.op == "insert")
    lab.sql("TRUNCATE TABLE users")
    wait_for(lambda: engine.stats.table_invalidations == 3, what="the truncate's 3 copies applied")
    assert engine.table_scans.wait_idle(30)          # and its scan beside the rows completed
    assert not lab.cached("user:1", "user:email:1@x")
    applied = engine.stats.applied
    doc = json.loads(old.value)
    doc["id"] = "replayed-" + doc["id"][9:]
    lab.produce_raw(json.dumps(doc).encode(), key=old.key)
    wait_for(lambda: engine.stats.applied == applied + 1, what="the replayed update applied")
    assert not lab.cached("user:1", "user:email:1@x")


def test_global_statement_format_is_reported_and_its_updates_invalidate(lab):
    """The issue's sequence: SET GLOBAL binlog_format=STATEMENT while the tailer runs."""
    lab.sql(USERS_DDL)
    lab.sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
    lab.sql("INSERT INTO users VALUES (1, '1@x', 'a')")
    cfg = lab.write_config(DELETE_MODE, consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:1@x")
    try:
        lab.sql("SET GLOBAL binlog_format = 'STATEMENT'")
        wait_for(lambda: "binlog_format is STATEMENT, not ROW" in lab.log(tailer),
                 what="the tailer's periodic check to warn")
        lab.sql("UPDATE users SET name = 'b' WHERE id = 1")     # a new session: STATEMENT
    finally:
        lab.sql("SET GLOBAL binlog_format = 'ROW'")
    wait_for(lambda: not lab.cached("user:1", "user:email:1@x"), what="the statement applied")
    assert "table-level change of %s.users (statement)" % lab.db in lab.log(tailer)


def test_a_truncate_voids_the_lease_of_a_fill_in_flight(pipeline):
    """read_through took a lease and loaded the row before the TRUNCATE; its fill after
    the truncate must be refused, though the key was not cached when the scan ran."""
    from cachesync.client import read_through
    lab, engine, _ = pipeline

    def load_then_truncate():
        row = lab.sql("SELECT email FROM users WHERE id = 77")    # none: id 77 is uncached
        lab.sql("TRUNCATE TABLE users")
        wait_for(lambda: engine.stats.table_invalidations == 3, what="the truncate applied")
        assert engine.table_scans.wait_idle(30)      # its scan (leases first) completed
        return f"loaded before the truncate: {row}"

    value = read_through(lab.redis, lab.prefix + "user:77", load_then_truncate, ttl_s=60)
    assert value.startswith("loaded before")
    assert not lab.cached("user:77")            # the fill was refused
