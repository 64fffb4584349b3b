"""Foreign-key cascades on a real MariaDB: the rows a cascade deletes or rewrites are not in
the binlog; the tailer invalidates them from the parent's row events, three levels deep
through a table that is not mapped, in delete and update mode: no child key stays cached."""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

SCHEMA = [
    "CREATE TABLE parent (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL)",
    # level 1, mapped: CASCADE on delete and update
    "CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL, "
    "FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    # level 1, mapped: SET NULL on delete and update
    "CREATE TABLE nullchild (id BIGINT PRIMARY KEY, parent_id BIGINT NULL, "
    "FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE SET NULL ON UPDATE SET NULL)",
    # level 2, NOT mapped
    "CREATE TABLE middle (parent_id BIGINT NOT NULL, n INT NOT NULL, "
    "PRIMARY KEY (parent_id, n), "
    "FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE)",
    # level 3, mapped: reached only through middle
    "CREATE TABLE leaf (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL, middle_n INT NOT NULL, "
    "FOREIGN KEY (parent_id, middle_n) REFERENCES middle (parent_id, n) "
    "ON DELETE CASCADE ON UPDATE CASCADE)",
    "CREATE TABLE other (id BIGINT PRIMARY KEY)",
]
ROWS = [
    "INSERT INTO parent VALUES (1, 'a'), (2, 'b')",
    "INSERT INTO child VALUES (10, 1), (11, 1), (12, 2)",
    "INSERT INTO nullchild VALUES (20, 1), (21, 2)",
    "INSERT INTO middle VALUES (1, 1), (1, 2), (2, 1)",
    "INSERT INTO leaf VALUES (30, 1, 1), (31, 1, 2), (32, 2, 1)",
    "INSERT INTO other VALUES (1)",
]


def tables(mode: str) -> dict:
    def entry(keys, columns):
        if mode == "delete":
            return {"keys": keys}
        return {"keys": keys, "mode": "update", "value_columns": columns}
    return {"parent": entry(["parent:{id}"], ["id", "name"]),
            "child": entry(["child:{id}", "child:byparent:{parent_id}"], ["id", "parent_id"]),
            "nullchild": entry(["nullchild:{id}"], ["id", "parent_id"]),
            "leaf": entry(["leaf:{id}", "leaf:bymiddle:{parent_id}:{middle_n}"],
                          ["id", "parent_id", "middle_n"]),
            "other": {"keys": ["other:{id}"]}}


# what the cascade of parent 1 changes, in every mapped table below it
STALE = ["child:10", "child:11", "child:byparent:1", "nullchild:20", "leaf:30", "leaf:31",
         "leaf:bymiddle:1:1", "leaf:bymiddle:1:2"]


@pytest.fixture(params=["delete", "update"])
def pipeline(lab, request):
    # any privilege beyond SELECT lets the account read the ON DELETE/UPDATE rules
    lab.sql(f"GRANT REFERENCES ON {lab.db}.* TO cachesync@'127.0.0.1'")
    for statement in SCHEMA + ROWS:
        lab.sql(statement)
    cfg = lab.write_config(tables(request.param), consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    return lab, engine


@pytest.mark.parametrize("statement", [
    "DELETE FROM parent WHERE id = 1",
    "REPLACE INTO parent VALUES (1, 'replaced')",
    "UPDATE parent SET id = 5 WHERE id = 1",
])
def test_no_child_key_stays_cached_after_a_cascade(pipeline, statement):
    lab, engine = pipeline
    moved = ["child:byparent:5", "leaf:bymiddle:5:1"]     # where ON UPDATE CASCADE moved rows
    lab.cache(*STALE, *moved, "other:1")
    lab.sql(statement)
    wait_for(lambda: not lab.cached(*STALE, *moved), timeout=60,
             what=f"every key the cascade of {statement!r} changed invalidated")
    assert lab.cached("other:1") == ["other:1"]     # a table the cascade does not reach
    events = [e.event for e in lab.topic_events()]
    cascades = {e.table for e in events if e.op == "truncate"
                and e.extra.get("reason") == "fk_cascade"}
    assert cascades == {"child", "nullchild", "leaf"}
    rendered = [e for e in events if e.table == "child" and e.extra.get("cascade")]
    assert {e.before["parent_id"] for e in rendered} >= {1}
    assert engine.stats.dead_lettered == 0


def test_a_self_reference_cascades_through_every_level(lab):
    """With SELECT only, the account cannot read the rules: each is taken as CASCADE."""
    lab.sql("CREATE TABLE node (id BIGINT PRIMARY KEY, up BIGINT NULL, "
            "FOREIGN KEY (up) REFERENCES node (id) ON DELETE CASCADE)")
    lab.sql("INSERT INTO node VALUES (1, NULL), (2, 1), (3, 2), (4, 3)")
    cfg = lab.write_config({"node": {"keys": ["node:{id}", "node:children:{up}"]}},
                           consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    keys = ["node:1", "node:2", "node:3", "node:4", "node:children:1", "node:children:2",
            "node:children:3"]
    lab.cache(*keys)
    lab.sql("DELETE FROM node WHERE id = 1")
    wait_for(lambda: not lab.cached(*keys), timeout=60, what="every node below 1 invalidated")


def test_a_foreign_key_added_while_the_tailer_runs_is_followed(lab):
    """The foreign keys are read again after DDL, as column types are."""
    lab.sql("CREATE TABLE parent (id BIGINT PRIMARY KEY)")
    lab.sql("CREATE TABLE child (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL)")
    lab.sql("INSERT INTO parent VALUES (1)")
    lab.sql("INSERT INTO child VALUES (10, 1)")
    cfg = lab.write_config({"child": {"keys": ["child:{id}"]}}, consumer={"dedup_store": "redis"})
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.sql("ALTER TABLE child ADD FOREIGN KEY (parent_id) REFERENCES parent (id) "
            "ON DELETE CASCADE")
    lab.cache("child:10")
    lab.sql("DELETE FROM parent WHERE id = 1")
    wait_for(lambda: not lab.cached("child:10"), timeout=60,
             what="the cascade of a foreign key added after the start invalidated")
