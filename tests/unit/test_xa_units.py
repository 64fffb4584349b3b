"""XA statements and the bounded hold of a prepared group (pure)."""

import pytest

from cachesync.producer_outbox.binlog.xa import XaGroup, xa_statement


@pytest.mark.parametrize("text, expected", [
    ("XA START X'6131',X'',1", ("START", "X'6131',X'',1", False)),
    ("XA END X'6131',X'',1", ("END", "X'6131',X'',1", False)),
    ("XA COMMIT X'6131',X'',1", ("COMMIT", "X'6131',X'',1", False)),
    ("XA COMMIT 'a' ONE PHASE", ("COMMIT", "'a'", True)),
    ("xa rollback  X'31',X'',1", ("ROLLBACK", "X'31',X'',1", False)),
    ("XA BEGIN 'a' JOIN", ("START", "'a'", False)),
    ("BEGIN", None),
    ("XACT", None),
])
def test_xa_statements(text, expected):
    assert xa_statement(text) == expected


def test_a_group_over_its_bound_keeps_only_its_tables():
    group = XaGroup(max_rows=3)
    group.touch("app", "users")
    group.hold(("r1",), 2)
    assert group.records == [("r1",)] and not group.overflowed
    group.hold(("r2",), 2)
    group.touch("app", "orders")
    group.hold(("r3",), 1)
    assert group.overflowed and group.records == [] and group.rows == 5
    assert list(group.tables) == [("app", "users"), ("app", "orders")]


from pymysqlreplication.event import QueryEvent, XAPrepareEvent  # noqa: E402
from pymysqlreplication.row_event import WriteRowsEvent  # noqa: E402

from cachesync.producer_outbox.binlog.checkpoint import Checkpoint  # noqa: E402
from cachesync.runtime.mysql import MySQLParams  # noqa: E402
from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.tailer import Tailer, TailerOptions  # noqa: E402
from tests.support.binlog import (MAPPINGS, MARIADB, _Checkpoints, _Publisher,  # noqa: E402
                                         _Stream, mariadb_gtid, rows, u, with_table_maps)

XID = "X'6131',X'',1"


def query(text: str):
    event = object.__new__(QueryEvent)
    event.query, event.schema, event.timestamp = text, b"app", 1_700_000_000
    return event


def prepare(one_phase: bool = False):
    event = object.__new__(XAPrepareEvent)
    event.one_phase = one_phase
    return event


def xa_gtid(seq: int):
    event = mariadb_gtid(0, 1, seq)
    event.flags = 64            # FL_PREPARED_XA
    return event


def tail(events):
    publisher, checkpoints = _Publisher(), _Checkpoints()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, checkpoints, MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-41", "b.1", 4)))
    tailer.pipeline.save_checkpoint()
    return [e for _, e in publisher.sent], [cp.gtid for cp in checkpoints.saved]


PREPARED = [xa_gtid(42), rows(WriteRowsEvent, u(1, "a@x")), query(f"XA END {XID}"), prepare(),
            mariadb_gtid(0, 1, 43), rows(WriteRowsEvent, u(2, "b@x")), query("COMMIT")]


def test_prepared_rows_go_out_at_xa_commit_and_hold_the_checkpoint():
    sent, checkpoints = tail(PREPARED)
    assert [e.pk for e in sent] == [(("id", 2),)]       # the XA row is held
    assert checkpoints == []        # 0-1-43 is done, but the prepared 0-1-42 holds it back
    sent, checkpoints = tail([*PREPARED, mariadb_gtid(0, 1, 44), query(f"XA COMMIT {XID}")])
    assert [(e.pk, e.source.position) for e in sent] == [((("id", 2),), "0-1-43"),
                                                         ((("id", 1),), "0-1-42")]
    assert checkpoints[-1] == "0-1-44"


def test_xa_rollback_publishes_nothing_and_frees_the_checkpoint():
    sent, checkpoints = tail([*PREPARED, mariadb_gtid(0, 1, 44), query(f"XA ROLLBACK {XID}")])
    assert [e.pk for e in sent] == [(("id", 2),)]
    assert checkpoints[-1] == "0-1-44"


def test_without_gtids_an_xa_group_starts_at_xa_start():
    events = [query(f"XA START {XID}"), rows(WriteRowsEvent, u(1, "a@x")),
              query(f"XA END {XID}"), prepare(one_phase=True)]
    sent, _ = tail(events)
    assert [e.pk for e in sent] == [(("id", 1),)]
    held, _ = tail(events[:3] + [prepare()])
    assert held == []


class _Partitioned(_Publisher):
    def partitions(self, topic):
        return [0, 1]


def test_a_commit_of_a_transaction_prepared_before_the_start_invalidates_every_table():
    publisher = _Partitioned()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream([mariadb_gtid(0, 1, 44), query(f"XA COMMIT {XID}")]), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-43", "b.1", 4)))
    sent = [e for _, e in publisher.sent]
    assert [(e.qualified_table, e.op, e.extra["reason"]) for e in sent] == [
        ("app.users", "truncate", "xa_unknown")] * 2            # one copy per partition
    assert tailer.table_events == 1
