"""Table identity and the binlog library's errors (pure; the restart itself is in
tests/integration/test_table_identity.py)."""

import pymysql
import pytest
from pymysqlreplication.row_event import WriteRowsEvent

from cachesync.producer_outbox.binlog.reading import LostPositionError, TableMaps, read_events
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.schema.errors import FatalError, RetryableError
from tests.support.binlog import (MARIADB, _Checkpoints, _Publisher, _Stream, MAPPINGS,
                                         mariadb_gtid, rows, table_map, u, xid)
from cachesync.runtime.mysql import MySQLParams
from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.tailer import Tailer, TailerOptions


def row_event(schema, table, table_id):
    event = object.__new__(WriteRowsEvent)
    event.schema, event.table, event.table_id = schema, table, table_id
    return event


def test_a_map_names_its_table_until_the_group_ends():
    maps = TableMaps()
    maps.add(25, "app", "users")
    assert maps.table_of(row_event("app", "users", 25), lambda: "f:1") == ("app", "users")
    maps.reset()
    with pytest.raises(FatalError, match="at f:2 for table id 25 has no table map in its event group"):
        maps.table_of(row_event("app", "users", 25), lambda: "f:2")


def test_rows_decoded_against_another_table_are_refused():
    maps = TableMaps()
    maps.add(25, "app", "other")          # this group's map: id 25 is app.other
    with pytest.raises(FatalError, match="table id 25 is app.other .* decoded it as app.users"):
        maps.table_of(row_event("app", "users", 25), lambda: "f:1")


def failing(error):
    yield "first"
    raise error


@pytest.mark.parametrize("error, expected, text", [
    (AssertionError("Result length not requested length"), FatalError,
     "cannot decode the binlog event at f:9: AssertionError: Result length"),
    (pymysql.err.OperationalError(1236, "Could not find first log file name in binary log "
                                        "index file"), LostPositionError,
     r"binlog position f:9 is gone from the server .* `cachesync resync`"),
    (pymysql.err.OperationalError(2013, "Lost connection"), RetryableError, "connection failed"),
    (pymysql.err.InterfaceError(0, ""), RetryableError, "connection lost"),
])
def test_library_errors_become_cachesync_errors(error, expected, text):
    events = read_events(failing(error), lambda: "f:9")
    assert next(events) == "first"
    with pytest.raises(expected, match=text) as raised:
        next(events)
    assert raised.type is expected


def test_the_tailer_publishes_rows_by_the_map_of_their_own_group():
    """Table id 25 is app.users in the first transaction, app.orders (unmapped) in the
    next one, as after a server restart: only the first transaction's row is published."""
    events = [mariadb_gtid(0, 1, 42), table_map("app", "users", 25),
              rows(WriteRowsEvent, u(1, "a@x")), xid(1),
              mariadb_gtid(0, 1, 43), table_map("app", "orders", 25),
              rows(WriteRowsEvent, u(2, "b@x"), table="orders"), xid(2)]
    events[6].table_id = 25
    publisher = _Publisher()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(events), MARIADB, Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4)))
    assert [(e.table, e.pk) for _, e in publisher.sent] == [("users", (("id", 1),))]


def test_a_row_event_without_its_map_stops_the_tailer():
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, u(1, "a@x")), xid(1)]
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), _Publisher(), _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    with pytest.raises(FatalError, match="no table map"):
        tailer.pipeline.run(tailer.binlog_source(_Stream(events), MARIADB, Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4)))
