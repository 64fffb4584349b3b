"""Foreign-key cascades (pure parts): which mapped tables a parent row change reaches, what the
encoder publishes for it, and servers that log cascaded rows themselves (MySQL 9.6+ with
``innodb_native_foreign_keys=OFF``: no such binlog exists to test against, so that path is
tested here only)."""

from __future__ import annotations

import pymysql
import pytest

from cachesync.producer_outbox.unlogged_changes.cascades import FK_CASCADE, Cascades
from cachesync.producer_outbox.unlogged_changes.fkschema import ForeignKeys, logged_by_setting
from cachesync.producer_outbox.unlogged_changes.foreignkeys import DELETE, UPDATE, CascadeGraph, ForeignKey
from cachesync.producer_outbox.ports import Record, TableEvent
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.schema.event import decode
from cachesync.schema.mapping import parse_mappings
from tests.support.fakedb import FakeConnection


def fk(child, cols, parent, pcols, on_delete="CASCADE", on_update="RESTRICT", name=None):
    return ForeignKey(name or f"{child}_fk", ("d", child), tuple(cols), ("d", parent),
                      tuple(pcols), on_delete, on_update)


CHAIN = [fk("child", ["parent_id"], "parent", ["id"], "CASCADE", "CASCADE"),
         fk("nullchild", ["parent_id"], "parent", ["id"], "SET NULL", "SET NULL"),
         fk("middle", ["parent_id"], "parent", ["id"], "CASCADE", "CASCADE"),
         fk("leaf", ["parent_id", "n"], "middle", ["parent_id", "n"], "CASCADE", "CASCADE"),
         fk("kept", ["parent_id"], "parent", ["id"], "RESTRICT", "NO ACTION")]
MAPPED = {"parent", "child", "nullchild", "leaf", "kept"}


def graph(fks=CHAIN, mapped=MAPPED):
    return CascadeGraph(fks, lambda db, t: t in mapped)


def tables(hits):
    return {(h.table[1], h.depth, h.change) for h in hits}


def test_a_delete_reaches_every_mapped_table_below_through_an_unmapped_one():
    g = graph()
    assert g.sources == {("d", "parent"), ("d", "middle")}
    hits = g.reached("d", "parent", (DELETE, frozenset()))
    assert tables(hits) == {("child", 1, DELETE), ("nullchild", 1, UPDATE), ("leaf", 2, DELETE)}


def test_a_key_update_reaches_the_tables_whose_columns_it_rewrites():
    g = graph()
    change = g.row_change("d", "parent", UPDATE, {"id": 1, "x": 0}, {"id": 5, "x": 0})
    assert change == (UPDATE, frozenset({"id"}))
    assert tables(g.reached("d", "parent", change)) == {
        ("child", 1, UPDATE), ("nullchild", 1, UPDATE), ("leaf", 2, UPDATE)}
    # another column changed: nothing cascades
    assert g.row_change("d", "parent", UPDATE, {"id": 1, "x": 0}, {"id": 1, "x": 1}) is None
    assert g.row_change("d", "parent", "insert", None, {"id": 1}) is None


def test_set_null_on_delete_reaches_no_further_than_the_columns_it_nulls():
    fks = [fk("a", ["p"], "parent", ["id"], "SET NULL"),
           fk("b", ["a_id"], "a", ["id"], "CASCADE", "CASCADE")]   # b references a.id, not a.p
    assert tables(graph(fks, {"a", "b"}).reached("d", "parent", (DELETE, frozenset()))) == {
        ("a", 1, UPDATE)}


def test_a_self_reference_ends_and_includes_its_own_table():
    fks = [fk("node", ["up"], "node", ["id"], "CASCADE")]
    hits = graph(fks, {"node"}).reached("d", "node", (DELETE, frozenset()))
    # the direct children (keys of their FK columns render from the row) and the rows below
    assert tables(hits) == {("node", 1, DELETE), ("node", 2, DELETE)}


def test_set_default_and_unknown_rules_count_as_changes():
    fks = [fk("a", ["p"], "parent", ["id"], "SET DEFAULT"),
           fk("b", ["p"], "parent", ["id"], "UNKNOWN", "UNKNOWN")]
    g = graph(fks, {"a", "b"})
    assert tables(g.reached("d", "parent", (DELETE, frozenset()))) == {
        ("a", 1, UPDATE), ("b", 1, DELETE)}
    assert not fks[1].rules_known


def test_lint_view_names_each_cascading_key_into_a_mapped_table():
    named = {f.name: t for f, t in graph().into_mapped()}
    assert named == {"child_fk": (("d", "child"),), "nullchild_fk": (("d", "nullchild"),),
                     "middle_fk": (("d", "leaf"),), "leaf_fk": (("d", "leaf"),)}


@pytest.mark.parametrize("value, logged", [("OFF", True), ("0", True), ("ON", False),
                                           ("1", False), (None, None), ("weird", None)])
def test_the_setting_not_the_version_says_whether_cascades_are_logged(value, logged):
    assert logged_by_setting(value) is logged


class Keys:
    def __init__(self, logged=None, fks=CHAIN):
        self.graph, self.logged, self.version = graph(fks), logged, 1


MAPPINGS = parse_mappings({
    "d.parent": {"keys": ["parent:{id}"]},
    "d.child": {"keys": ["child:byparent:{parent_id}"]},              # FK columns only
    "d.nullchild": {"keys": ["nullchild:{id}", "nullchild:byparent:{parent_id}"]},
    "d.leaf": {"keys": ["leaf:{id}"]}, "d.kept": {"keys": ["kept:{id}"]}})
CTX = TxnContext("mariadb:1", "0-1-9", 9, 1.0, gtid=True)


