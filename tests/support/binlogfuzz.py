"""Malformed binlog bytes: mutants of real servers' binlog files, run through the tailer's
change source.

A mutant is one file of the shared folder's ``realbinlog/`` (SOURCES.md names each file's
source) with a few bytes inside one TABLE_MAP or rows event overwritten and that event's
CRC32 recomputed, so the bytes reach the decoders instead of failing the checksum. The
event sizes and positions stay, so the stream stays framed. ``mutants(seed, count)`` makes
them from a fixed seed; ``run_mutant`` streams one, byte for byte, from a replay primary
(tests/support/replay_primary.py) to ``BinlogSource`` on one reader, and says how it ended.

``python -m tests.support.binlogfuzz`` is the worker the fuzz test starts in a subprocess
(once per row path: compiled, and ``CACHESYNC_NO_SPEEDUPS=1``): it reads mutants as JSON
lines on stdin and writes one JSON line per mutant and reader on stdout, so the test can
time each one out (a hang) and see a signal (the worker's return code).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import pathlib
import queue
import random
import resource
import subprocess
import sys
import tempfile
import threading
import traceback
import zlib
from dataclasses import dataclass

from pymysqlreplication.row_event import TableMapEvent

from cachesync.producer_outbox.binlog_source import BinlogSource, open_stream
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog.eventtypes import LIBRARY_ROWS
from cachesync.producer_outbox.decode.matched import MatchedTables
from cachesync.producer_outbox.ports import Group, Record, TableEvent
from cachesync.producer_outbox.binlog.preflight import ServerInfo
from cachesync.producer_outbox.encode.rowevents import RowEncoder
from cachesync.schema.errors import CachesyncError
from cachesync.schema.mapping import parse_mappings
from tests.support import mysqlbinlog as mb
from tests.support.replay_primary import ReplayPrimary

ROOT = pathlib.Path(__file__).resolve().parents[2]

MAGIC = b"\xfebin"
HEADER_LEN = 19
IN_USE = 0x1        # LOG_EVENT_BINLOG_IN_USE_F, in the format description's flags
CRC32 = 1           # the format description's checksum algorithm byte
QUERY, FORMAT_DESCRIPTION, XID, TABLE_MAP = 2, 15, 16, 19
PREAMBLE = frozenset((FORMAT_DESCRIPTION, 35))     # ... and MySQL's PREVIOUS_GTIDS
GROUP_START = frozenset((33, 34, 42, 162))         # MySQL GTID, anonymous, tagged; MariaDB
GROUP_END = frozenset((XID, QUERY))                # a commit, or the next statement
ROWS = LIBRARY_ROWS     # WRITE/UPDATE/DELETE v1 and v2, PARTIAL_UPDATE_ROWS
TARGETS = ROWS | {TABLE_MAP}
NEAR = 2        # rows events served on either side of the edited one
READERS = ("fast", "library")
SERVED = "binlog.000001"        # the name every file is served under (a numbered name)
MEMORY_LIMIT = 2 << 30          # a worker's address space
# table-level reasons of a rows event not decoded, or not read at all
UNDECODABLE = ("undecodable_rows", "undecoded_event")


def read_file(path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def split_events(data: bytes) -> list[tuple[int, bytes]]:
    """(start position, event bytes) of each event of a binlog file."""
    if data[:4] != MAGIC:
        raise ValueError("not a binlog file")
    out, at = [], 4
    while at + HEADER_LEN <= len(data):
        size = int.from_bytes(data[at + 9:at + 13], "little")
        if size < HEADER_LEN or at + size > len(data):
            break           # a file cut inside its last event: served without it
        out.append((at, data[at:at + size]))
        at += size
    return out


def has_checksums(events: list[tuple[int, bytes]]) -> bool:
    """Whether the file's events end in a CRC32: its format description says CRC32 in its
    checksum-algorithm byte, before its own CRC32 (which a server since 5.6.1 writes even
    when the others have none; computed with the binlog-in-use flag cleared, the flag a
    file not closed keeps)."""
    fde = bytearray(next(e for _, e in events if e[4] == FORMAT_DESCRIPTION))
    fde[17] &= ~IN_USE & 0xFF
    return (zlib.crc32(fde[:-4]) & 0xFFFFFFFF == int.from_bytes(fde[-4:], "little")
            and fde[-5] == CRC32)


def with_crc(event: bytes) -> bytes:
    return event[:-4] + (zlib.crc32(event[:-4]) & 0xFFFFFFFF).to_bytes(4, "little")


@dataclass(frozen=True)
class Mutant:
    """``file`` with ``edits`` ((offset in the file, new byte), ...) inside one event."""

    number: int
    file: str
    event_type: int
    edits: tuple[tuple[int, int], ...]

    def served(self, data: bytes, edited: bool = True) -> list[tuple[int, bytes]]:
        """The events to serve: the file's format description (and previous-GTIDs event),
        then the event group holding the edited event, that event edited (unless not
        ``edited``) and its CRC32 recomputed. Each event keeps its position, so the stream
        reads as the file's."""
        events = split_events(data)
        at = max(i for i, (s, _) in enumerate(events) if s <= self.edits[0][0])
        start, event = events[at]
        if edited:
            changed = bytearray(event)
            for offset, byte in self.edits:
                changed[offset - start] = byte
            events[at] = start, (with_crc(bytes(changed)) if has_checksums(events)
                                 else bytes(changed))
        return [e for e in events[:at] if e[1][4] in PREAMBLE] + group_around(events, at)


