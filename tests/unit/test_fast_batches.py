"""The binlog source over transactions the fast reader framed at once (``FastGroup``): the
ones its read buffer already holds go out as one ``Group`` with the checkpoint after the
last, and the same transactions read one by one give the same records; a table-level event
among them turns the batch into one group of separate items, never a skipped one."""

from __future__ import annotations

from cachesync.producer_outbox import binlog_source
from cachesync.producer_outbox.binlog_source import BinlogSource
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog.dumpstream import (DumpStreamReader, FastGroup,
                                                  FastTableMapEvent, FastWriteRowsEvent,
                                                  FastXidEvent)
from cachesync.producer_outbox.ports import Commit, Group, Record, TableEvent
from cachesync.producer_outbox.binlog.preflight import ServerInfo
from cachesync.producer_outbox.binlog.statements import TableChange
from cachesync.schema.mapping import MappingSet

INFO = ServerInfo("mariadb", 1, None, {}, ())
TABLE_ID = 70


def _group(seq: int, rows: int, truncate: bool = False) -> FastGroup:
    """Transaction 0-1-<seq>: a table map and one rows event of ``rows`` rows (``truncate``:
    the fake encoder makes a table-level event of it), binlog positions from seq."""
    tmap = FastTableMapEvent()
    tmap.table_id, tmap.schema, tmap.table, tmap.timestamp = TABLE_ID, "app", "users", seq
    event = FastWriteRowsEvent()
    event.table_id, event.schema, event.table, event.timestamp = TABLE_ID, "app", "users", seq
    event.n, event.truncate = rows, truncate
    xid = FastXidEvent()
    xid.timestamp, xid.xid = seq, seq
    base = seq * 1000
    return FastGroup(DumpStreamReader._gtid(bytes(20) + (seq).to_bytes(8, "little")
                                            + (0).to_bytes(4, "little") + b"\0", seq, 1),
                     base + 100, [(base + 200, tmap), (base + 300, event)], xid, base + 400)


class _Stream:
    """What BinlogSource reads of the fast reader: FastGroups, and (``batches``) the ones
    its buffer holds after each (``buffered_group``)."""

    def __init__(self, groups: list[FastGroup], batches: bool):
        self._groups, self.groups = list(groups), False
        self.log_file, self.log_pos, self.auto_position = "bin.000001", 4, None
        if not batches:
            self.buffered_group = None

    def __iter__(self):
        while self._groups:
            yield self._next()

    def _next(self) -> FastGroup:
        group = self._groups.pop(0)
        self.log_pos = group.xid_pos        # as the reader: after the group it hands over
        return group

    def buffered_group(self):
        return self._next() if self._groups else None

    def resume_from(self, gtid: str) -> None:
        self.auto_position = gtid


class _Encoder:
    """Each row a record (id from its context and index), or one table-level event."""

    types = xa_tables = None

    def rows_to_records(self, event, ctx, index, schema, table, where):
        if event.truncate:
            return [TableEvent(ctx, index, TableChange(schema, table, "truncate"), "T")], index + 1
        return [Record(schema, table, f"{table}:{index}", b"{}", f"{ctx.position}/{index + i}")
                for i in range(event.n)], index + event.n


def _read(groups: list[FastGroup], batches: bool) -> list:
    start = Checkpoint(INFO.identity, "0-1-0")
    source = BinlogSource(_Stream(groups, batches), INFO, start, MappingSet({}), None,
                          _Encoder())
    return list(source.changes())


def _flat(items: list) -> list:
    """(kind, record or checkpoint) of each item, a Group as what it stands for."""
    out = []
    for item in items:
        for one in (item.items() if type(item) is Group else [item]):
            out.append((type(one).__name__, one.checkpoint if type(one) is Commit
                        else one.msg_id if type(one) is Record else None))
    return out


def test_buffered_transactions_go_out_as_one_group_with_the_checkpoint_after_the_last():
    groups = [_group(seq, rows) for seq, rows in ((1, 2), (2, 1), (3, 3))]
    items = _read(groups, batches=True)
    assert [type(i) for i in items] == [Group]
    group = items[0]
    assert group.ctx.position == "0-1-1"
    assert [r.msg_id for r in group.records] == ["0-1-1/0", "0-1-1/1", "0-1-2/0", "0-1-3/0",
                                                 "0-1-3/1", "0-1-3/2"]
    assert group.checkpoint == Checkpoint(INFO.identity, "0-1-3", "bin.000001", 3400)


def test_one_by_one_the_same_transactions_give_the_same_records_and_each_its_checkpoint():
    batched = _flat(_read([_group(s, 2) for s in (1, 2, 3)], batches=True))
    alone = _flat(_read([_group(s, 2) for s in (1, 2, 3)], batches=False))
    records = lambda flat: [x for k, x in flat if k == "Record"]    # noqa: E731
    assert records(batched) == records(alone)
    assert [x.gtid for k, x in alone if k == "Commit"] == ["0-1-1", "0-1-2", "0-1-3"]
    assert [x.gtid for k, x in batched if k == "Commit"] == ["0-1-3"]


def test_a_table_level_event_among_them_makes_one_group_of_separate_items():
    items = _read([_group(1, 1), _group(2, 0, truncate=True), _group(3, 1)], batches=True)
    kinds = [type(i).__name__ for i in items]
    # the batch stops at the transaction with the table event; the next one is read after
    assert kinds == ["Begin", "Record", "TableEvent", "Commit", "Group"]
    assert items[0].ctx.position == "0-1-1" and items[3].checkpoint.gtid == "0-1-2"
    assert items[4].checkpoint.gtid == "0-1-3"


def test_a_batch_is_bounded(monkeypatch):
    monkeypatch.setattr(binlog_source, "FAST_BATCH", 2)
    items = _read([_group(s, 1) for s in range(1, 6)], batches=True)
    assert [len(i.records) for i in items] == [2, 2, 1]
    assert [i.checkpoint.gtid for i in items] == ["0-1-2", "0-1-4", "0-1-5"]
