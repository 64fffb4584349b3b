"""Every binlog file real servers wrote, through the tailer's change source, against go-mysql.

Each file of the shared ``realbinlog/`` folder (sources in its SOURCES.md: rust_mysql_common,
mysql-binlog-connector-java and Canal test data, MySQL 5.1 to 9.6 and MariaDB 10.5) is
streamed byte for byte by a replay primary to ``binlog_source.open_stream`` and
``BinlogSource`` (tests/support/realbinlog.py), with both readers: the fast reader and
python-mysql-replication (``tailer.reader: library``); ``make test-python-path`` runs it
again with ``CACHESYNC_NO_SPEEDUPS=1`` (no compiled path).

The independent decoder is go-mysql's parser (``replication.NewBinlogParser``), its reading
recorded once in ``realbinlog_gomysql.json`` beside this file by ``make gomysql-rows``
(tests/support/gomysql_rows/, Go from the module proxy). Rules:

* where a table map carries column names, every row's values match go-mysql's, compared as
  text (``_text``: what ``CAST(col AS CHAR)`` shows, bytes where the column holds bytes);
* where it does not, each such table is invalidated as a whole (``no_column_names``) and no
  row of it is published;
* a file may end in a named cachesync error only where ``NAMED_ERRORS`` says so and why;
  nothing else is raised.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import pathlib

import pytest

from tests.support import realbinlog as rb

GO = {f["file"]: f for f in json.loads(
    (pathlib.Path(__file__).with_name("realbinlog_gomysql.json")).read_text())}

# file -> (error class, text in its message): what the tailer stops with, and why that is right
# (none today: MySQL 5.1.34sp1's version text, which the library cannot parse, is read as
# MySQL reads it, producer_outbox/binlog/serverversion.py)
NAMED_ERRORS: dict[str, tuple[str, str]] = {}
READERS = ("fast", "library")
# Where go-mysql's JSON text is not MySQL's: the text MySQL's CAST(col AS CHAR) prints
# (sql-common/json_dom.cc Json_wrapper::to_string: an opaque VARCHAR as base64:type15:..,
# a DATE without a time, a DECIMAL as a number; go-mysql prints the string, a DATETIME and
# a string); (file, row) -> {column: MySQL's text}
MYSQL_TEXT = {
    ("json-opaque.binlog", 0): {"a": '{"a": "base64:type15:VQ=="}'},
    ("json-opaque.binlog", 1): {"a": '{"b": "2012-03-18"}'},
    ("json-opaque.binlog", 4): {"a": '{"d": 123.456}'},
    ("json-opaque.binlog", 5): {"a": '{"e": 9.00}'},
}


def _named(f: dict) -> dict[str, str]:
    """db.table -> a column, for the tables go-mysql found column names for."""
    return {f"{r['db']}.{r['table']}": r["columns"][0] for r in f["rows"]}


@pytest.fixture(scope="module")
def outcomes():
    cache: dict = {}

    def get(name: str, reader: str) -> rb.Outcome:
        if (name, reader) not in cache:
            cache[(name, reader)] = rb.read_file(name, reader, _named(GO[name]))
        return cache[(name, reader)]
    return get


def test_the_recording_covers_every_shared_file():
    assert sorted(GO) == rb.names(), "run make gomysql-rows to record the new files"
    assert all(not f.get("error") for f in GO.values())


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", sorted(GO))
def test_a_real_binlog_file_decodes_as_go_mysql_reads_it(outcomes, name, reader):
    got, want = outcomes(name, reader), GO[name]
    if name in NAMED_ERRORS:
        kind, text = NAMED_ERRORS[name]
        assert type(got.error).__name__ == kind and text in str(got.error), got.error
        return
    assert got.error is None, f"{type(got.error).__name__}: {got.error}"
    expected = [_go_row(r, MYSQL_TEXT.get((name, i), {})) for i, r in enumerate(want["rows"])]
    assert expected == [_row(e, x) for e, x in zip(got.rows, expected)]
    assert len(got.rows) == len(expected)
    unnamed = {key.split(" ")[0] for key in want["unnamed"]}
    invalidated = {f"{db}.{table}" for db, table, reason in got.tables
                   if reason == "no_column_names"}
    assert invalidated == unnamed


# -- the text both sides are compared in ----------------------------------------------------

class _Json(str):
    """A JSON column's text, compared as the document it holds."""

    def __eq__(self, other):
        return isinstance(other, str) and _doc(self) == _doc(other)

    __hash__ = str.__hash__


def _doc(text: str):
    try:
        return json.loads(text, parse_float=decimal.Decimal)
    except ValueError:
        return text


def _go_row(r: dict, mysql_text: dict) -> tuple:
    def image(values):
        if values is None:
            return None
        return {c: mysql_text[c] if c in mysql_text else _go_text(v)
                for c, v in zip(r["columns"], values)
                if not (isinstance(v, dict) and v.get("absent"))}
    return (r["db"], r["table"], r["op"], image(r.get("before")), image(r.get("after")))


def _go_text(v):
    if isinstance(v, dict) and "hex" in v:
        return _text(bytes.fromhex(v["hex"]))
    if isinstance(v, dict) and "json" in v:
        return _Json(v["json"])
    return v


def _row(e, expected: tuple) -> tuple:
    """The decoded ChangeEvent ``e`` in the form of ``expected`` (go-mysql's row)."""
    def image(values, want):
        if values is None:
            return None
        return {c: want[c] if isinstance((want or {}).get(c), _Json) and want[c] == v
                else _text(v) for c, v in values.items()}
    return (e.db, e.table, e.op, image(e.before, expected[3]), image(e.after, expected[4]))


def _text(v):
    """A decoded value as text: bytes that are UTF-8 as that text, other bytes as hex."""
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode()
        except UnicodeDecodeError:
            return "0x" + bytes(v).hex()
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".")
    if isinstance(v, float):
        return repr(v)
    return str(v)