def group_around(events: list[tuple[int, bytes]], at: int) -> list[tuple[int, bytes]]:
    """The events of the group holding event ``at``: from its GTID (or BEGIN) to its XID
    (or the next statement), as far as the file has them; of its rows events only those
    within NEAR events of ``at`` (a group of thousands of rows costs seconds a run)."""
    first = at
    while first > 0 and events[first][1][4] not in GROUP_START and not _begin(events[first]):
        first -= 1
    if first > 0 and _begin(events[first]) and events[first - 1][1][4] in GROUP_START:
        first -= 1
    last = at
    while last + 1 < len(events) and events[last][1][4] not in GROUP_END:
        last += 1
    return [e for j, e in enumerate(events[first:last + 1], first)
            if e[1][4] not in PREAMBLE and (e[1][4] not in ROWS or abs(j - at) <= NEAR)]


def _begin(event: tuple[int, bytes]) -> bool:
    return event[1][4] == QUERY and b"BEGIN" in event[1][-12:]


def mutants(files: dict[str, bytes], seed: int, count: int) -> list[Mutant]:
    """``count`` mutants of ``files`` (name -> bytes), from ``seed``: a file, one of its
    table-map or rows events, 1-4 bytes of its body overwritten (a random byte, 0x00, 0xFF
    or a small number: what makes lengths and counts lie)."""
    rng = random.Random(seed)
    targets = {}
    for name, data in sorted(files.items()):
        events = split_events(data)
        tail = 4 if has_checksums(events) else 0
        found = [(s, e) for s, e in events if e[4] in TARGETS and len(e) > HEADER_LEN + tail]
        if found:
            targets[name] = (found, tail)
    names = sorted(targets)
    out = []
    for number in range(count):
        name = names[number % len(names)]
        found, tail = targets[name]
        start, event = rng.choice(found)
        body = range(start + HEADER_LEN, start + len(event) - tail)
        edits = tuple(sorted((rng.choice(body), rng.choice(
            (rng.randrange(256), 0, 0xFF, rng.randrange(8)))) for _ in range(rng.randint(1, 4))))
        out.append(Mutant(number, name, event[4], edits))
    return out


# -- one run ------------------------------------------------------------------------------

