"""Partial row images on a real MariaDB: one session's ``binlog_row_image`` (MINIMAL, NOBLOB)
never stops the tailer, never decodes a left-out column as NULL, and never leaves a key stale.

Both readers (the fast reader and python-mysql-replication's) read the same binlog.
"""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
             "name VARCHAR(100) NOT NULL, bio TEXT)")
KEYS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}
CACHED = [f"user:{i}" for i in range(1, 11)] + [f"user:email:{i}@x" for i in range(1, 11)]


@pytest.fixture(params=["fast", "library"])
def reader(request):
    return request.param


def start(lab, reader: str, tables=None):
    lab.sql(USERS_DDL)
    lab.sql("INSERT INTO users VALUES " + ",".join(f"({i}, '{i}@x', 'n{i}', 'bio {i}')"
                                                    for i in range(1, 11)))
    cfg = lab.write_config(tables or KEYS, tailer={"reader": reader})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache(*CACHED)
    return tailer, engine


def session(lab, image: str, *statements: str) -> None:
    """Run ``statements`` in one session with ``binlog_row_image=image``."""
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute(f"SET SESSION binlog_row_image = '{image}'")
        for statement in statements:
            cur.execute(statement)


def events_of(lab, op: str):
    return [d.event for d in lab.topic_events() if d.event.op == op]


def test_minimal_update_of_a_key_column_invalidates_and_the_tailer_lives(lab, reader):
    tailer, engine = start(lab, reader)
    lab.cache("user:email:new@x")
    session(lab, "MINIMAL", "UPDATE users SET email = 'new@x' WHERE id = 3")
    # the old email key cannot be rendered (MINIMAL logs only the primary key before):
    # the table-level event takes it, and every other key of the table
    wait_for(lambda: not lab.cached(*CACHED, "user:email:new@x"),
             what=f"every users key gone; tailer log:\n{lab.log(tailer)}")
    update, = events_of(lab, "update")
    assert update.extra["absent"] == {"before": ["bio", "email", "name"], "after": ["bio", "name"]}
    assert update.before == {"id": 3} and update.after == {"id": 3, "email": "new@x"}
    assert {e.extra["reason"] for e in events_of(lab, "truncate")} == {"partial_row_image"}
    # still alive: a later FULL change is published as usual
    lab.cache("user:5", "user:email:5@x")
    lab.sql("UPDATE users SET name = 'later' WHERE id = 5")
    wait_for(lambda: not lab.cached("user:5", "user:email:5@x"), what="a later update applied")
    assert tailer.poll() is None
    assert "partial_row_image" in lab.log(tailer)


def test_minimal_delete_invalidates_the_table(lab, reader):
    tailer, _ = start(lab, reader)
    session(lab, "MINIMAL", "DELETE FROM users WHERE id = 4")
    wait_for(lambda: not lab.cached(*CACHED), what=f"users keys gone:\n{lab.log(tailer)}")
    delete, = events_of(lab, "delete")
    assert delete.before == {"id": 4} and delete.extra["absent"]["before"] == ["bio", "email", "name"]
    assert tailer.poll() is None


def test_noblob_update_is_exact_when_the_blob_is_not_mapped(lab, reader):
    """NOBLOB leaves out the unchanged TEXT column, which no template names: the row's keys
    are invalidated exactly, and no table-level event is needed."""
    tailer, _ = start(lab, reader)
    lab.cache("user:email:moved@x")
    session(lab, "NOBLOB", "UPDATE users SET email = 'moved@x' WHERE id = 6")
    wait_for(lambda: not lab.cached("user:6", "user:email:6@x", "user:email:moved@x"),
             what=f"the row's keys gone:\n{lab.log(tailer)}")
    update, = events_of(lab, "update")
    assert update.extra["absent"] == {"before": ["bio"], "after": ["bio"]}
    assert update.before["email"] == "6@x" and update.after["email"] == "moved@x"
    assert events_of(lab, "truncate") == []
    assert lab.cached(*CACHED) == [k for k in CACHED if k not in ("user:6", "user:email:6@x")]


def test_noblob_update_mode_row_needing_the_blob_is_invalidated_not_written(lab, reader):
    tables = {"users": {"keys": ["user:{id}"], "mode": "update",
                        "value_columns": ["id", "name", "bio"]}}
    tailer, engine = start(lab, reader, tables)
    lab.sql("UPDATE users SET name = 'full' WHERE id = 2")     # a FULL image: written
    wait_for(lambda: lab.cached("user:2"), what="user:2 written by update mode")
    session(lab, "NOBLOB", "UPDATE users SET name = 'partial' WHERE id = 2")
    wait_for(lambda: not lab.cached("user:2"), what=f"user:2 invalidated:\n{lab.log(tailer)}")
    last = events_of(lab, "update")[-1]
    assert last.extra["invalidate_only"] == "partial_row_image"
    assert "bio" not in last.after
    assert events_of(lab, "truncate") == []
    assert tailer.poll() is None
