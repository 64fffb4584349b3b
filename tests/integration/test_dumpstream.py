"""The fast binlog reader (dumpstream.DumpStreamReader) against python-mysql-replication.

Each test writes to its own database, then reads the same binlog range with both readers
as the tailer opens them (same only_events) and compares every event they yield: its
library class, the fields the tailer reads, the decoded rows, and the stream position
after it.
"""

from __future__ import annotations

import logging

import os
import random

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (HeartbeatLogEvent, MariadbGtidEvent, QueryEvent,
                                      RotateEvent, XidEvent)
from pymysqlreplication.row_event import (DeleteRowsEvent, RowsEvent, TableMapEvent,
                                          UpdateRowsEvent, WriteRowsEvent)

from cachesync.producer_outbox.binlog import dumpstream
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.binlog.dumpstream import DumpStreamReader
from tests.support.columns import (COLUMNS, INSERT, random_rows, scratch_database,
                                   special_rows, write_range as write)
from tests.support.compare import difference

ONLY_EVENTS = [MariadbGtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
               TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]


@pytest.fixture
def db(stack):
    with scratch_database(stack, "dumpstream_test") as name:
        yield name


def open_stream(stack, reader_class, start, only_events, **options):
    """A blocking ``reader_class`` stream from binlog position ``start`` as cachesync's user
    (``options``: the reader's own, e.g. the fast reader's ``groups``)."""
    env = stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"], encoding="utf-8") as f:
        password = f.read().strip()
    # file:pos with MySQL's dump command (is_mariadb would make the library ask MariaDB for
    # its first binlog); MariaDB still sends its own GTID events (slave capability 4)
    return reader_class(
        connection_settings={"host": env["CACHESYNC_MYSQL_HOST"],
                             "port": int(env["CACHESYNC_MYSQL_PORT"]),
                             "user": env["CACHESYNC_MYSQL_USER"], "password": password},
        server_id=random.randint(10 ** 6, 2 ** 31 - 1), log_file=start[0], log_pos=start[1],
        resume_stream=True, blocking=True, slave_heartbeat=1.0, only_events=only_events,
        **options)


def read(stack, reader_class, start, end, groups: list | None = None) -> list[tuple]:
    """Every event ``reader_class`` yields from ``start`` until the stream reaches ``end``,
    described by what the tailer reads of it, with the stream's position after it.
    ``groups``: the fast reader returns whole transactions (FastGroup), each counted there
    (its size) and described as the events it holds."""
    stream = open_stream(stack, reader_class, start, ONLY_EVENTS,
                         **({"groups": True} if groups is not None else {}))
    seen = []
    try:
        for event in stream:
            if isinstance(event, HeartbeatLogEvent):
                break          # idle: the range was read (the position check below says)
            if type(event) is dumpstream.FastGroup:
                groups.append(len(event.events))
                for pos, inner in [(event.gtid_pos, event.gtid), *event.events,
                                   (event.xid_pos, event.xid)]:
                    seen.append((*describe(inner), stream.log_file, pos))
            else:
                seen.append((*describe(event), stream.log_file, stream.log_pos))
            if stream.log_file == end[0] and stream.log_pos >= end[1]:
                break
    finally:
        stream.close()
    assert seen and (seen[-1][-2], seen[-1][-1]) == tuple(end), "the range was not read whole"
    return seen


def describe(event) -> tuple:
    """(library class, fast?, the fields of it the tailer uses)."""
    kind = next(c for c in type(event).__mro__ if c.__module__.startswith("pymysqlreplication"))
    fast = type(event).__module__ == dumpstream.__name__
    if isinstance(event, MariadbGtidEvent):
        fields = (event.gtid, event.flags, event.timestamp)
    elif isinstance(event, XidEvent):
        fields = (event.xid, event.timestamp)
    elif isinstance(event, TableMapEvent):
        fields = (event.table_id, event.schema, event.table, event.timestamp)
    elif isinstance(event, RowsEvent):
        fields = (event.table_id, event.schema, event.table, event.primary_key, event.timestamp,
                  [c.name for c in event.table_map[event.table_id].columns], event.rows)
    elif isinstance(event, QueryEvent):
        fields = (event.query, event.schema, event.timestamp)
    elif isinstance(event, RotateEvent):
        fields = (event.next_binlog, event.position)
    else:
        fields = ()
    return kind.__name__, fast, fields


def assert_same(fast: list[tuple], library: list[tuple]) -> None:
    assert len(fast) == len(library)
    for mine, theirs in zip(fast, library):
        assert not theirs[1]
        # everything but the "fast?" flag is equal (rows compared value by value and type)
        assert (mine[0], *mine[3:]) == (theirs[0], *theirs[3:]), (mine, theirs)
        assert difference(list(mine[2]), list(theirs[2])) is None, \
            difference(list(mine[2]), list(theirs[2]))