def run_mutant(primary, events: list[tuple[int, bytes]], reader: str, mappings) -> dict:
    """Stream ``events`` from ``primary`` to a BinlogSource on ``reader``; returns
    {"outcome": decoded | named | unnamed, ...} (``invalidated`` tells the table-level
    invalidations apart)."""
    info, start, stream = _stream(primary, events, reader)
    encoder = RowEncoder(mappings, MatchedTables(mappings))
    source = BinlogSource(stream, info, start, mappings, MatchedTables(mappings), encoder)
    reasons: dict[str, int] = {}
    records = 0
    try:
        for item in source.changes():
            if isinstance(item, TableEvent):
                reasons[item.change.reason] = reasons.get(item.change.reason, 0) + 1
            elif isinstance(item, Record):
                records += 1
            elif isinstance(item, Group):
                records += len(item.records)
    except CachesyncError as e:
        return {"outcome": "named", "error": f"{type(e).__name__}: {e}"[:300]}
    except Exception as e:      # noqa: BLE001 -- what the fuzz test looks for
        return {"outcome": "unnamed", "error": f"{type(e).__name__}: {e}"[:300],
                "where": traceback.format_exc(limit=-4)[-1500:]}
    finally:
        stream.close()
    return {"outcome": "decoded", "records": records, "table_events": reasons}


def invalidated(result: dict, unedited: dict) -> dict:
    """``result`` marked "invalidated" when the edit made a table-level event of the rows
    the change source could not decode (or read) that the unedited events did not have."""
    if result["outcome"] != "decoded":
        return result
    more = any(result["table_events"].get(r, 0) > unedited.get("table_events", {}).get(r, 0)
               for r in UNDECODABLE)
    return {**result, "outcome": "invalidated"} if more else result


def _stream(primary, events: list[tuple[int, bytes]], reader: str) -> tuple:
    """(server info, start, the tailer's stream on ``reader``) of ``primary`` serving
    ``events`` from their start (MariaDB: an empty GTID state, as the tailer reads MariaDB
    by GTID only), ending where they end."""
    mariadb = serve(primary, events)
    info = ServerInfo("mariadb" if mariadb else "mysql", 1, None, {}, ())
    start = (Checkpoint(info.identity, "") if mariadb
             else Checkpoint(info.identity, None, SERVED, 4))
    options = {"host": "127.0.0.1", "port": primary.port, "user": "fuzz", "passwd": "fuzz",
               "ssl_disabled": True}
    return info, start, open_stream(options, 101, reader, info, start, blocking=False)


def serve(primary, events: list[tuple[int, bytes]]) -> bool:
    """Make ``primary`` serve these events as its one binlog file; returns whether they are
    a MariaDB server's (a MariaDB GTID event among them)."""
    mariadb = any(e[4] == 162 for _, e in events)
    checksum = has_checksums(events)
    binlog = mb.Binlog(SERVED, checksum=checksum)
    binlog.events = list(events)
    primary.files = [binlog]
    primary.variables["binlog_checksum"] = "CRC32" if checksum else "NONE"
    primary.variables["version"] = "10.5.15-MariaDB" if mariadb else "8.0.28"
    return mariadb


def mappings_of(primary, events: list[tuple[int, bytes]]):
    """A mapping of every table the table maps of (unmutated) ``events`` name, keyed by
    the table's first column (``fz:{column}``; a map without column names: ``fz:{id}``),
    read by the library from ``primary`` serving them."""
    stream = _stream(primary, events, "library")[2]
    tables = {}
    try:
        for event in stream:
            if isinstance(event, TableMapEvent):
                first = event.table_obj.columns[0].name if event.table_obj.columns else None
                tables[f"{event.schema}.{event.table}"] = {"keys": [f"fz:{{{first or 'id'}}}"]}
    except Exception:       # noqa: BLE001 -- what the library cannot read is not mapped
        pass
    finally:
        stream.close()
    good = {}
    for table, spec in tables.items():
        try:
            parse_mappings({table: spec})
        except Exception:       # noqa: BLE001 -- a name the mapping cannot hold: unmapped
            continue
        good[table] = spec
    return parse_mappings(good or {"fuzz.none": {"keys": ["fz:{id}"]}})


# -- the worker and its driver ---------------------------------------------------------------

