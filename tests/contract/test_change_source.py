"""The ChangeSource contract, run against the binlog source on the devstack's MariaDB (both
binlog readers: the library's and the fast one), the outbox relay's source on an outbox
table there, and the in-memory twin.

What every source keeps: groups are ``Begin`` ... ``Commit`` and never nest; records and
table-level events come only inside a group; a group's message ids are the same when it
is read again (the outbox's: once the first read's lease ended); the pipeline fed by the
source publishes every record and stores the last group's checkpoint once Kafka (here the
memory publisher) acknowledged them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Callable

import pytest

from cachesync.runtime import config
from cachesync.runtime.config import RelaySettings, TailerSettings
from cachesync.producer_outbox.binlog_source import current_position, open_stream
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.memory import MemoryCheckpointStore, MemoryPublisher, MemorySource
from cachesync.producer_outbox.outbox import emit
from cachesync.producer_outbox.publish.pipeline import Pipeline
from cachesync.producer_outbox.ports import (PULSE, Begin, Commit, Group, Pulse, Record,
                                             TableEvent)
from cachesync.producer_outbox.outbox_relay.change_source import OutboxSource
from cachesync.producer_outbox.outbox_relay.store import OutboxStore
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.schema.event import decode
from tests.support import prepare_outbox
from tests.support.tables import USERS, USERS_DDL

CTX = [TxnContext("srv", f"0-1-{n}", n, 1.7e9, gtid=True) for n in (42, 43, 44)]
MEMORY_ITEMS = [
    Begin(CTX[0]), Record("app", "users", "app.users:1", b"{}", "id-1"),
    Record("app", "users", "app.users:2", b"{}", "id-2"), Commit(Checkpoint("srv", "0-1-42")),
    PULSE,
    Begin(CTX[1]), Record("app", "users", "app.users:3", b"{}", "id-3"),
    Commit(Checkpoint("srv", "0-1-43")),
    Begin(CTX[2]), TableEvent(CTX[2], 0, TableChange("app", "users", "truncate"), "TRUNCATE"),
    Commit(Checkpoint("srv", "0-1-44"))]
GROUPS = 3          # every source below reads 3 groups with content
ROW_GROUPS = [("Begin", None), ("Record", "users:1"), ("Record", "users:2"), ("Commit", None),
              ("Begin", None), ("Record", "users:3"), ("Commit", None)]
TRUNCATE_GROUP = [("Begin", None), ("TableEvent", None), ("Commit", None)]
ONE_ROW_GROUPS = [kind for n in (1, 2, 3)
                  for kind in (("Begin", None), ("Record", f"users:{n}"), ("Commit", None))]


def _items(changes):
    """The source's items, a ``Group`` as the Begin, Records and Commit it stands for."""
    for item in changes:
        if type(item) is Group:
            yield from item.items()
        else:
            yield item


def _read_groups(changes) -> list:
    """The items of the first 3 groups with content (a source never ends by itself, and a
    binlog source yields a group for every transaction of the server, most of them of other
    tests' tables: empty here)."""
    out, group, content, groups = [], [], False, 0
    for item in _items(changes):
        if type(item) is Pulse:
            continue
        group.append(item)
        content |= type(item) in (Record, TableEvent)
        if type(item) is Commit:
            if content:
                out.extend(group)
                groups += 1
            if groups == GROUPS:
                return out
            group, content = [], False
    return out


@dataclass
class Source:
    """How to read one kind of source over the same committed changes, and what it yields."""

    read: Callable[[], object]      # a new source from the same start
    kinds: list                     # (item kind, key suffix) of its groups with content
    rows_are_users: bool = False    # its records are rows of the users table (pk id)


@pytest.fixture(params=["memory", "library", "fast", "outbox"])
def source(request):
    if request.param == "memory":
        yield Source(lambda: MemorySource(MEMORY_ITEMS), ROW_GROUPS + TRUNCATE_GROUP)
    elif request.param == "outbox":
        yield from _outbox_source(request.getfixturevalue("lab"))
    else:
        yield from _binlog_source(request.getfixturevalue("lab"), request.param)


