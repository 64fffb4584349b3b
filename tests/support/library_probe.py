"""What the binlog readers decode, as digests, under whichever library versions are importable.

``python -m tests.support.library_probe [--live JSON]`` prints one JSON
document: the versions of python-mysql-replication and pymysql it imported, a digest of
what ``BinlogSource`` made of every shared real binlog file with each reader (the fast
reader, over the library's connection, and the library's reader), and, with ``--live``
({"host", "port", "user", "password", "db", "start", "end"}: a MariaDB range between two
GTID states; "server_id", optional, the replica id base), a digest of the records read from that live server with each reader.

tests/integration/test_library_versions.py runs it in throwaway virtualenvs holding the
lowest and the highest versions the pins allow, which see the main environment's
site-packages after their own (cachesync and its other dependencies come from there, the
two libraries from the throwaway environment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--live", help="a live MariaDB range to read (JSON)")
    args = parser.parse_args(argv)
    import pymysql
    import pymysqlreplication
    from importlib import metadata
    out = {"versions": {"mysql-replication": metadata.version("mysql-replication"),
                        "pymysql": metadata.version("pymysql")},
           "paths": {"pymysqlreplication": pymysqlreplication.__file__,
                     "pymysql": pymysql.__file__},
           "files": real_files()}
    if args.live:
        out["live"] = {reader: live(json.loads(args.live), reader)
                       for reader in ("fast", "library")}
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


def real_files() -> dict[str, str]:
    """``name/reader`` -> digest of the rows, table-level events and error of each file."""
    from tests.support import gomysql, realbinlog as rb
    reading = gomysql.reading()         # made by the caller's test first: here, from cache
    digests = {}
    for name in rb.names():
        for reader in ("fast", "library"):
            outcome = rb.read_file(name, reader, rb.named_tables(reading[name]))
            error = (type(outcome.error).__name__, str(outcome.error)) if outcome.error else None
            digests[f"{name}/{reader}"] = _digest([repr(outcome.rows), repr(outcome.tables),
                                                   repr(error)])
    return digests


def live(spec: dict, reader: str, timeout_s: float = 120.0) -> dict:
    """The records of ``spec``'s range read from the live server with ``reader``: how many,
    and their digest (keys, values and ids, byte for byte)."""
    from cachesync.producer_outbox.binlog_source import BinlogSource, open_stream
    from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
    from cachesync.producer_outbox.decode.matched import MatchedTables
    from cachesync.producer_outbox.ports import Commit, Group, Record, TableEvent
    from cachesync.producer_outbox.binlog.preflight import ServerInfo
    from cachesync.producer_outbox.encode.rowevents import RowEncoder
    from cachesync.schema.gtid import GtidState, parse_gtid
    from cachesync.schema.mapping import parse_mappings
    mappings = parse_mappings({f"{spec['db']}.{spec['table']}": {"keys": ["k:{id}"],
                                                                 "mode": "update"}})
    info = ServerInfo("mariadb", 1, None, {}, ())
    start = Checkpoint(info.identity, spec["start"])
    options = {k: spec[k] for k in ("host", "port", "user", "password")}
    # a replica id of its own per probe and reader: probes may read the same server at once
    stream = open_stream(options, spec.get("server_id", 4000) + len(reader), reader, info, start)
    source = BinlogSource(stream, info, start, mappings, MatchedTables(mappings),
                          RowEncoder(mappings, MatchedTables(mappings)))
    parts, tables, deadline = [], 0, time.monotonic() + timeout_s
    end = [parse_gtid(g) for g in spec["end"].split(",") if g.strip()]   # one per domain
    try:
        for item in source.changes():
            if type(item) is Record:
                parts.append(repr(tuple(item[2:])))        # key, value, message id
            elif type(item) is Group:                      # (records as Record's fields)
                parts.extend(repr(tuple(r[2:])) for r in item.records)
            elif type(item) is TableEvent:
                tables += 1
            # a Group takes every transaction its read brought: one the server wrote right
            # after the range (another client's) may come in the same group as its last
            if type(item) in (Commit, Group) and all(
                    g in GtidState.parse(item.checkpoint.gtid) for g in end):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{reader}: {spec['end']} not reached in {timeout_s:.0f}s")
    finally:
        source.close()
    return {"records": len(parts), "table_events": tables, "digest": _digest(parts)}


def _digest(parts: list[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "backslashreplace") + b"\n")
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