def main() -> None:
    """Runs as JSON lines on stdin ({"file", "path", "number", "edits", "reader"}); for each,
    a line saying it started, then its result, on stdout."""
    logging.disable(logging.WARNING)
    # a loop that never ends may also grow without end: a MemoryError, not a swapping host
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    files: dict[str, bytes] = {}
    last: tuple = (None, None)      # the last window's event positions, its mapping
    with ReplayPrimary([]) as primary:
        for line in sys.stdin:
            spec = json.loads(line)
            if spec["file"] not in files:
                files[spec["file"]] = read_file(pathlib.Path(spec["path"]))
            data = files[spec["file"]]
            mutant = Mutant(spec["number"], spec["file"], 0,
                            tuple(tuple(e) for e in spec["edits"]))
            window = mutant.served(data, edited=False)
            if last[0] != [start for start, _ in window]:    # a mutant runs once per reader
                mappings = mappings_of(primary, window)
                unedited = run_mutant(primary, window, "library", mappings)
                last = [start for start, _ in window], mappings, unedited
            said = {"number": mutant.number, "reader": spec["reader"]}
            print(json.dumps({**said, "started": True}), flush=True)
            result = run_mutant(primary, mutant.served(data), spec["reader"], last[1])
            print(json.dumps({**said, **invalidated(result, last[2])}), flush=True)


def run_all(runs: list[dict], env: dict, timeout_s: float) -> list[dict]:
    """Each run ({"file", "path", "number", "edits", "reader"}) through worker subprocesses
    started with ``env``: its result, or {"outcome": "hang"} when it did not end within
    ``timeout_s`` (the worker is killed), or {"outcome": "signal"} when the worker died by
    one; a new worker takes the runs after it."""
    results: dict[tuple, dict] = {}
    todo = list(runs)
    while todo:
        errors = tempfile.TemporaryFile("w+")
        worker = subprocess.Popen([sys.executable, "-m", "tests.support.binlogfuzz"], cwd=ROOT,
                                  env={**os.environ, **env}, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=errors, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_feed, args=(worker, todo), daemon=True).start()
        threading.Thread(target=lambda: [lines.put(x) for x in worker.stdout] + [lines.put(None)],
                         daemon=True).start()
        try:
            _collect(worker, lines, todo, results, timeout_s)
        finally:
            worker.kill()
            worker.wait()
            errors.seek(0)
            said = errors.read()[-1500:]
            errors.close()
        for result in results.values():
            if result["outcome"] in ("signal", "unnamed") and not result.get("where"):
                result["where"] = said      # the worker's last words
        todo = [r for r in todo if (r["number"], r["reader"]) not in results]
    return [{**r, **results[(r["number"], r["reader"])]} for r in runs]


def _collect(worker, lines: queue.Queue, todo: list[dict], results: dict,
             timeout_s: float) -> None:
    """One worker's results into ``results`` until it ends, dies or stops answering."""
    started = None
    while True:
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            results[_current(started, results, todo)] = {"outcome": "hang"}
            return
        if line is None:
            code = worker.wait()
            current = _current(started, results, todo)
            if current is not None:
                results[current] = {"outcome": "signal" if code < 0 else "unnamed",
                                    "error": f"the worker ended with {code}"}
            return
        found = json.loads(line)
        key = (found.pop("number"), found.pop("reader"))
        if found.pop("started", False):
            started = key
        else:
            results[key] = found


def _current(started: tuple | None, results: dict, todo: list[dict]) -> tuple | None:
    """The run a worker was in when it stopped answering or died."""
    if started is not None and started not in results:
        return started
    return next(((r["number"], r["reader"]) for r in todo
                 if (r["number"], r["reader"]) not in results), None)


def _feed(worker, runs: list[dict]) -> None:
    try:
        for run in runs:
            worker.stdin.write(json.dumps(run) + "\n")
        worker.stdin.close()
    except (BrokenPipeError, ValueError):
        pass        # the worker was killed or died: the driver starts another


if __name__ == "__main__":
    main()
