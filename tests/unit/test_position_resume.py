"""Resuming a stored checkpoint by its file and position, confirmed by its GTID state: the
first transaction read there must be the one right after the state, else the source reads
again from the GTID state and nothing read at the position is published. No server."""

from __future__ import annotations

from dataclasses import replace

import pymysql
import pytest
from pymysqlreplication.row_event import WriteRowsEvent

from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog_source import by_position, open_stream
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.runtime.config import TailerSettings
from cachesync.runtime.mysql import MySQLParams
from cachesync.schema.errors import RetryableError
from cachesync.schema.gtid import MARIADB as MARIADB_FLAVOR, MYSQL as MYSQL_FLAVOR, Gtid, GtidState
from tests.support.binlog import (MAPPINGS, MARIADB, MYSQL, OTHER, UUID, _Checkpoints, _Publisher,
                                  _Stream, mariadb_gtid, mysql_gtid, rows, u, with_table_maps,
                                  xid)


class _Failing(_Stream):
    """A stream whose first read fails as the server fails it."""

    def __init__(self, error: Exception):
        super().__init__()
        self.error = error

    def __iter__(self):     # as the library's: it connects at the first read
        raise self.error
        yield


class _Reopen:
    """reopen(): the stream at the GTID state, counted."""

    def __init__(self, events):
        self.events, self.calls = events, 0

    def __call__(self):
        self.calls += 1
        return _Stream(with_table_maps(self.events))


def txn(gtid, row_id):
    return [gtid, rows(WriteRowsEvent, u(row_id, f"{row_id}@x")), xid(row_id)]


def resume(position_stream, reopen: _Reopen, info, gtid: str):
    """Tail from a checkpoint at ``gtid`` whose position stream is ``position_stream``: the
    row ids published, the checkpoints' GTIDs and the source."""
    publisher, checkpoints = _Publisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints, MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    start = Checkpoint(info.identity, gtid, "binlog.000003", 1234)
    source = tailer.binlog_source(position_stream, info, start, reopen=reopen)
    tailer.pipeline.run(source)
    tailer.pipeline.save_checkpoint()
    return [int(key.rsplit(":", 1)[1]) for key, _ in publisher.sent], [cp.gtid for cp in checkpoints.saved], source


AFTER_41 = txn(mariadb_gtid(0, 1, 42), 1) + txn(mariadb_gtid(0, 1, 43), 2)


def test_a_position_whose_first_transaction_follows_the_checkpoint_is_read_on():
    reopen = _Reopen(AFTER_41)
    ids, checkpoints, source = resume(_Stream(with_table_maps(AFTER_41)), reopen, MARIADB, "0-1-41")
    assert ids == [1, 2] and checkpoints[-1] == "0-1-43"
    assert reopen.calls == 0 and source.resumed_by == "position"


@pytest.mark.parametrize("at_position, why", [
    (txn(mariadb_gtid(0, 1, 43), 2), "skips 0-1-42"),
    (AFTER_41[3:] + txn(mariadb_gtid(0, 1, 44), 3), "skips 0-1-42"),
    (txn(mariadb_gtid(0, 1, 41), 9) + AFTER_41, "goes back to 0-1-41"),
    (txn(mariadb_gtid(1, 1, 1), 9), "a domain the checkpoint does not hold"),
    (AFTER_41[1:], "a rows event before any GTID"),
    ([xid(7)] + AFTER_41, "an XID before any GTID"),
])
def test_a_position_that_does_not_follow_the_checkpoint_is_left_for_its_gtid_state(at_position, why):
    """Whatever comes first at the position, unless it is the transaction right after the
    checkpoint's state, nothing of it is published: the GTID state is read instead."""
    reopen, stream = _Reopen(AFTER_41), _Stream(with_table_maps(at_position))
    ids, checkpoints, source = resume(stream, reopen, MARIADB, "0-1-41")
    assert ids == [1, 2], why
    assert stream.closed
    assert checkpoints[-1] == "0-1-43" and reopen.calls == 1 and source.resumed_by == "gtid"


@pytest.mark.parametrize("error", [
    pymysql.err.OperationalError(1236, "Could not find first log file name in binary log index file"),
    pymysql.err.OperationalError(1236, "Client requested master to start replication from "
                                       "position > file size"),
    pymysql.err.InterfaceError("connection lost"),
])
def test_a_position_the_server_cannot_read_is_left_for_the_gtid_state(error):
    reopen = _Reopen(AFTER_41)
    ids, _, source = resume(_Failing(error), reopen, MARIADB, "0-1-41")
    assert ids == [1, 2] and reopen.calls == 1 and source.resumed_by == "gtid"


