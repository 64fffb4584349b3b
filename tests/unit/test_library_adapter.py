"""Private names of python-mysql-replication and pymysql appear in one module only,
cachesync/runtime/library_adapter.py, which lists each with why it is needed."""

from __future__ import annotations

import pathlib
import re

from cachesync.runtime import library_adapter

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTER = pathlib.Path(library_adapter.__file__).resolve()
# the checkout's own files; not what is built or installed beside them
SKIPPED_DIRS = {".git", ".venv", ".devstack", "build", "dist", "_build", "node_modules",
                "__pycache__"}
SUFFIXES = {".py", ".pyi", ".c", ".h", ".md", ".rst", ".txt", ".toml", ".cfg", ".yml",
            ".yaml", ".sh"}

# what the libraries keep private, as it would be written to reach it
PRIVATE = re.compile("|".join([
    r"_(?:BinLogStreamReader|BinLogPacketWrapper|RowsEvent|TableMapEvent|BinLogEvent)__\w",
    r"\b_(?:stream_connection|ctl_connection|read_packet|write_bytes|next_seq_id|rfile"
    r"|force_close|create_ssl_ctx|fetch_one_row|ignore_decode_errors|have_cryptography)\b",
    r"\bpymysql\b[\w.]*\b_auth\b|\bfrom pymysql import _auth\b",
    r"\bpacket\._(?:data|position)\b",
    r"\._sock\b",
]))
# other libraries' private names that the patterns above also match, where they are used
NOT_THESE_LIBRARIES = {
    "bench/lag.py": "redis-py's connection socket (Connection._sock), read by the lag probe",
}


def checkout_files():
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if (path.suffix in SUFFIXES and path.is_file()
                and not SKIPPED_DIRS.intersection(rel.parts[:-1])
                and not rel.parts[0].startswith(".")):
            yield path, rel.as_posix()


def test_private_library_names_appear_in_the_adapter_only():
    found = []
    for path, rel in checkout_files():
        if path.resolve() in (ADAPTER, pathlib.Path(__file__).resolve()):
            continue
        if rel in NOT_THESE_LIBRARIES:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                 .splitlines(), start=1):
            match = PRIVATE.search(line)
            if match:
                found.append(f"{rel}:{n}: {match.group(0)}: {line.strip()[:100]}")
    assert not found, ("private names of python-mysql-replication or pymysql outside "
                       "cachesync/runtime/library_adapter.py (add what is needed there, with "
                       "why):\n" + "\n".join(found))


def test_the_patterns_find_what_they_are_for():
    """The scan is not vacuous: the adapter itself is full of such names."""
    text = ADAPTER.read_text(encoding="utf-8")
    for name in ("_BinLogStreamReader__use_checksum", "_stream_connection", "_read_packet",
                 "_write_bytes", "_rfile", "_RowsEvent__rows", "packet._data", "._sock"):
        assert name in text and PRIVATE.search(name), name


def test_the_exceptions_still_need_to_be_exceptions():
    """Each file excused above still uses such a name (else the exception goes)."""
    for rel in NOT_THESE_LIBRARIES:
        assert PRIVATE.search((ROOT / rel).read_text(encoding="utf-8")), rel


def test_every_private_name_the_adapter_reaches_exists_in_the_installed_libraries():
    """The adapter's names are the installed versions' own (the versions test runs this
    check against the lowest and highest versions the pins allow)."""
    import pymysql
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.packet import BinLogPacketWrapper
    from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent, RowsEvent,
                                              UpdateRowsEvent, WriteRowsEvent)
    conn = pymysql.connections.Connection
    for name in ("_read_packet", "_write_bytes", "_force_close", "_create_ssl_ctx"):
        assert callable(getattr(conn, name)), name
    for name in ("_RowsEvent__read_fsp", "_RowsEvent__add_fsp_to_time",
                 "_RowsEvent__read_date", "_RowsEvent__read_datetime2",
                 "_RowsEvent__read_string", "_RowsEvent__read_time2"):
        assert callable(getattr(RowsEvent, name)), name
    for kind in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, PartialUpdateRowsEvent):
        assert callable(kind._fetch_one_row), kind
    assert hasattr(library_adapter.pymysql_auth, "caching_sha2_password_auth")
    source = "".join(__import__("inspect").getsource(c) for c in
                     (BinLogStreamReader, BinLogPacketWrapper, conn, RowsEvent))
    for name in ("self.__connected_stream", "self.__use_checksum", "self.__post_header_lengths",
                 "self._stream_connection", "self._ctl_connection", "self.__data_buffer",
                 "self._rfile", "self._sock", "self.__rows", "self._ignore_decode_errors"):
        assert name in source, name