def test_the_encoder_renders_fk_only_keys_and_invalidates_the_other_tables_once():
    cascades = Cascades(Keys(), MAPPINGS)
    out: list = []
    rows = [({"id": 1}, None), ({"id": 2}, None)]
    assert cascades.rows(CTX, "d", "parent", DELETE, rows, 3, out) == 3 + len(out)
    whole = [i.change for i in out if isinstance(i, TableEvent)]
    assert {(c.table, c.reason) for c in whole} == {("nullchild", FK_CASCADE), ("leaf", FK_CASCADE)}
    rendered = [decode(r.value) for r in out if isinstance(r, Record)]
    assert [(e.table, e.op, e.before) for e in rendered] == [
        ("child", "delete", {"parent_id": 1}), ("nullchild", "delete", {"parent_id": 1}),
        ("child", "delete", {"parent_id": 2}), ("nullchild", "delete", {"parent_id": 2})]
    assert rendered[1].extra["absent"] == {"before": ["id"], "after": []}
    assert cascades.cascade_rows == 2 and cascades.cascade_tables == 2


def test_a_server_that_logs_cascaded_rows_needs_no_invalidation():
    assert not Cascades(Keys(logged=True), MAPPINGS).covers("d", "parent")
    assert Cascades(Keys(logged=None), MAPPINGS).covers("d", "parent")    # unsure: invalidate
    assert Cascades(Keys(logged=False), MAPPINGS).covers("d", "middle")


def test_rows_that_cannot_be_decoded_invalidate_every_table_their_changes_could_reach():
    cascades = Cascades(Keys(), MAPPINGS)
    out: list = []
    assert cascades.undecodable(CTX, "d", "parent", 5, out) == 5 + len(out)
    assert all(isinstance(i, TableEvent) for i in out)
    # every mapped table below (even child, whose keys a decoded row would have rendered)
    assert {(i.change.table, i.change.reason) for i in out} == {
        ("child", FK_CASCADE), ("nullchild", FK_CASCADE), ("leaf", FK_CASCADE)}


class _Schema(FakeConnection):
    """information_schema's foreign keys (``server.rows``, one tuple per key column) and the
    native-foreign-keys setting (absent); ``server.down`` makes every read fail."""

    def __init__(self, server):
        self.server = server

    def execute(self, sql, args=None):
        self.sql = sql
        self.server.reads += "referential_constraints" in sql

    def fetchall(self):
        return list(self.server.rows)

    def fetchone(self):
        return None

    def commit(self):
        pass

    def close(self):
        pass


class _Server:
    def __init__(self):
        self.rows, self.reads, self.down = [], 0, False

    def connect(self):
        if self.down:
            raise pymysql.err.OperationalError(2003, "down")
        return _Schema(self)


ORDER_FK = ("app", "fk_order", "order_items", "order_id", "app", "orders", "id", "CASCADE",
            "RESTRICT")


def _loaded():
    server = _Server()
    fks = ForeignKeys(server.connect, lambda db, table: table == "order_items")
    fks.load()
    return server, fks


@pytest.mark.parametrize("ddl", [
    "ALTER TABLE order_items ADD FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE",
    "/* gh-ost */ ALTER TABLE order_items ADD CONSTRAINT f FOREIGN KEY (order_id) "
    "REFERENCES orders (id) ON DELETE CASCADE",
    "/*!40101 ALTER TABLE order_items ADD FOREIGN KEY (order_id) REFERENCES orders (id) */",
    "-- deploy 7\nCREATE TABLE order_items (order_id INT, "
    "FOREIGN KEY (order_id) REFERENCES orders (id))",
    "DROP TABLE IF EXISTS orders", "RENAME TABLE orders TO orders_old", "DROP DATABASE app"])
def test_table_ddl_reloads_the_foreign_keys_whatever_comment_leads_it(ddl):
    server, fks = _loaded()
    assert fks.graph.foreign_keys == () and server.reads == 1
    server.rows = [ORDER_FK]
    fks.after_ddl(ddl)
    assert server.reads == 2 and [fk.name for fk in fks.graph.foreign_keys] == ["fk_order"]
    assert fks.graph.is_source("app", "orders") and fks.version == 2


@pytest.mark.parametrize("ddl", ["ALTER USER app IDENTIFIED BY 'x'", "CREATE USER b",
                                 "DROP VIEW v", "CREATE INDEX i ON t (a)", "ALTER EVENT e DISABLE"])
def test_ddl_that_names_no_table_reads_nothing(ddl):
    server, fks = _loaded()
    fks.after_ddl(ddl)
    assert server.reads == 1


def test_a_reload_that_finds_the_same_foreign_keys_keeps_the_plans_and_says_nothing(caplog):
    server, fks = _loaded()
    server.rows = [ORDER_FK]
    fks.after_ddl("ALTER TABLE order_items ADD x INT")
    assert fks.version == 2 and "changes rows of app.order_items" in caplog.text
    caplog.clear()
    fks.after_ddl("ALTER TABLE order_items ADD y INT")
    assert server.reads == 3 and fks.version == 2 and caplog.text == ""


def test_a_failed_read_is_counted_and_keeps_what_was_known(caplog):
    server, fks = _loaded()
    server.rows = [ORDER_FK]
    fks.after_ddl("ALTER TABLE order_items ADD x INT")
    server.down = True
    fks.after_ddl("ALTER TABLE order_items DROP FOREIGN KEY fk_order")
    assert fks.failures == 1 and fks.version == 2
    assert [fk.name for fk in fks.graph.foreign_keys] == ["fk_order"]
    assert "could not read the foreign keys" in caplog.text
    assert "(1 foreign key(s) known)" in caplog.text