def test_an_error_reading_by_gtid_after_the_fallback_is_raised_as_before():
    """Only the position's reading falls back, once: the GTID state's errors are the tailer's
    (a lost position stops it naming the state, a lost connection restarts it)."""
    def reopen():
        return _Failing(pymysql.err.InterfaceError("connection lost"))
    with pytest.raises(RetryableError, match="binlog connection lost"):
        resume(_Failing(pymysql.err.OperationalError(1236, "gone")), reopen, MARIADB, "0-1-41")


def test_mysql_positions_are_confirmed_per_server_uuid():
    events = txn(mysql_gtid(UUID, 6), 1) + txn(mysql_gtid(OTHER, 1), 2)
    reopen = _Reopen(events)
    ids, checkpoints, source = resume(_Stream(with_table_maps(events)), reopen, MYSQL,
                                      f"{UUID}:1-5")
    assert ids == [1, 2] and reopen.calls == 0 and checkpoints[-1] == f"{UUID}:1-6,{OTHER}:1"
    # the next transaction of another uuid cannot be told from a skipped one
    ids, _, source = resume(_Stream(with_table_maps(events[3:])), _Reopen(events[3:]), MYSQL,
                            f"{UUID}:1-5")
    assert ids == [2] and source.resumed_by == "gtid"


def test_heartbeats_and_rotations_before_the_first_transaction_are_fine():
    from pymysqlreplication.event import HeartbeatLogEvent, RotateEvent
    heartbeat = HeartbeatLogEvent.__new__(HeartbeatLogEvent)
    rotate = RotateEvent.__new__(RotateEvent)
    reopen = _Reopen(AFTER_41)
    ids, _, source = resume(_Stream([rotate, heartbeat] + with_table_maps(AFTER_41)), reopen,
                            MARIADB, "0-1-41")
    assert ids == [1, 2] and reopen.calls == 0 and source.resumed_by == "position"


@pytest.mark.parametrize("state, gtid, expected", [
    ("0-1-41", Gtid(MARIADB_FLAVOR, "0", 42, 2), True),      # another server id: same domain
    ("0-1-41", Gtid(MARIADB_FLAVOR, "0", 43, 1), False),
    ("0-1-41", Gtid(MARIADB_FLAVOR, "0", 41, 1), False),
    ("0-1-41,1-1-7", Gtid(MARIADB_FLAVOR, "1", 8, 1), True),
    ("0-1-41", Gtid(MARIADB_FLAVOR, "1", 1, 1), False),
    (f"{UUID}:1-5:7-9", Gtid(MYSQL_FLAVOR, UUID, 10), True),
    (f"{UUID}:1-5:7-9", Gtid(MYSQL_FLAVOR, UUID, 6), False),   # fills a gap: not the next
    (f"{UUID}:1-5", Gtid(MYSQL_FLAVOR, f"{UUID}:tag", 1), False),
    (f"{UUID}:1-5", Gtid(MARIADB_FLAVOR, "0", 6, 1), False),
])
def test_the_next_transaction_of_a_state(state, gtid, expected):
    assert GtidState.parse(state).is_next(gtid) is expected


def test_only_a_stored_checkpoint_of_the_connected_server_with_both_is_resumed_by_position():
    stored = Checkpoint(MARIADB.identity, "0-1-41", "binlog.000003", 1234)
    assert by_position(stored, MARIADB)
    assert not by_position(stored, replace(MARIADB, server_id=2))     # another server
    assert not by_position(replace(stored, gtid=None), MARIADB)        # nothing to confirm it
    assert not by_position(replace(stored, log_file=None, log_pos=None), MARIADB)


@pytest.mark.parametrize("info", [MARIADB, MYSQL])
def test_by_position_both_flavors_send_the_file_and_position_then_reconnect_by_gtid(info):
    """python-mysql-replication's MariaDB connection sends position 4 of the first binlog
    file: by position the reader connects as MySQL's does (COM_BINLOG_DUMP with the file and
    position), and once a transaction moved its GTID state, by GTID as the flavor's."""
    gtid = "0-1-41" if info is MARIADB else f"{UUID}:1-5"
    settings = TailerSettings(pack_rows=1)
    start = Checkpoint(info.identity, gtid, "binlog.000003", 1234)
    stream = open_stream(MySQLParams("h", 1, "u", "p").client_options(), settings.server_id,
                         settings.reader, info, start, position=True)
    assert (stream.auto_position, stream.log_file, stream.log_pos) == (None, "binlog.000003", 1234)
    assert stream.is_mariadb is False
    stream.resume_from(gtid)
    assert (stream.auto_position, stream.is_mariadb) == (gtid, info is MARIADB)


def test_a_position_with_no_gtid_state_to_confirm_it_is_not_used():
    reopen, stream = _Reopen(AFTER_41), _Stream(with_table_maps(AFTER_41[3:]))
    ids, _, source = resume(stream, reopen, MARIADB, "")
    assert ids == [1, 2] and reopen.calls == 1 and stream.closed
    assert source.resumed_by == "gtid"
