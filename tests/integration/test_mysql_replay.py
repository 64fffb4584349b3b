"""`cachesync tail` against MySQL 8 binlog bytes, end to end, on both readers.

No MySQL server can run here, so a replay primary (tests/support/replay_primary.py) streams
MySQL-flavoured binlog events built from MySQL's documented format
(tests/support/mysqlbinlog.py) to the real tailer process; its state is on the devstack's
MariaDB, Kafka and Redis are the devstack's, the python engine applies the events. Each
test caches keys, writes transactions to the primary's binlog, and waits until the keys
those transactions change are gone; the checkpoint is read back where resuming matters.
"""

from __future__ import annotations

import struct

import pytest

from tests.support import wait_for
from tests.support import mysqlbinlog as mb
from tests.support.binlog import UUID
from tests.support.replay_primary import ReplayPrimary

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}


class Replay:
    """A replay primary serving one binlog file with ``lab.db``.users, and its writer."""

    def __init__(self, lab, checksum: bool = True):
        self.lab = lab
        self.table = mb.Table(101, lab.db, "users", (mb.Column("id", mb.LONG),
                                                     mb.Column("email", mb.VARCHAR, 256)))
        self.file = mb.Binlog("binlog.000001", checksum=checksum)
        self.primary = ReplayPrimary([self.file])
        self.primary.columns[(lab.db, "users")] = (("id", "int"), ("email", "varchar"))
        self.gno = 0
        self.xid = 100

    def write(self, kind: int, images: list, compressed: bool = False, tag: str = "",
              gtid: bool = True) -> str:
        """One row transaction (``gtid``: with a GTID, else an anonymous one); returns its GTID."""
        self.gno += 1
        self.xid += 1
        self.primary.files[-1].transaction(mb.row_transaction(self.table, kind, images, self.xid),
                                           sid=UUID if gtid else None, gno=self.gno, tag=tag,
                                           compressed=compressed)
        self.primary.appended()
        return f"{UUID}:{tag + ':' if tag else ''}{self.gno}"

    def write_events(self, inner: list) -> None:
        """``inner`` as they are, after a GTID when the first is BEGIN."""
        if inner[0][0] == mb.QUERY:
            self.gno += 1
        self.primary.files[-1].transaction(inner, sid=UUID if inner[0][0] == mb.QUERY else None,
                                           gno=self.gno)
        self.primary.appended()

    def config(self, reader: str) -> str:
        return self.lab.write_config(USERS, tailer={
            "source_hosts": f"127.0.0.1:{self.primary.port}", "reader": reader})

    def checkpoint(self) -> str | None:
        rows = self.lab.sql("SELECT gtid FROM cachesync.cachesync_checkpoint WHERE name = %s",
                            (f"tailer-{self.lab.suffix}",))
        return rows[0][0] if rows else None


@pytest.fixture
def replay(lab):
    r = Replay(lab)
    with r.primary:
        yield r
    assert not r.primary.unanswered, f"queries the replay primary could not answer: " \
                                     f"{r.primary.unanswered}"


def wait_gone(lab, *keys: str) -> None:
    wait_for(lambda: not lab.cached(*keys), 60, interval=0.2,
             what=f"keys {keys} invalidated")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_row_changes_of_a_mysql_binlog_invalidate_their_keys(replay, lab, reader):
    cfg = replay.config(reader)
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:a@x", "user:email:b@x", "user:2")
    replay.write(mb.WRITE_ROWS, [(2, "c@x")])
    replay.write(mb.UPDATE_ROWS, [((1, "a@x"), (1, "b@x"))])
    wait_gone(lab, "user:1", "user:email:a@x", "user:email:b@x", "user:2")
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1-2", 60, what="the checkpoint at 1-2")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_compressed_transactions_are_decoded(replay, lab, reader):
    """binlog_transaction_compression=ON: each transaction after its GTID is one zstd
    TRANSACTION_PAYLOAD_EVENT; its rows are decoded and the checkpoint moves past it. The
    tailer says at start what it does about the setting."""
    replay.primary.variables["binlog_transaction_compression"] = "ON"
    cfg = replay.config(reader)
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:a@x", "user:email:b@x", "user:2", "user:3")
    replay.write(mb.WRITE_ROWS, [(2, "c@x"), (3, "d@x")], compressed=True)
    replay.write(mb.UPDATE_ROWS, [((1, "a@x"), (1, "b@x"))], compressed=True)
    wait_gone(lab, "user:1", "user:email:a@x", "user:email:b@x", "user:2", "user:3")
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1-2", 60, what="the checkpoint at 1-2")
    [settings] = [line for line in lab.log(tailer).splitlines() if "binlog settings: " in line]
    assert "binlog_transaction_compression=ON" in settings


