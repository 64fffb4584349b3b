"""MariaDB system-versioned tables, pure: which logged rows change a current row, and how."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.fakedb import FakeConnection
from cachesync.producer_outbox.decode.versioning import TRX_ID, TRX_ID_MAXIMUM, Versioning

IMPLICIT = Versioning("row_start", "row_end", hidden=frozenset({"row_start", "row_end"}))
END_2038, END_2106 = "2038-01-19 03:14:07.999999", "2106-02-07 06:28:15.999999"
CLOSED = "2025-03-04 05:06:07.123456"


def row(v, end, start="2025-01-01 00:00:00.000000"):
    return {"id": 1, "v": v, "row_start": start, "row_end": end}


@pytest.mark.parametrize("end, current", [
    (END_2038, True), (END_2106, True), (CLOSED, False),
    (dt.datetime(2038, 1, 19, 3, 14, 7, 999999), True),      # the library's value, untrimmed
    (dt.datetime(2025, 3, 4, 5, 6, 7), False), (None, False)])
def test_current_means_row_end_at_its_types_maximum(end, current):
    assert IMPLICIT.is_current(row(1, end)) is current


def test_transaction_precise_versioning_uses_the_largest_transaction_id():
    trx = Versioning("s", "e", TRX_ID)
    assert trx.is_current({"id": 1, "e": TRX_ID_MAXIMUM})
    assert not trx.is_current({"id": 1, "e": 4711})


@pytest.mark.parametrize("op, before, after, expected", [
    # UPDATE: the current row updated, and the history row inserted beside it
    ("update", row(1, END_2038), row(2, END_2038), ("update", {"id": 1, "v": 1}, {"id": 1, "v": 2})),
    ("insert", None, row(1, CLOSED), None),
    # DELETE: logged as an update that closes the row
    ("update", row(2, END_2106), row(2, CLOSED), ("delete", {"id": 1, "v": 2}, None)),
    # DELETE HISTORY: deletes of history rows only
    ("delete", row(1, CLOSED), None, None),
    ("insert", None, row(3, END_2038), ("insert", None, {"id": 1, "v": 3})),
    ("delete", row(3, END_2038), None, ("delete", {"id": 1, "v": 3}, None)),
])
def test_a_logged_row_becomes_the_change_of_the_current_row_select_returns(op, before, after,
                                                                           expected):
    assert IMPLICIT.current_row(op, before, after) == expected


def test_visible_period_columns_stay_in_the_images():
    declared = Versioning("valid_from", "valid_to")
    image = {"id": 1, "valid_from": "2025-01-01 00:00:00.000000", "valid_to": END_2038}
    assert declared.current_row("insert", None, image) == ("insert", None, image)


def test_an_image_without_row_end_is_published_as_logged():
    assert IMPLICIT.current_row("update", {"id": 1}, {"id": 1, "v": 2}) == (
        "update", {"id": 1}, {"id": 1, "v": 2})


@pytest.mark.parametrize("logged, declared", [
    (("id", "row_end"), "id"), (("a", "b", "row_end"), ("a", "b")), ("id", "id"), ("", "")])
def test_the_event_key_is_the_declared_primary_key_without_row_end(logged, declared):
    assert IMPLICIT.declared_key(logged) == declared


# -- the encoder on a versioned table (rows as the library decodes them, no server) --------

class _Types:       # servertypes.ColumnTypes as read from a versioned table
    version = 1

    def of(self, db, table):
        return ()

    def versioning(self, db, table):
        return IMPLICIT

    def unread(self, db, table):
        return False


def _encode(mode: str, events, **spec):
    """(op, pk, before, after, Kafka key) of each record the encoder makes of ``events`` for
    ``app.users`` mapped in ``mode``, the table system-versioned (implicit columns)."""
    out, index = _events(mode, events, _Types(), **spec)
    return [(e.op, e.pk, e.before, e.after, key) for e, key in out], index


def _events(mode: str, events, types, **spec):
    """The (event, Kafka key) of each record ``_encode`` describes, the column types read by
    ``types``, and the next row index."""
    import types as namespaces

    from pymysqlreplication.constants import FIELD_TYPE

    from cachesync.producer_outbox.decode.matched import MatchedTables
    from cachesync.producer_outbox.encode.rowevents import RowEncoder
    from cachesync.producer_outbox.decode.rows import TxnContext
    from cachesync.schema.event import decode
    from cachesync.schema.mapping import parse_mappings

    mappings = parse_mappings({"app.users": {"keys": ["user:{id}"], "mode": mode, **spec}})
    encoder = RowEncoder(mappings, MatchedTables(mappings), types=types)
    ctx = TxnContext("mariadb:1", "0-1-42", 42, 0.0, gtid=True)
    out, index = [], 0
    for event in events:
        event.primary_key = ("id", "row_end")      # MariaDB appends row_end to the key
        event.table_map[event.table_id] = namespaces.SimpleNamespace(columns=[
            namespaces.SimpleNamespace(name=n, type=FIELD_TYPE.LONG)
            for n in ("id", "v", "row_start", "row_end")])
        records, index = encoder.rows_to_records(event, ctx, index, "app", "users",
                                                 lambda: "here")
        out += [(decode(r.value), r.key) for r in records]
    return out, index


def test_update_mode_writes_the_current_row_never_the_history_row():
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from tests.support.binlog import rows
    update = rows(UpdateRowsEvent, (row(1, END_2038), row(2, END_2038)))
    history = rows(WriteRowsEvent, row(1, CLOSED))
    delete = rows(UpdateRowsEvent, (row(2, END_2038), row(2, CLOSED)))
    records, index = _encode("update", [update, history, delete])
    assert records == [
        ("update", (("id", 1),), {"id": 1, "v": 1}, {"id": 1, "v": 2}, "app.users:1"),
        ("delete", (("id", 1),), {"id": 1, "v": 2}, None, "app.users:1")]
    assert index == 3               # the history row keeps its index: later ids do not move


def test_delete_mode_invalidates_both_images_keyed_by_the_declared_key():
    from pymysqlreplication.row_event import DeleteRowsEvent, WriteRowsEvent

    from tests.support.binlog import rows
    records, _ = _encode("delete", [rows(WriteRowsEvent, row(1, CLOSED)),
                                    rows(DeleteRowsEvent, row(1, CLOSED))])
    assert [(op, pk, key) for op, pk, _, _, key in records] == [
        ("insert", (("id", 1),), "app.users:1"), ("delete", (("id", 1),), "app.users:1")]


def test_periods_under_a_without_overlaps_key_are_found_in_show_create_table():
    from cachesync.producer_outbox.decode.versioning import overlap_periods
    create = ("CREATE TABLE `ap` (\n  `id` int(11) NOT NULL,\n  `s` date NOT NULL,\n"
              "  `e` date NOT NULL,\n  PERIOD FOR `p` (`s`, `e`),\n"
              "  PRIMARY KEY (`id`,`p` WITHOUT OVERLAPS)\n) ENGINE=InnoDB")
    assert overlap_periods(create) == (("p", "s", "e"),)
    assert overlap_periods(create.replace(",`p` WITHOUT OVERLAPS", "")) == ()
    assert overlap_periods("CREATE TABLE t (id int, s timestamp(6) GENERATED ALWAYS AS ROW "
                           "START, PERIOD FOR SYSTEM_TIME (s, e)) WITH SYSTEM VERSIONING") == ()


def test_value_columns_trim_after_the_current_row_is_told_from_history():
    """row_end is read before the images are trimmed to what the mapping needs."""
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from tests.support.binlog import rows
    records, _ = _encode("update", [rows(UpdateRowsEvent, (row(1, END_2038), row(2, END_2038))),
                                    rows(WriteRowsEvent, row(1, CLOSED))], value_columns=["v"])
    assert records == [("update", (("id", 1),), {"id": 1, "v": 1}, {"id": 1, "v": 2},
                        "app.users:1")]


class _Schema(FakeConnection):
    """information_schema of a server where ``app.users`` has implicit system versioning."""

    def execute(self, sql, args):
        self.versioning = "SYSTEM VERSIONED" in sql

    def fetchall(self):
        return [("app", "users", None, None, None, None)] if self.versioning else []

    def close(self):
        pass


def test_update_mode_rows_of_a_table_whose_types_could_not_be_read_go_out_invalidate_only(
        caplog):
    """A failed read leaves unknown whether the table is system-versioned: the history row
    an UPDATE logs (old values, same declared key) would be published as an insert and
    could overwrite the new value. Every update-mode row of the table goes out keys only
    (the consumer's fenced deletes), named in a WARNING and counted, until a read succeeds."""
    import pymysql
    from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

    from cachesync.producer_outbox.decode.servertypes import ColumnTypes
    from cachesync.producer_outbox.encode.rowevents import TYPES_UNREAD
    from cachesync.schema.event import INVALIDATE_ONLY
    from tests.support.binlog import rows
    up = [False]

    def connect():
        if not up[0]:
            raise pymysql.err.OperationalError(4151, "Access denied, this account is locked")
        return _Schema()
    types = ColumnTypes(connect, [("app", "users")])
    types.load()
    assert types.unread("app", "users") and types.failures == 1
    assert "app.users" in caplog.text and "invalidate-only" in caplog.text

    def logged():
        return [rows(UpdateRowsEvent, (row(1, END_2038), row(2, END_2038))),
                rows(WriteRowsEvent, row(1, CLOSED))]
    out, index = _events("update", logged(), types)
    # read as an ordinary table: row_end is in the logged key, no values are kept
    now, closed = {"id": 1, "row_end": END_2038}, {"id": 1, "row_end": CLOSED}
    assert [(e.op, e.before, e.after, e.extra) for e, _ in out] == [
        ("update", now, now, {INVALIDATE_ONLY: TYPES_UNREAD}),
        ("insert", None, closed, {INVALIDATE_ONLY: TYPES_UNREAD})]
    assert index == 2
    delete_mode, _ = _events("delete", logged(), types)     # keys only anyway: as logged
    assert [e.extra for e, _ in delete_mode] == [{}, {}]

    up[0] = True
    types.after_ddl("ALTER TABLE users COMMENT 'x'", "app")     # the next read succeeds
    assert not types.unread("app", "users")
    out, _ = _events("update", logged(), types)
    assert [(e.op, e.before, e.after, e.extra) for e, _ in out] == [
        ("update", {"id": 1, "v": 1}, {"id": 1, "v": 2}, {})]
