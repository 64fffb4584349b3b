"""A replication primary that streams MySQL 8 binlog bytes, for tests without a MySQL server.

``ReplayPrimary`` speaks enough of the MySQL client/server protocol for cachesync's tailer,
its preflight and python-mysql-replication: the v10 handshake (any password is accepted),
text queries answered from a table of server variables (``SELECT @@x``, ``SHOW [GLOBAL]
VARIABLES``, ``SHOW GRANTS``, ``SHOW BINARY LOG STATUS``/``SHOW MASTER STATUS``, ``SET``),
COM_REGISTER_SLAVE, COM_BINLOG_DUMP (file:pos) and COM_BINLOG_DUMP_GTID (a GTID set, in
the untagged or the 8.3+ tagged encoding: transactions in it are skipped, as MySQL does).
A blocking dump waits for events appended while it runs and sends heartbeats at the period
the replica set (``@master_heartbeat_period``).

The binlog it serves is a list of ``tests.support.mysqlbinlog.Binlog`` files, built from
MySQL's documented event format or from recorded bytes (see that module). A query it
cannot answer gets an error and is kept in ``unanswered``, so a test can assert that the
tailer asked nothing the primary made up an answer for.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import socketserver
import struct
import threading
import uuid as uuidlib
import zlib

from tests.support import mysqlbinlog as mb
from tests.support.binlog import UUID

log = logging.getLogger(__name__)

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
_CAPABILITIES = (0x1 | 0x2 | 0x4 | 0x8 | 0x200 | 0x2000 | 0x8000 | 0x20000 | 0x80000 | 0x200000)
_AUTOCOMMIT = 0x0002
ER_BAD_DB_ERROR, ER_PARSE_ERROR, ER_MASTER_FATAL_ERROR_READING_BINLOG = 1049, 1064, 1236
_LOG_EVENT_ARTIFICIAL_F = 0x20

DEFAULT_VARIABLES = {
    "version": mb.SERVER_VERSION, "version_comment": "replay primary (cachesync tests)",
    "server_id": "1", "server_uuid": UUID,
    "log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL", "binlog_checksum": "CRC32", "gtid_mode": "ON",
    "enforce_gtid_consistency": "ON", "binlog_transaction_compression": "OFF",
    "binlog_transaction_compression_level_zstd": "3", "binlog_row_value_options": "",
    "binlog_encryption": "OFF", "log_replica_updates": "ON", "log_slave_updates": "ON",
    "time_zone": "SYSTEM", "system_time_zone": "UTC",
}


# the tailer's information_schema queries (_schema_answers) -> (columns, rows) of the answer:
# accounts that may SET sql_log_bin and how many other accounts it sees (unlogged.py), foreign
# keys (fkschema.py), system-versioned tables (servertypes.py)
_SCHEMA_ANSWERS = {
    re.compile(r"^SELECT DISTINCT grantee FROM information_schema\.user_privileges\b", re.I):
        (["grantee"], []),
    re.compile(r"^SELECT COUNT\(\*\) FROM information_schema\.user_privileges\b", re.I):
        (["COUNT(*)"], [(0,)]),
    re.compile(r"\bFROM information_schema\.key_column_usage k LEFT JOIN "
               r"information_schema\.referential_constraints\b", re.I):
        (["constraint_schema", "constraint_name", "table_name", "column_name",
          "referenced_table_schema", "referenced_table_name", "referenced_column_name",
          "delete_rule", "update_rule"], []),
    re.compile(r"\bt\.table_type = 'SYSTEM VERSIONED'", re.I):
        (["table_schema", "table_name", "column_name", "generation_expression", "data_type",
          "extra"], []),
}


class ReplayPrimary:
    """A threaded server on 127.0.0.1 (``port``); ``files`` is the binlog it serves.

    ``append(binlog)`` is how a test writes while a dump runs: the file (the last one, or a
    new one after ``rotate``) gets the events and every waiting dump wakes up.
    """

    def __init__(self, files: list[mb.Binlog], variables: dict[str, str] | None = None,
                 grants: tuple[str, ...] | None = None):
        self.files = files
        self.variables = {**DEFAULT_VARIABLES, **(variables or {})}
        self.grants = grants or ("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "
                                 "`cachesync`@`%`",)
        self.unanswered: list[str] = []
        # (schema, table) -> ((column, data_type), ...): what information_schema.columns says
        self.columns: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
        self.dumps: list[tuple] = []        # ("file", name, pos) / ("gtid", set text) per dump
        self.changed = threading.Condition()
        self._server = _Server(("127.0.0.1", 0), _Session)
        self._server.primary = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="replay-primary")

    def __enter__(self) -> "ReplayPrimary":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_sessions()
        with self.changed:
            self.changed.notify_all()

    def drop_connections(self) -> None:
        """Close every client connection (a primary restart, as the replica sees it)."""
        self._server.close_sessions()

    def appended(self) -> None:
        """Wake the dumps after a test appended events to ``files``."""
        with self.changed:
            self.changed.notify_all()

    def rotate(self, name: str) -> mb.Binlog:
        """End the current file with a ROTATE to ``name`` and start that file."""
        self.files[-1].add(mb.ROTATE, mb.rotate(4, name))
        new = mb.Binlog(name, self.files[-1].server_id, self.files[-1].checksum)
        self.files.append(new)
        self.appended()
        return new

    @property
    def executed(self) -> str:
        """gtid_executed as the server prints it (uuid[:tag]:intervals, comma separated)."""
        members: dict[tuple[str, str], list[int]] = {}
        for f in self.files:
            for sid, tag, gno in f.gtids.values():
                members.setdefault((sid, tag), []).append(gno)
        return ",".join(f"{sid}{':' + tag if tag else ''}:{_intervals(gnos)}"
                        for (sid, tag), gnos in sorted(members.items()))

    def variable(self, name: str) -> str | None:
        name = name.lower()
        if name == "gtid_executed":
            return self.executed
        return self.variables.get(name)


def _intervals(gnos: list[int]) -> str:
    gnos = sorted(set(gnos))
    out, lo = [], gnos[0]
    for a, b in zip(gnos, gnos[1:] + [None]):
        if b != a + 1:
            out.append(str(lo) if lo == a else f"{lo}-{a}")
            lo = b
    return ":".join(out)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    primary: ReplayPrimary

    def __init__(self, *args):
        super().__init__(*args)
        self.sessions: set[socket.socket] = set()
        self.lock = threading.Lock()

    def close_sessions(self) -> None:
        with self.lock:
            sessions, self.sessions = list(self.sessions), set()
        for sock in sessions:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class _Closed(Exception):
    pass


class _Session(socketserver.BaseRequestHandler):
    """One client connection: handshake, then commands until it quits."""

    def setup(self) -> None:
        self.primary: ReplayPrimary = self.server.primary
        self.seq = 0
        self.heartbeat_ns = 0
        # each reply is sent as it is made: without this, Nagle's algorithm holds a small
        # packet until the client's delayed ACK (~40 ms per query on loopback)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.lock:
            self.server.sessions.add(self.request)

    def finish(self) -> None:
        with self.server.lock:
            self.server.sessions.discard(self.request)

    def handle(self) -> None:
        try:
            self._handshake()
            while True:
                self.seq = 0
                command = self._read()
                if not command or command[0] == COM_QUIT:
                    return
                self._command(command[0], command[1:])
        except (_Closed, OSError):
            return

    # -- packets ------------------------------------------------------------------------
    def _read(self) -> bytes:
        header = self._exactly(4)
        length = int.from_bytes(header[:3], "little")
        self.seq = (header[3] + 1) % 256
        return self._exactly(length)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.request.recv(n - len(data))
            if not chunk:
                raise _Closed()
            data += chunk
        return data

    def _send(self, payload: bytes) -> None:
        assert len(payload) < 0xFFFFFF, "split packets are not needed by these tests"
        self.request.sendall(len(payload).to_bytes(3, "little") + bytes([self.seq]) + payload)
        self.seq = (self.seq + 1) % 256

    def _ok(self) -> None:
        self._send(b"\x00\x00\x00" + struct.pack("<HH", _AUTOCOMMIT, 0))

    def _error(self, code: int, message: str) -> None:
        self._send(b"\xff" + struct.pack("<H", code) + b"#HY000" + message.encode())

    def _eof(self) -> None:
        self._send(b"\xfe" + struct.pack("<HH", 0, _AUTOCOMMIT))

    def _result(self, names: list[str], rows: list[tuple]) -> None:
        self._send(mb.lenenc(len(names)))
        for name in names:
            text = name.encode()
            self._send(b"".join(mb.lenenc(len(s)) + s for s in
                                (b"def", b"", b"", b"", text, text))
                       + b"\x0c" + struct.pack("<HIBHB", 33, 1024, 0xFD, 0, 0) + b"\0\0")
        self._eof()
        for row in rows:
            self._send(b"".join(b"\xfb" if v is None else mb.lenenc(len(str(v).encode()))
                                + str(v).encode() for v in row))
        self._eof()

    # -- connection phase -------------------------------------------------------------
    def _handshake(self) -> None:
        scramble = os.urandom(20).replace(b"\0", b"\1")
        caps = _CAPABILITIES
        version = self.primary.variables["version"].encode()
        self._send(b"\x0a" + version + b"\0" + struct.pack("<I", threading.get_ident() & 0xFFFF)
                   + scramble[:8] + b"\0" + struct.pack("<H", caps & 0xFFFF) + bytes([255])
                   + struct.pack("<HH", _AUTOCOMMIT, caps >> 16) + bytes([21]) + bytes(10)
                   + scramble[8:] + b"\0" + b"mysql_native_password\0")
        self._read()           # the client's response: any account and password are accepted
        self._ok()

    # -- commands -----------------------------------------------------------------------
    def _command(self, code: int, body: bytes) -> None:
        if code == COM_QUERY:
            self._query(body.decode("utf-8", "replace"))
        elif code in (COM_PING, COM_INIT_DB, COM_REGISTER_SLAVE):
            self._ok()
        elif code == COM_BINLOG_DUMP:
            pos, flags, _server_id = struct.unpack_from("<IHI", body)
            self._dump_file(body[10:].decode(), pos, blocking=not flags & 1)
        elif code == COM_BINLOG_DUMP_GTID:
            flags, _server_id, name_len = struct.unpack_from("<HII", body)
            at = 10 + name_len + 8
            size = struct.unpack_from("<I", body, at)[0]
            executed = decode_gtid_set(body[at + 4:at + 4 + size])
            self._dump_gtid(executed, blocking=not flags & 1)
        else:
            self._error(ER_PARSE_ERROR, f"replay primary: command {code:#x} not supported")

    def _query(self, sql: str) -> None:
        text = sql.strip().rstrip(";").strip()
        upper = text.upper()
        if upper.startswith(("SET ", "COMMIT", "ROLLBACK", "BEGIN", "START TRANSACTION")):
            m = re.match(r"SET\s+@master_heartbeat_period\s*=\s*(\d+)", text, re.I)
            if m:
                self.heartbeat_ns = int(m.group(1))
            self._ok()
        elif re.fullmatch(r"SELECT\s+VERSION\(\)\s*,\s*@@server_id", text, re.I):
            self._result(["VERSION()", "@@server_id"],
                         [(self.primary.variable("version"), self.primary.variable("server_id"))])
        elif re.fullmatch(r"SELECT\s+VERSION\(\)", text, re.I):
            self._result(["VERSION()"], [(self.primary.variable("version"),)])
        elif re.fullmatch(r"SELECT\s+@@[\w.@, ]+", text, re.I):
            self._select_variables(text)
        elif re.match(r"SHOW\s+(GLOBAL\s+|SESSION\s+)?VARIABLES\b", text, re.I):
            self._show_variables(text)
        elif re.fullmatch(r"SHOW\s+GRANTS(\s+FOR\s+CURRENT_USER(\(\))?)?", text, re.I):
            self._result(["Grants"], [(g,) for g in self.primary.grants])
        elif re.fullmatch(r"SHOW\s+(BINARY|MASTER)\s+LOGS", text, re.I):
            self._result(["Log_name", "File_size", "Encrypted"],
                         [(f.name, f.end, "No") for f in self.primary.files])
        elif re.search(r"\bFROM\s+information_schema\.columns\b", text, re.I) and \
                re.search(r"\bdata_type\s+IN\s*\(", text, re.I):
            self._columns_of_types(text)
        elif re.fullmatch(r"SHOW\s+(BINARY\s+LOG|MASTER)\s+STATUS", text, re.I):
            last = self.primary.files[-1]
            self._result(["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB",
                          "Executed_Gtid_Set"],
                         [(last.name, last.end, "", "", self.primary.executed)])
        elif self._schema_answers(text):
            pass
        elif self._missing_database(text):
            pass
        else:
            self.primary.unanswered.append(text)
            self._error(ER_PARSE_ERROR, f"replay primary does not answer: {text[:200]}")

    def _schema_answers(self, text: str) -> bool:
        """The information_schema queries the tailer starts with, answered as this primary's
        schema is: its tables have no foreign keys and no system versioning, and its one
        account (the current user) holds only the replication grants, none that may SET
        sql_log_bin."""
        for query, (names, rows) in _SCHEMA_ANSWERS.items():
            if query.search(text):
                self._result(names, rows)
                return True
        return False

    def _missing_database(self, text: str) -> bool:
        """A query on a table of a database this primary does not have gets the server's
        error, as from any server without it (e.g. cachesync's state database)."""
        m = re.search(r"\bFROM\s+`?(\w+)`?\s*\.", text, re.I)
        known = {schema.lower() for schema, _ in self.primary.columns} | {"information_schema"}
        if m is None or m.group(1).lower() in known:
            return False
        self._error(ER_BAD_DB_ERROR, f"Unknown database '{m.group(1)}'")
        return True

    def _columns_of_types(self, text: str) -> None:
        """``SELECT table_schema, table_name, column_name, data_type FROM
        information_schema.columns WHERE ((table_schema = .. AND table_name = ..) OR ..) AND
        data_type IN (..)``, answered from ``columns``."""
        pairs = {(a.lower(), b.lower()) for a, b in re.findall(
            r"table_schema\s*=\s*'([^']*)'\s+AND\s+table_name\s*=\s*'([^']*)'", text, re.I)}
        kinds = {k.lower() for k in re.findall(
            r"'([^']*)'", re.search(r"data_type\s+IN\s*\(([^)]*)\)", text, re.I).group(1))}
        rows = [(schema, table, column, kind)
                for (schema, table), cols in self.primary.columns.items()
                if (schema.lower(), table.lower()) in pairs
                for column, kind in cols if kind.lower() in kinds]
        self._result(["table_schema", "table_name", "column_name", "data_type"], rows)

    def _select_variables(self, text: str) -> None:
        names = [n.strip() for n in text[len("SELECT"):].split(",")]
        values = []
        for name in names:
            bare = re.sub(r"^@@(GLOBAL\.|SESSION\.)?", "", name, flags=re.I)
            value = self.primary.variable(bare)
            if value is None:
                self.primary.unanswered.append(text)
                self._error(1193, f"Unknown system variable '{bare}'")
                return
            values.append(value)
        self._result(names, [tuple(values)])

    def _show_variables(self, text: str) -> None:
        like = re.search(r"LIKE\s+'([^']*)'", text, re.I)
        listed = re.search(r"IN\s*\(([^)]*)\)", text, re.I)
        variables = {**self.primary.variables, "gtid_executed": self.primary.executed}
        if like:
            pattern = re.compile("^" + re.escape(like.group(1)).replace("%", ".*")
                                 .replace("_", ".") + "$", re.I)
            rows = [(k, v) for k, v in variables.items() if pattern.match(k)]
        elif listed:
            wanted = {n.strip().strip("'\"").lower() for n in listed.group(1).split(",")}
            rows = [(k, v) for k, v in variables.items() if k in wanted]
        else:
            rows = sorted(variables.items())
        self._result(["Variable_name", "Value"], rows)

    # -- binlog dump --------------------------------------------------------------------
    def _dump_file(self, name: str, pos: int, blocking: bool) -> None:
        self.primary.dumps.append(("file", name, pos))
        name = name.rstrip("\0")
        if not name and self.primary.files:
            # MariaDB's dump from @slave_connect_state names no file; this primary keeps no
            # MariaDB GTID index, so it serves its files from the start
            name = self.primary.files[0].name
        names = [f.name for f in self.primary.files]
        name = name.rstrip("\0") or names[0]    # no name: the first binlog, as a server reads it
        if name not in names:
            self._error(ER_MASTER_FATAL_ERROR_READING_BINLOG,
                        "Could not find first log file name in binary log index file")
            return
        self._stream(names.index(name), max(pos, 4), None, blocking)

    def _dump_gtid(self, executed: set, blocking: bool) -> None:
        self.primary.dumps.append(("gtid", sorted(executed)))
        self._stream(0, 4, executed, blocking)

    def _stream(self, index: int, pos: int, executed: set | None, blocking: bool) -> None:
        """Send the events from file ``index`` at ``pos`` on; skip the transactions of
        ``executed`` ((uuid, tag, gno) triples), as MySQL's dump thread does."""
        current = self.primary.files[index]
        self._send(mb.OK_BYTE + mb.event(mb.ROTATE, mb.rotate(pos, current.name), 0,
                                      current.server_id, timestamp=0, checksum=current.checksum,
                                      flags=_LOG_EVENT_ARTIFICIAL_F))
        if pos > 4:     # the file's format description first, at end position 0
            self._send(mb.OK_BYTE + _with_pos(current.events[0][1], 0, current.checksum))
        skipping = False
        while True:
            with self.primary.changed:
                files = self.primary.files
                current = files[index]
                pending = [(s, e) for s, e in current.events if s >= pos]
                more_files = index + 1 < len(files)
            for start, data in pending:
                if data[4] in (mb.GTID, mb.GTID_TAGGED):
                    skipping = executed is not None and current.gtids.get(start) in executed
                if not (skipping and data[4] not in _ALWAYS_SENT):
                    self._send(mb.OK_BYTE + data)
                pos = start + len(data)
            if pending:
                continue
            if more_files:
                index, pos = index + 1, 4
                continue
            if not blocking:
                self._eof()
                return
            self._wait(current, pos)

    def _wait(self, current: mb.Binlog, pos: int) -> None:
        """Block until events are appended; a heartbeat at each period of silence."""
        period = self.heartbeat_ns / 1e9 if self.heartbeat_ns else 1.0
        with self.primary.changed:
            if current.end == pos and self.primary.files[-1] is current:
                if not self.primary.changed.wait(period) and self.heartbeat_ns:
                    beat = mb.event(mb.HEARTBEAT, current.name.encode(), pos, current.server_id,
                                    timestamp=0, checksum=current.checksum,
                                    flags=_LOG_EVENT_ARTIFICIAL_F)
                    self._send(mb.OK_BYTE + beat)


_ALWAYS_SENT = frozenset((mb.FORMAT_DESCRIPTION, mb.ROTATE, mb.PREVIOUS_GTIDS))


def _with_pos(data: bytes, log_pos: int, checksum: bool) -> bytes:
    """The event with another end position (and its checksum recomputed)."""
    body = data[:13] + struct.pack("<I", log_pos) + data[17:len(data) - (4 if checksum else 0)]
    if not checksum:
        return body
    return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def decode_gtid_set(data: bytes) -> set[tuple[str, str, int]]:
    """The (uuid, tag, gno) members of an encoded GTID set (either encoding)."""
    head = struct.unpack_from("<Q", data)[0]
    tagged = head >> 56 != 0
    count = (head >> 8) & ((1 << 48) - 1) if tagged else head
    at, out = 8, set()
    for _ in range(count):
        sid = str(uuidlib.UUID(bytes=data[at:at + 16]))
        at += 16
        tag = ""
        if tagged:
            size, at = _read_varlen(data, at)
            tag, at = data[at:at + size].decode(), at + size
        n = struct.unpack_from("<Q", data, at)[0]
        at += 8
        for _ in range(n):
            lo, hi = struct.unpack_from("<QQ", data, at)
            at += 16
            out.update((sid, tag, g) for g in range(lo, hi))
    return out


def _read_varlen(data: bytes, at: int) -> tuple[int, int]:
    first = data[at]
    ones = 0
    while ones < 8 and first >> ones & 1:
        ones += 1
    if ones == 8:
        return struct.unpack_from("<Q", data, at + 1)[0], at + 9
    size = ones + 1
    return int.from_bytes(data[at:at + size], "little") >> size, at + size