def checkpoint_row(lab) -> tuple | None:
    """(gtid, log_file, log_pos) of the test's tailer checkpoint, None before the first."""
    rows = lab.sql("SELECT gtid, log_file, log_pos FROM cachesync.cachesync_checkpoint "
                   "WHERE name = %s", (f"tailer-{lab.suffix}",))
    return tuple(rows[0]) if rows else None


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_tagged_gtids_are_kept_and_resumed_from(replay, lab, reader):
    """MySQL 8.4 tagged GTIDs: the checkpoint keeps the tag. A restarted tailer resumes at the
    checkpoint's file and position, which the tag's next transaction confirms; one whose
    position the server does not have resumes with the tagged set (COM_BINLOG_DUMP_GTID in
    the tagged encoding): the primary skips what the set holds and the tailer reads only the
    new transaction. The server's gtid_executed holds a tag already at the first start."""
    replay.write(mb.WRITE_ROWS, [(8, "y@x")])
    replay.write(mb.WRITE_ROWS, [(9, "z@x")], tag="init")        # gtid_executed at start
    cfg = replay.config(reader)
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:a@x")
    replay.write(mb.DELETE_ROWS, [(1, "a@x")], tag="batch")
    wait_gone(lab, "user:1", "user:email:a@x")
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1:batch:3:init:2", 60,
             what="the tagged checkpoint")
    tailer.terminate()
    tailer.wait(30)
    _, file, pos = checkpoint_row(lab)
    lab.cache("user:4")
    replay.write(mb.WRITE_ROWS, [(4, "e@x")], tag="batch")
    tailer = lab.start_tailer(cfg)
    wait_gone(lab, "user:4")
    assert replay.primary.dumps[-1] == ("file", file, pos), replay.primary.dumps
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1:batch:3-4:init:2", 60,
             what="the checkpoint past the transaction resumed by position")
    tailer.terminate()
    tailer.wait(30)

    lab.sql("UPDATE cachesync.cachesync_checkpoint SET log_file = 'binlog.999999' "
            "WHERE name = %s", (f"tailer-{lab.suffix}",))
    lab.cache("user:5")
    replay.write(mb.WRITE_ROWS, [(5, "f@x")], tag="batch")
    lab.start_tailer(cfg)
    wait_gone(lab, "user:5")
    assert replay.primary.dumps[-2][:2] == ("file", "binlog.999999"), replay.primary.dumps
    assert replay.primary.dumps[-1] == ("gtid", sorted(
        [(UUID, "", 1), (UUID, "init", 2), (UUID, "batch", 3), (UUID, "batch", 4)])), \
        replay.primary.dumps
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1:batch:3-5:init:2", 60,
             what="the checkpoint past the transaction resumed by GTID")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_events_that_cannot_be_decoded_invalidate_their_tables(replay, lab, reader):
    """The rule over event types, end to end: a rows event of a type cachesync does not decode
    (PRE_GA_WRITE_ROWS_EVENT, its table named by the map before it; PARTIAL_UPDATE_ROWS_EVENT
    is decoded, see test_mysql_json_replay.py) and an event type no server wrote yet (no
    table: every mapped table)
    become table-level invalidations, with a WARNING and cachesync_tailer_undecoded_events;
    the transaction around them still completes and the checkpoint moves past it."""
    from tests.support import address, scrape
    cfg = replay.config(reader)
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:a@x")
    t = replay.table
    replay.write_events([(mb.QUERY, mb.query("BEGIN")), (mb.TABLE_MAP, t.map_body()),
                         (20, t.rows_body(mb.UPDATE_ROWS, [((1, "a@x"), (1, "a@x"))])),
                         (mb.XID, mb.xid(1))])
    wait_gone(lab, "user:1", "user:email:a@x")
    lab.cache("user:5")
    replay.write_events([(99, b"\x00" * 12)])     # between transactions, no GTID
    wait_gone(lab, "user:5")
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1", 60, what="the checkpoint past both")
    log = lab.log(tailer)
    assert "PRE_GA_WRITE_ROWS_EVENT (type 20)" in log and f"invalidating {lab.db}.users" in log
    assert "unknown event type 99 (type 99)" in log and "every mapped table" in log
    samples = scrape(address(lab, tailer))
    assert samples[("cachesync_tailer_undecoded_events_total", ())] == 2


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_compressed_transactions_resume_from_a_file_position(replay, lab, reader):
    """gtid_mode=OFF: the checkpoint is a file:pos, and after a compressed transaction it is
    the end of its payload (never a place inside it); a restarted tailer asks for exactly
    that position and reads the transaction written while it was down."""
    replay.primary.variables["gtid_mode"] = "OFF"
    cfg = replay.config(reader)
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1")
    replay.write(mb.WRITE_ROWS, [(1, "a@x")], compressed=True, gtid=False)
    wait_gone(lab, "user:1")
    end = replay.file.end
    wait_for(lambda: checkpoint_row(lab) == (None, "binlog.000001", end), 60,
             what="the checkpoint at the payload's end")
    tailer.terminate()
    tailer.wait(30)
    lab.cache("user:2")
    replay.write(mb.WRITE_ROWS, [(2, "b@x")], compressed=True, gtid=False)
    lab.start_tailer(cfg)
    wait_gone(lab, "user:2")
    assert replay.primary.dumps[-1] == ("file", "binlog.000001", end), replay.primary.dumps
    wait_for(lambda: checkpoint_row(lab) == (None, "binlog.000001", replay.file.end), 60,
             what="the checkpoint past the second payload")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_a_compressed_xa_transaction_is_published_at_its_commit(replay, lab, reader):
    """MySQL compresses XA transactions too: XA START, the rows, XA END and the XA_PREPARE
    event are one payload. Its rows are held at PREPARE (keys still cached) and published
    at the XA COMMIT that follows in a transaction of its own."""
    cfg = replay.config(reader)
    lab.start_tailer(cfg)
    lab.start_engine(cfg)
    lab.cache("user:1", "user:email:a@x", "user:7")
    xid = "X'7861',X'',1"
    t = replay.table
    prepare = [(mb.QUERY, mb.query(f"XA START {xid}")), (mb.TABLE_MAP, t.map_body()),
               (mb.DELETE_ROWS, t.rows_body(mb.DELETE_ROWS, [(1, "a@x")])),
               (mb.QUERY, mb.query(f"XA END {xid}")),
               (38, b"\x00" + struct.pack("<III", 1, 2, 0) + b"xa")]      # XA_PREPARE
    replay.gno += 1
    replay.file.transaction(prepare, sid=UUID, gno=replay.gno, compressed=True)
    replay.primary.appended()
    replay.write(mb.WRITE_ROWS, [(7, "g@x")])         # a later transaction: seen past PREPARE
    wait_gone(lab, "user:7")
    assert lab.cached("user:1", "user:email:a@x") == ["user:1", "user:email:a@x"]
    replay.gno += 1
    replay.file.transaction([(mb.QUERY, mb.query(f"XA COMMIT {xid}"))], sid=UUID,
                            gno=replay.gno, compressed=True)
    replay.primary.appended()
    wait_gone(lab, "user:1", "user:email:a@x")
    wait_for(lambda: replay.checkpoint() == f"{UUID}:1-3", 60, what="the checkpoint at 1-3")
