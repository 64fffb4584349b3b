"""The tailer on built binlog events (tests/support/binlog), MySQL and MariaDB GTIDs, no server."""

from dataclasses import replace

import pymysql
import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cachesync.producer_outbox.binlog_source import current_position, open_stream
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.runtime.mysql import MySQLParams
from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.schema.errors import RetryableError
from cachesync.schema.ids import binlog_message_id, binlog_version
from tests.support.binlog import (MAPPINGS, MARIADB, MYSQL, OTHER, UUID, _Checkpoints, _Publisher,
                                  _Stream, mariadb_gtid, mysql_gtid, rows, u,
                                  with_table_maps, xid)


def tail(events, info, start_gtid):
    publisher, checkpoints = _Publisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints, MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), info, Checkpoint(info.identity, start_gtid, "binlog.000003", 4)))
    tailer.pipeline.save_checkpoint()
    return publisher.sent, [cp.gtid for cp in checkpoints.saved]


MYSQL_EVENTS = [
    mysql_gtid(UUID, 6), rows(WriteRowsEvent, u(1, "a@x"), u(2, "b@x")), xid(100),
    mysql_gtid(UUID, 7), rows(UpdateRowsEvent, (u(1, "a@x"), u(1, "a2@x"))), xid(101),
    mysql_gtid(OTHER, 1), rows(DeleteRowsEvent, u(2, "b@x")), xid(102),
    mysql_gtid(UUID, 8), rows(WriteRowsEvent, u(9, "z@x"), table="orders"), xid(103),  # unmapped
]


def test_library_parses_the_built_gtid_bytes():
    assert mysql_gtid(UUID, 6).gtid == f"{UUID}:6"
    assert mariadb_gtid(0, 1, 42).gtid == "0-1-42"


def test_mysql_gtid_set_checkpoints_ids_and_versions():
    sent, checkpoints = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    events = [e for _, e in sent]
    assert [(e.op, e.source.position, e.source.row_index) for e in events] == [
        ("insert", f"{UUID}:6", 0), ("insert", f"{UUID}:6", 1),
        ("update", f"{UUID}:7", 0), ("delete", f"{OTHER}:1", 0)]
    # ids come from the GTID alone (issue 14: the same from a replica or a promoted one)
    assert [e.id for e in events] == [binlog_message_id("gtid", f"{UUID}:6", 0),
                                      binlog_message_id("gtid", f"{UUID}:6", 1),
                                      binlog_message_id("gtid", f"{UUID}:7", 0),
                                      binlog_message_id("gtid", f"{OTHER}:1", 0)]
    # versions count the transactions of the set (issue 14): OTHER:1 is the 8th, not "1",
    # so a new primary's uuid numbered from 1 does not send versions backwards
    assert [e.version for e in events] == [binlog_version(6, 0), binlog_version(6, 1),
                                           binlog_version(7, 0), binlog_version(8, 0)]
    assert [k for k, _ in sent] == ["app.users:1", "app.users:2", "app.users:1", "app.users:2"]
    # one checkpoint per transaction boundary, each a merged GTID set; the unmapped
    # transaction still advances it (its GTID is executed, nothing to publish)
    assert list(dict.fromkeys(checkpoints)) == [f"{UUID}:1-6", f"{UUID}:1-7",
                                                f"{UUID}:1-7,{OTHER}:1", f"{UUID}:1-8,{OTHER}:1"]


def test_mysql_replay_and_resume_give_the_same_ids():
    first, _ = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    again, _ = tail(MYSQL_EVENTS, MYSQL, f"{UUID}:1-5")
    assert [e.id for _, e in again] == [e.id for _, e in first]
    # restart after the first transaction: the server sends what the set lacks
    resumed, checkpoints = tail(MYSQL_EVENTS[3:], MYSQL, f"{UUID}:1-6")
    assert [e.id for _, e in resumed] == [e.id for _, e in first[2:]]
    assert checkpoints[-1] == f"{UUID}:1-8,{OTHER}:1"


def test_mariadb_gtids_keep_their_ids_and_state():
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, u(1, "a@x")), xid(1),
              mariadb_gtid(1, 2, 7), rows(DeleteRowsEvent, u(1, "a@x")), xid(2)]
    sent, checkpoints = tail(events, MARIADB, "0-1-41")
    assert [e.id for _, e in sent] == [binlog_message_id("gtid", "0-1-42", 0),
                                       binlog_message_id("gtid", "1-2-7", 0)]
    # versions sum the domains' seq_no (issue 14): 1-2-7 after 0-1-42 is 49, not 7
    assert [e.version for _, e in sent] == [binlog_version(42, 0), binlog_version(49, 0)]
    assert list(dict.fromkeys(checkpoints)) == ["0-1-42", "0-1-42,1-2-7"]