def test_fast_reader_yields_what_the_library_yields(stack, db):
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type, _ in COLUMNS)
    start, end = write(stack, db, [
        "SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
        f"CREATE TABLE every_type (id INT PRIMARY KEY, {columns})",
        "CREATE TABLE shapes (id INT PRIMARY KEY, g GEOMETRY NOT NULL)",   # library rows
        "CREATE TABLE plain (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NOT NULL)",
        (INSERT, special_rows()),                      # rows of 70 kB: events over a chunk
        (INSERT, random_rows(range(10, 310), seed=2)),
        *[f"INSERT INTO plain VALUES ({i}, {i}, 'p{i}')" for i in range(1, 200)],
        "UPDATE every_type SET id = id + 1000 WHERE id % 3 = 0",
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "UPDATE every_type SET i = 7, tx = 'minimal' WHERE id % 5 = 0",
        "SET SESSION binlog_row_image = 'FULL'",
        "INSERT INTO shapes VALUES (1, POINT(1, 2)), (2, POINT(3, 4))",
        "UPDATE shapes SET g = POINT(5, 6) WHERE id = 1",
        "BEGIN", "INSERT INTO plain VALUES (500, 1, 'x')", "UPDATE every_type SET i = 1",
        "DELETE FROM shapes WHERE id = 2", "COMMIT",
        "ALTER TABLE plain ADD COLUMN c INT NULL",
        "INSERT INTO plain VALUES (501, 1, 'y', 3)",
        "XA START 'x1'", "UPDATE plain SET a = a + 1 WHERE id < 10", "XA END 'x1'",
        "XA PREPARE 'x1'", "XA COMMIT 'x1'",
        "TRUNCATE TABLE shapes",
        "DELETE FROM plain", "DELETE FROM every_type",
    ])
    library = read(stack, BinLogStreamReader, start, end)
    fast = read(stack, DumpStreamReader, start, end)
    assert_same(fast, library)
    by_fast = {}
    for kind, was_fast, _fields, _file, _pos in fast:
        by_fast.setdefault((kind, was_fast), 0)
        by_fast[(kind, was_fast)] += 1
    # the hot events took the fast path; table maps after the first of each layout too
    assert by_fast[("MariadbGtidEvent", True)] > 200 and by_fast[("XidEvent", True)] > 200
    assert by_fast[("TableMapEvent", True)] > 200 and by_fast[("TableMapEvent", False)] >= 4
    for kind in ("WriteRowsEvent", "UpdateRowsEvent", "DeleteRowsEvent"):
        assert by_fast[(kind, True)] >= 1
    # GEOMETRY rows and every QUERY event went through the library
    assert by_fast[("WriteRowsEvent", False)] >= 1 and ("QueryEvent", True) not in by_fast
    # whole transactions framed at once (compiled, not switched off): the same
    if dumpstream._scan_group is not None and not os.environ.get(hotpath.NO_SPEEDUPS):
        groups = []
        assert_same(read(stack, DumpStreamReader, start, end, groups), library)
        # how many transactions a read buffer holds whole depends on how the socket hands
        # out the bytes; some with table maps and rows always are
        assert groups and max(groups) >= 2, groups


def test_a_killed_dump_connection_resumes_where_it_stopped(stack, db, caplog):
    # the library's reconnect warning, whatever level an earlier in-process command left its
    # logger at (cachesync.runtime.logs.setup quiets the libraries' loggers)
    caplog.set_level(logging.WARNING, logger="pymysqlreplication")
    start, _ = write(stack, db, [
        "CREATE TABLE plain (id BIGINT PRIMARY KEY, a INT NOT NULL)",
        *[f"INSERT INTO plain VALUES ({i}, {i})" for i in range(1, 50)]])
    stream = open_stream(stack, DumpStreamReader, start, [WriteRowsEvent, HeartbeatLogEvent])
    ids = []
    try:
        for event in stream:
            if isinstance(event, HeartbeatLogEvent):
                break
            if (event.schema, event.table) != (db, "plain"):
                continue
            ids += [row["values"]["id"] for row in event.rows]
            if len(ids) == 20:           # drop the connection under the reader
                with stack.admin() as conn, conn.cursor() as cur:
                    cur.execute("SELECT id FROM information_schema.processlist WHERE command "
                                "LIKE 'Binlog Dump%%' AND user = %s", (stack.env["CACHESYNC_MYSQL_USER"],))
                    for (thread,) in cur.fetchall():
                        cur.execute(f"KILL {int(thread)}")
                # rows the killed connection cannot have sent: read after the reconnect
                write(stack, db, [f"INSERT INTO plain VALUES ({i}, {i})" for i in range(50, 100)])
            if len(ids) == 99:
                break
    finally:
        stream.close()
    # the library's reconnect resumes from the last position: no row lost or read twice
    assert ids == list(range(1, 100))
    assert "Re-request the connection" in caplog.text
