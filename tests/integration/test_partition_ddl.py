"""Partition maintenance on a real MariaDB: statements that drop, empty, swap or move a
partitioned table's rows write no row events; each becomes a table-level event of every
mapped table it names, and every cached key of those tables is invalidated."""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

DDL = ("CREATE TABLE {name} (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL) "
       "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (11), "
       "PARTITION p1 VALUES LESS THAN (21), PARTITION p2 VALUES LESS THAN MAXVALUE)")
TABLES = {"users": {"keys": ["user:{id}", "user:email:{email}"]},
          "archive": {"keys": ["archive:{id}"]}}
USER_KEYS = [f"user:{i}" for i in range(1, 21)] + [f"user:email:{i}@x" for i in range(1, 21)]


@pytest.fixture
def partitioned(lab):
    lab.sql(DDL.format(name="users"))
    lab.sql("CREATE TABLE archive (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL)")
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, '{i}@x')" for i in range(1, 21)))
    cfg = lab.write_config(TABLES)
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache(*USER_KEYS, "archive:5", "other")
    return lab, tailer, engine


@pytest.mark.parametrize("statement, tables", [
    ("ALTER TABLE users TRUNCATE PARTITION ALL", {"users"}),
    ("ALTER TABLE users TRUNCATE PARTITION p0", {"users"}),
    ("ALTER TABLE users DROP PARTITION p1", {"users"}),
    ("ALTER TABLE users EXCHANGE PARTITION p0 WITH TABLE archive", {"users", "archive"}),
    ("ALTER TABLE users REORGANIZE PARTITION p1, p2 INTO (PARTITION p3 VALUES LESS THAN MAXVALUE)",
     {"users"}),
    ("ALTER TABLE users REMOVE PARTITIONING", {"users"}),
])
def test_partition_maintenance_invalidates_the_tables_it_names(partitioned, statement, tables):
    lab, tailer, engine = partitioned
    lab.sql(statement)
    keys = USER_KEYS + (["archive:5"] if "archive" in tables else [])
    wait_for(lambda: not lab.cached(*keys), what=f"every key gone after {statement}:\n"
                                                 f"{lab.log(tailer)}")
    assert lab.cached("other", "archive:5") == ["other"] + (
        [] if "archive" in tables else ["archive:5"])
    events = [d.event for d in lab.topic_events() if d.event.op == "truncate"]
    assert {(e.table, e.extra["reason"]) for e in events} == {(t, "partition") for t in tables}
    assert "partition" in lab.log(tailer)


def test_reading_partitions_invalidates_nothing(partitioned):
    lab, _, engine = partitioned
    lab.sql("ALTER TABLE users ANALYZE PARTITION p0")
    lab.sql("UPDATE users SET email = 'z@x' WHERE id = 20")     # a marker that follows it
    wait_for(lambda: not lab.cached("user:20"), what="the marker row applied")
    assert lab.cached("user:1", "user:email:1@x") == ["user:1", "user:email:1@x"]
    assert [d.event for d in lab.topic_events() if d.event.op == "truncate"] == []


# -- ALTERs that rewrite column values in place ------------------------------------------------

def test_a_column_redefined_in_place_invalidates_the_update_mode_values_it_rewrote(lab):
    """MODIFY rounds every price with no row event: the cached values holding the old prices
    are invalidated (table level, reason alter_columns); a delete-mode table keyed on other
    columns is left alone."""
    lab.sql("CREATE TABLE items (id INT PRIMARY KEY, price DECIMAL(10,2) NOT NULL)")
    lab.sql("CREATE TABLE tags (id INT PRIMARY KEY, label VARCHAR(20) NOT NULL)")
    lab.sql("INSERT INTO items VALUES (1, 1.25), (2, 2.50)")
    cfg = lab.write_config({"items": {"keys": ["item:{id}"], "mode": "update"},
                            "tags": {"keys": ["tag:{id}"]}})
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.sql("UPDATE items SET price = price + 1")            # cached by update mode
    wait_for(lambda: lab.cached("item:1", "item:2") == ["item:1", "item:2"],
             what="update mode wrote both items")
    lab.cache("tag:1")
    lab.sql("ALTER TABLE tags ADD COLUMN note TEXT")          # delete mode, not keyed on it
    lab.sql("ALTER TABLE items MODIFY price DECIMAL(10,1) NOT NULL")   # 2.25 -> 2.3
    wait_for(lambda: not lab.cached("item:1", "item:2"),
             what=f"the rewritten values invalidated:\n{lab.log(tailer)}")
    events = [d.event for d in lab.topic_events() if d.event.op == "truncate"]
    assert {(e.table, e.extra["reason"]) for e in events} == {("items", "alter_columns")}
    assert lab.cached("tag:1") == ["tag:1"]
