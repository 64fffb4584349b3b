"""Binlog files real servers wrote, streamed byte for byte to the tailer's change source.

The files are the shared folder's ``realbinlog/`` (sources in its SOURCES.md; a ``.gz`` file
is gunzipped in memory). ``read_file`` serves one file from a replay primary
(tests/support/replay_primary.py: the events exactly as the file holds them, after the
dump's artificial ROTATE) to ``binlog_source.open_stream`` with the reader asked for, and
collects what ``BinlogSource.changes()`` yields: the decoded rows (every column of every
table, update mode), the table-level events, or the error that ended the stream.
"""

from __future__ import annotations

import gzip
import logging
import os
import struct
from dataclasses import dataclass, field

from cachesync.producer_outbox.binlog_source import BinlogSource, open_stream
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.decode.matched import MatchedTables
from cachesync.producer_outbox.ports import Group, Record, TableEvent
from cachesync.producer_outbox.binlog.preflight import ServerInfo
from cachesync.producer_outbox.encode.rowevents import RowEncoder
from cachesync.schema.event import decode_record
from cachesync.schema.mapping import parse_mappings
from tests.support.replay_primary import ReplayPrimary
from tests.support.shared import shared_dir

FORMAT_DESCRIPTION = 15
_HEADER = 19
# a key column no table has: the rows of a table the file maps without column names (or a
# table no exact entry names) fall to this pattern entry, and become table-level events
NO_SUCH_COLUMN = "cachesync_no_such_column"


def names() -> list[str]:
    """Every binlog file of the shared ``realbinlog/`` folder."""
    return sorted(p.name for p in (shared_dir() / "realbinlog").iterdir()
                  if p.name != "SOURCES.md")


def file_bytes(name: str) -> bytes:
    data = (shared_dir() / "realbinlog" / name).read_bytes()
    return gzip.decompress(data) if name.endswith(".gz") else data


def split_events(data: bytes) -> list[tuple[int, bytes]]:
    """(start position, event bytes) of each event after the 4-byte magic."""
    out, at = [], 4
    while at + _HEADER <= len(data):
        size = struct.unpack_from("<I", data, at + 9)[0]
        if size < _HEADER:
            raise ValueError(f"event of {size} bytes at {at}")
        out.append((at, data[at:at + size]))
        at += size
    return out


@dataclass
class RealFile:
    """One binlog file as ``ReplayPrimary`` serves it (the shape of ``mysqlbinlog.Binlog``)."""

    name: str
    events: list[tuple[int, bytes]]
    server_id: int = 1
    gtids: dict = field(default_factory=dict)

    @property
    def checksum(self) -> bool:
        """CRC32 after each event (the format description's algorithm byte; before 5.6.1
        the format description has none)."""
        fde = self.events[0][1]
        if fde[4] != FORMAT_DESCRIPTION or len(fde) < _HEADER + 57 + 5:
            return False
        return fde[-5] == 1 and _version(fde) >= (5, 6, 1)

    @property
    def end(self) -> int:
        start, data = self.events[-1]
        return start + len(data)

    @property
    def version(self) -> str:
        return _version_text(self.events[0][1])


def _version_text(fde: bytes) -> str:
    return fde[_HEADER + 2:_HEADER + 52].split(b"\0")[0].decode()


def _version(fde: bytes) -> tuple[int, ...]:
    text = _version_text(fde).split("-")[0]
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


@dataclass
class Outcome:
    """What the change source made of one file."""

    rows: list = field(default_factory=list)      # decoded ChangeEvents, in order
    tables: list = field(default_factory=list)    # (db, table, reason) table-level events
    error: Exception | None = None


def named_tables(reading: dict) -> dict[str, str]:
    """db.table -> a column, for the tables whose column names go-mysql's reading of a file
    (tests/support/gomysql.py) found in their table maps."""
    return {f"{r['db']}.{r['table']}": r["columns"][0] for r in reading["rows"]}


def mappings_for(named: dict[str, str]):
    """Update mode (every column kept) for each ``db.table`` -> a key column; every other
    table through a pattern whose key column no table has."""
    entries = {t: {"keys": [f"k:{{{col}}}"], "mode": "update"} for t, col in named.items()}
    entries["re:.*"] = {"keys": [f"k:{{{NO_SUCH_COLUMN}}}"]}
    return parse_mappings(entries)


SERVED_AS = "binlog.000001"    # the name a server gives its files (a numeric suffix)


def read_file(name: str, reader: str, named: dict[str, str],
              replace: dict[int, bytes] | None = None) -> Outcome:
    """Stream ``name`` to the change source read by ``reader`` (fast | library), the events
    at the positions of ``replace`` replaced by its bytes; see module doc."""
    events = [(start, (replace or {}).get(start, data))
              for start, data in split_events(file_bytes(name))]
    real = RealFile(SERVED_AS, events)
    flavor = "mariadb" if "MariaDB" in real.version else "mysql"
    # binlog_checksum as the file's server had it: the readers expect a CRC32 after each
    # event exactly when the server says so
    primary = ReplayPrimary([real], variables={
        "version": real.version, "binlog_checksum": "CRC32" if real.checksum else "NONE"})
    info = ServerInfo(flavor, 1, None, {}, ())
    mappings = mappings_for(named)
    out = Outcome()
    with primary:
        stream = open_stream(dict(host="127.0.0.1", port=primary.port, user="u", password="p"),
                             4242, reader, info, Checkpoint(info.identity, None, SERVED_AS, 4),
                             heartbeat_s=0, blocking=False)
        source = BinlogSource(stream, info, Checkpoint(info.identity, None, SERVED_AS, 4), mappings,
                              MatchedTables(mappings), RowEncoder(mappings, MatchedTables(mappings)))
        try:
            for item in source.changes():
                _collect(item, out)
        except Exception as e:      # the test rules on which errors are allowed
            out.error = e
        finally:
            source.close()
    return out


def _collect(item, out: Outcome) -> None:
    if isinstance(item, Group):
        for inner in item.records:
            _collect(inner, out)
    elif isinstance(item, Record):
        out.rows.extend(e for e in decode_record(item.value))
    elif isinstance(item, TableEvent):
        out.tables.append((item.change.db, item.change.table, item.change.reason))


def speedups_off() -> bool:
    return bool(os.environ.get("CACHESYNC_NO_SPEEDUPS"))


logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)