def test_a_replica_or_a_promoted_replica_gives_the_primarys_ids_and_versions():
    """Read from another server (a replica with log_slave_updates logs the primary's GTIDs),
    the same transactions get the same ids and versions, so the consumer's dedup skips them
    and update-mode fences keep growing after a promotion (MariaDB continues the domain's
    sequence numbers under the new server id)."""
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, u(1, "a@x")), xid(1)]
    from_primary, _ = tail(events, MARIADB, "0-1-41")
    from_replica, _ = tail(events, replace(MARIADB, server_id=2), "0-1-41")
    assert [e.id for _, e in from_replica] == [e.id for _, e in from_primary]
    assert [e.version for _, e in from_replica] == [e.version for _, e in from_primary]
    after_promotion, _ = tail([mariadb_gtid(0, 2, 43), rows(WriteRowsEvent, u(1, "b@x")), xid(2)],
                              replace(MARIADB, server_id=2), "0-1-42")
    assert after_promotion[0][1].version > from_primary[0][1].version


def test_versions_keep_growing_after_a_mysql_promotion():
    """MySQL's new primary writes under its own uuid from 1: the versions of its transactions
    still come after every one the old primary wrote."""
    old = [mysql_gtid(UUID, 8), rows(WriteRowsEvent, u(1, "a@x")), xid(1)]
    new = [mysql_gtid(OTHER, 1), rows(UpdateRowsEvent, (u(1, "a@x"), u(1, "b@x"))), xid(2)]
    before, _ = tail(old, MYSQL, f"{UUID}:1-7")
    after, _ = tail(new, replace(MYSQL, server_uuid=OTHER), f"{UUID}:1-8")
    assert after[0][1].version > before[0][1].version


def test_a_gtid_that_does_not_advance_the_history_is_counted_and_logged(caplog):
    """MariaDB without gtid_strict_mode can log a lower seq_no in a domain: the versions of
    that transaction are not newer, which the tailer says rather than keeps quiet."""
    publisher, checkpoints = _Publisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints, MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    events = [mariadb_gtid(0, 1, 42), rows(WriteRowsEvent, u(1, "a@x")), xid(1),
              mariadb_gtid(0, 2, 40), rows(WriteRowsEvent, u(2, "b@x")), xid(2)]
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), MARIADB, Checkpoint(MARIADB.identity, "0-1-41")))
    assert tailer.versions_not_newer == 1
    assert "0-2-40 does not advance the GTID history" in caplog.text
    assert len(publisher.sent) == 2          # published all the same (deletes still apply)


def test_gtid_inside_an_open_transaction_restarts_from_the_checkpoint():
    events = [mysql_gtid(UUID, 6), rows(WriteRowsEvent, u(1, "a@x")), mysql_gtid(UUID, 6)]
    with pytest.raises(RetryableError, match="inside transaction"):
        tail(events, MYSQL, f"{UUID}:1-5")


@pytest.mark.parametrize("info, gtid, is_mariadb", [
    (MYSQL, f"{UUID}:1-8,{OTHER}:1", False),
    (MARIADB, "0-1-42,1-2-7", True),
])
def test_resume_asks_the_server_by_gtid(info, gtid, is_mariadb):
    settings = TailerSettings(pack_rows=1)
    stream = open_stream(MySQLParams("h", 1, "u", "p").client_options(), settings.server_id,
                         settings.reader, info, Checkpoint(info.identity, gtid, "binlog.000003", 4))
    assert (stream.auto_position, stream.is_mariadb) == (gtid, is_mariadb)


class _Cursor:
    """Answers the tailer's first-start queries the way MySQL 8.0 with gtid_mode=ON does."""

    def __init__(self, answers):
        self._answers, self._row = answers, None

    def execute(self, sql):
        if sql not in self._answers:       # e.g. SHOW BINARY LOG STATUS before MySQL 8.2
            raise pymysql.err.ProgrammingError(1064, f"You have an error in your SQL syntax: {sql}")
        self._row = self._answers[sql]

    def fetchone(self):
        return self._row

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Server:
    def __init__(self, answers):
        self.answers = answers

    def connect(self, **_):
        server = self

        class Conn:
            def cursor(self):
                return _Cursor(server.answers)

            def close(self):
                pass
        return Conn()


@pytest.mark.parametrize("status", ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"])  # 8.4 / 8.0
@pytest.mark.parametrize("mode, executed, expected", [
    ("ON", f"{OTHER.upper()}:1-3,\n{UUID}:1-5", f"{UUID}:1-5,{OTHER}:1-3"),
    ("ON", "", None),                           # GTIDs on, nothing executed yet
    ("OFF", "", None),                          # file:pos only
])
def test_first_start_on_mysql_begins_at_gtid_executed(status, mode, executed, expected):
    server = _Server({"SELECT @@GLOBAL.gtid_mode, @@GLOBAL.gtid_executed": (mode, executed),
                      status: ("binlog.000007", 1234)})
    assert current_position(server.connect, MYSQL) == Checkpoint(UUID, expected, "binlog.000007", 1234)
