"""``Session`` on the real MariaDB: a unit of work commits whole or not at all, in both
modes, and ``run_each`` on an autocommit session commits statement by statement."""

from __future__ import annotations

import uuid

import pytest

from cachesync.runtime.mysql import Session

pytestmark = pytest.mark.integration


@pytest.fixture
def scratch(stack):
    db = f"session_{uuid.uuid4().hex[:8]}"
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY) ENGINE=InnoDB")

    def rows():
        with stack.admin(db) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM t ORDER BY id")
            return [r[0] for r in cur.fetchall()]

    def connect(**overrides):
        return stack.admin(db, autocommit=overrides.get("autocommit", False))
    yield connect, rows
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {db}")


class Boom(Exception):
    pass


def _insert_then(fail, *ids):
    def work(cur):
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s)", (i,))
        if fail is not None:
            raise fail
        return len(ids)
    return work


@pytest.mark.parametrize("autocommit", [False, True], ids=["transactional", "autocommit"])
def test_a_unit_that_fails_commits_nothing_now_or_later(scratch, autocommit):
    connect, rows = scratch
    session = Session(connect, autocommit=autocommit)
    assert session.run(_insert_then(None, 1, 2)) == 2
    with pytest.raises(Boom):
        session.run(_insert_then(Boom(), 3, 4))       # not a MySQL error: still rolled back
    assert rows() == [1, 2]
    assert session.run(_insert_then(None, 5)) == 1   # a later unit does not commit 3 and 4
    assert rows() == [1, 2, 5]
    with pytest.raises(Exception, match="Duplicate"):
        session.run(_insert_then(None, 6, 1))
    assert rows() == [1, 2, 5]
    session.close()


def test_run_each_commits_each_statement_as_it_returns(scratch):
    connect, rows = scratch
    session = Session(connect, autocommit=True)
    assert session.run_each(_insert_then(None, 1)) == 1
    assert rows() == [1]                                # committed without a COMMIT
    with pytest.raises(Boom):
        session.run_each(_insert_then(Boom(), 2, 3))
    assert rows() == [1, 2, 3]                          # each statement was its own transaction
    session.close()


def test_run_each_without_autocommit_is_one_transaction(scratch):
    connect, rows = scratch
    session = Session(connect)
    with pytest.raises(Boom):
        session.run_each(_insert_then(Boom(), 1, 2))
    assert rows() == []
    session.close()