def _binlog_source(lab, reader: str):
    """Two transactions of rows and a TRUNCATE of the users table, read by ``reader``."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer={"reader": reader})
    settings = config.load(cfg, {**os.environ, **lab.stack.env})
    from cachesync.wiring import build_tailer, source_params
    tailer = build_tailer(settings, publisher=MemoryPublisher(3), topic="unused")
    info = tailer.preflight()
    params = source_params(settings)
    start = current_position(params.connect, info)
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'a'), (2, 'b@x', 'b')")
    lab.sql("INSERT INTO users VALUES (3, 'c@x', 'c')")
    lab.sql("TRUNCATE TABLE users")
    opened = []

    def read():
        stream = open_stream(params.client_options(), settings.tailer.server_id,
                             settings.tailer.reader, info, start, heartbeat_s=0.2)
        opened.append(tailer.binlog_source(stream, info, start))
        return opened[-1]
    yield Source(read, ROW_GROUPS + TRUNCATE_GROUP, rows_are_users=True)
    for made in opened:
        made.close()


def _outbox_source(lab):
    """Three outbox events of aggregate type ``users`` (two in one transaction): a group
    each; a read leases them, the next one gets them once that lease (0.5 s) ended."""
    prepare_outbox(lab)
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        emit(conn, "users", 1, "created", {"id": 1})
        emit(conn, "users", 2, "created", {"id": 2})
        conn.commit()
        emit(conn, "users", 3, "created", {"id": 3})
        conn.commit()
    settings = config.load(lab.write_config(USERS), {**os.environ, **lab.stack.env})
    from cachesync.wiring import mysql_params
    store = OutboxStore(mysql_params(settings, lab.db).connect, lab.db, "cachesync_outbox")
    options = RelaySettings(outbox_db=lab.db, poll_interval_s=0.05, redeliver_interval_s=0.5)
    yield Source(lambda: OutboxSource(store, options, lab.db, "srv", threading.Event()),
                 ONE_ROW_GROUPS)
    store.close()


def test_groups_are_begin_to_commit_and_never_nest(source):
    items = _read_groups(source.read().changes())
    open_group = False
    for item in items:
        if type(item) is Begin:
            assert not open_group
            open_group = True
        elif type(item) is Commit:
            assert open_group
            open_group = False
        elif type(item) in (Record, TableEvent):
            assert open_group, f"{item} outside a group"
    assert not open_group and sum(type(i) is Commit for i in items) == GROUPS


def test_rows_and_table_events_arrive_in_commit_order(source):
    items = _read_groups(source.read().changes())
    kinds = [(type(i).__name__, i.key.rsplit(".", 1)[1] if type(i) is Record else None)
             for i in items
             if type(i) in (Begin, Record, TableEvent, Commit)]
    assert kinds == source.kinds


def test_a_second_read_gives_the_same_ids(source):
    def ids(items):
        return [i.msg_id if type(i) is Record else (i.ctx.position, i.index) for i in items
                if type(i) in (Record, TableEvent)]
    first, second = (_read_groups(source.read().changes()) for _ in range(2))
    assert ids(first) == ids(second)
    assert len(ids(first)) == sum(kind in ("Record", "TableEvent") for kind, _ in source.kinds)


def test_the_pipeline_publishes_every_record_and_stores_the_last_checkpoint(source):
    publisher, checkpoints = MemoryPublisher(partitions=2, auto_ack=False), MemoryCheckpointStore()
    pipeline = Pipeline(publisher, checkpoints, "t", TailerSettings(pack_rows=1))
    items = _read_groups(source.read().changes())
    pipeline.run(MemorySource(items))
    pipeline.save_checkpoint()
    assert checkpoints.saved == []                      # nothing acknowledged yet
    publisher.ack_all()
    pipeline.save_checkpoint()
    assert checkpoints.saved == [[i for i in items if type(i) is Commit][-1].checkpoint]
    record_ids = [i.msg_id for i in items if type(i) is Record]
    rows = [s for s in publisher.sent if s.msg_id in record_ids]
    assert [s.msg_id for s in rows] == record_ids
    # a table-level event: one copy to each partition
    copies = [s for s in publisher.sent if s.msg_id not in record_ids]
    table_events = sum(type(i) is TableEvent for i in items)
    assert sorted(s.partition for s in copies) == sorted([0, 1] * table_events)
    assert [decode(s.value).op for s in copies] == ["truncate"] * 2 * table_events
    if source.rows_are_users:
        assert [decode(s.value).pk for s in rows] == [(("id", n),) for n in (1, 2, 3)]
