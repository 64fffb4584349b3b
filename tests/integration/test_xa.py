"""Issue 12, XA on a real MariaDB: rows are published at XA COMMIT, never at PREPARE,
nothing at XA ROLLBACK, and a tailer killed between PREPARE and COMMIT loses nothing."""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

ACCT_DDL = "CREATE TABLE acct (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL)"
ACCT = {"acct": {"keys": ["acct:{id}"], "mode": "update", "value_columns": ["id", "name"]}}


@pytest.fixture
def pipeline(lab):
    lab.sql(ACCT_DDL)
    cfg = lab.write_config(ACCT, consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO acct VALUES (1, 'committed')")
    return lab, cfg, tailer, engine


def value(lab, key="acct:1"):
    return lab.redis.get(lab.prefix + key)


def xa_prepare(lab, xid: str, *statements: str):
    """XA START .. XA PREPARE on a connection that then disconnects (the prepared
    transaction survives it, as on a real coordinator's crash)."""
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute(f"XA START '{xid}'")
        for statement in statements:
            cur.execute(statement)
        cur.execute(f"XA END '{xid}'")
        cur.execute(f"XA PREPARE '{xid}'")


def marker(lab, n: int):
    """A committed row after the XA: once its key is written, everything before it was read."""
    lab.sql(f"INSERT INTO acct VALUES ({n}, 'marker')")
    wait_for(lambda: value(lab, f"acct:{n}") is not None, what=f"marker row {n} applied")


def test_prepared_rows_wait_for_xa_commit(pipeline):
    lab, *_ = pipeline
    wait_for(lambda: value(lab) == b'{"id":1,"name":"committed"}', what="acct:1 written")
    xa_prepare(lab, "x1", "UPDATE acct SET name = 'prepared' WHERE id = 1")
    marker(lab, 100)
    assert value(lab) == b'{"id":1,"name":"committed"}'     # not published at PREPARE
    lab.sql("XA COMMIT 'x1'")
    wait_for(lambda: value(lab) == b'{"id":1,"name":"prepared"}', what="published at XA COMMIT")


def test_xa_rollback_publishes_nothing(pipeline):
    lab, *_ = pipeline
    wait_for(lambda: value(lab) == b'{"id":1,"name":"committed"}', what="acct:1 written")
    xa_prepare(lab, "x2", "UPDATE acct SET name = 'never' WHERE id = 1")
    lab.sql("XA ROLLBACK 'x2'")
    marker(lab, 101)
    assert value(lab) == b'{"id":1,"name":"committed"}'
    assert not any(b"never" in e.value for e in lab.topic_events())


def test_xa_commit_one_phase(pipeline):
    lab, *_ = pipeline
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("XA START 'x3'")
        cur.execute("UPDATE acct SET name = 'one phase' WHERE id = 1")
        cur.execute("XA END 'x3'")
        cur.execute("XA COMMIT 'x3' ONE PHASE")
    wait_for(lambda: value(lab) == b'{"id":1,"name":"one phase"}', what="one-phase commit")


def test_tailer_killed_between_prepare_and_commit_loses_nothing(pipeline):
    lab, cfg, tailer, engine = pipeline
    wait_for(lambda: value(lab) == b'{"id":1,"name":"committed"}', what="acct:1 written")
    xa_prepare(lab, "x4", "UPDATE acct SET name = 'after kill' WHERE id = 1",
               "INSERT INTO acct VALUES (2, 'new')")
    marker(lab, 102)            # the tailer read past the prepare (its checkpoint must not)
    assert value(lab) == b'{"id":1,"name":"committed"}'
    lab.kill9(tailer)
    lab.sql("XA COMMIT 'x4'")
    lab.start_tailer(cfg)
    wait_for(lambda: value(lab) == b'{"id":1,"name":"after kill"}'
             and value(lab, "acct:2") == b'{"id":2,"name":"new"}', what="both XA rows published")
    events = [e for e in lab.topic_events() if b"after kill" in e.value]
    assert len(events) == 1        # published once, after the commit only


def test_a_prepared_transaction_over_the_buffer_invalidates_its_tables_at_commit(lab):
    lab.sql(ACCT_DDL)
    cfg = lab.write_config(ACCT, tailer={"xa_buffer_rows": 5}, consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache("acct:500", "acct:501")
    xa_prepare(lab, "big", "INSERT INTO acct SELECT seq, 'bulk' FROM seq_1_to_20")
    marker(lab, 102)
    assert lab.cached("acct:500", "acct:501") == ["acct:500", "acct:501"]   # nothing at PREPARE
    lab.sql("XA COMMIT 'big'")
    wait_for(lambda: not lab.cached("acct:500", "acct:501"), what="acct invalidated at COMMIT")
    assert not any(b"bulk" in e.value for e in lab.topic_events())      # no row was held
    assert "over tailer.xa_buffer_rows" in lab.log(tailer)
    wait_for(lambda: engine.stats.table_invalidations >= 1, what="a table-level invalidation")
