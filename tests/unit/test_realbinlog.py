"""Every binlog file real servers wrote, through the tailer's change source, against go-mysql.

Each file of the shared ``realbinlog/`` folder (sources in its SOURCES.md: rust_mysql_common,
mysql-binlog-connector-java and Canal test data, MySQL 5.1 to 9.6 and MariaDB 10.5) is
streamed byte for byte by a replay primary to ``binlog_source.open_stream`` and
``BinlogSource`` (tests/support/realbinlog.py), with both readers: the fast reader and
python-mysql-replication (``tailer.reader: library``); ``make test-python-path`` runs it
again with ``CACHESYNC_NO_SPEEDUPS=1`` (no compiled path).

The independent decoder is go-mysql's parser (``replication.NewBinlogParser``): its reading
is made at test time (tests/support/gomysql.py: built with Go from the module proxy, cached
under build/; the ``gomysql_reading`` fixture). Rules:

* where a table map carries column names, every row's values match go-mysql's, compared as
  text (``_text``: what ``CAST(col AS CHAR)`` shows, bytes where the column holds bytes;
  a JSON column as the document MySQL prints, ``_mysql_json``);
* where it does not, each such table is invalidated as a whole (``no_column_names``) and no
  row of it is published;
* a file may end in a named cachesync error only where ``NAMED_ERRORS`` says so and why;
  nothing else is raised.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from tests.support import realbinlog as rb

# file -> (error class, text in its message): what the tailer stops with, and why that is right
# (none today: MySQL 5.1.34sp1's version text, which the library cannot parse, is read as
# MySQL reads it, producer_outbox/binlog/serverversion.py)
NAMED_ERRORS: dict[str, tuple[str, str]] = {}
READERS = ("fast", "library")


@pytest.fixture(scope="module")
def outcomes(gomysql_reading):
    cache: dict = {}

    def get(name: str, reader: str) -> rb.Outcome:
        if (name, reader) not in cache:
            named = rb.named_tables(gomysql_reading[name])
            cache[(name, reader)] = rb.read_file(name, reader, named)
        return cache[(name, reader)]
    return get


def test_go_mysql_read_every_shared_file(gomysql_reading):
    assert sorted(gomysql_reading) == rb.names()
    assert {name: f["error"] for name, f in gomysql_reading.items() if f.get("error")} == {}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", rb.names())
def test_a_real_binlog_file_decodes_as_go_mysql_reads_it(outcomes, gomysql_reading, name,
                                                         reader):
    got, want = outcomes(name, reader), gomysql_reading[name]
    if name in NAMED_ERRORS:
        kind, text = NAMED_ERRORS[name]
        assert type(got.error).__name__ == kind and text in str(got.error), got.error
        return
    assert got.error is None, f"{type(got.error).__name__}: {got.error}"
    expected = [_go_row(r) for r in want["rows"]]
    assert expected == [_row(e, x) for e, x in zip(got.rows, expected)]
    assert len(got.rows) == len(expected)
    unnamed = {key.split(" ")[0] for key in want["unnamed"]}
    invalidated = {f"{db}.{table}" for db, table, reason in got.tables
                   if reason == "no_column_names"}
    assert invalidated == unnamed


@pytest.mark.parametrize("field_type, go_value, mysql_value", [
    (FIELD_TYPE.VARCHAR, "xy", "base64:type15:eHk="),
    (FIELD_TYPE.BLOB, "\x01\x02", "base64:type252:AQI="),
    (FIELD_TYPE.DATE, "2024-02-29 00:00:00.000000", "2024-02-29"),
    (FIELD_TYPE.DATETIME, "2024-02-29 00:00:00.000000", "2024-02-29 00:00:00.000000"),
    (FIELD_TYPE.TIME, "-838:59:59.000000", "-838:59:59.000000"),
    (FIELD_TYPE.NEWDECIMAL, "-0.50", decimal.Decimal("-0.50")),
])
def test_an_opaque_json_value_in_mysql_text(field_type, go_value, mysql_value):
    """The rule ``_mysql_json`` applies to go-mysql's reading, on values made up here."""
    doc = json.dumps({"k": [1, go_value]})
    opaque = [{"path": ["k", 1], "type": field_type}]
    assert _mysql_json(doc, opaque) == {"k": [1, mysql_value]}
    assert _mysql_json(json.dumps(go_value), [{"path": [], "type": field_type}]) == mysql_value


# -- the text both sides are compared in ----------------------------------------------------

class _Json:
    """A JSON column's document: equal to a decoded column's text that holds it."""

    def __init__(self, doc):
        self.doc = doc

    def __eq__(self, other):
        if isinstance(other, _Json):
            return self.doc == other.doc
        return isinstance(other, str) and _doc(other) == self.doc

    __hash__ = None

    def __repr__(self):
        return f"_Json({self.doc!r})"


def _doc(text: str):
    try:
        return json.loads(text, parse_float=decimal.Decimal)
    except ValueError:
        return text


def _mysql_json(text: str, opaque: list[dict]):
    """The document MySQL prints (``Json_wrapper::to_string``) for go-mysql's text of it and
    the opaque values the reader found in its binary form (path, MySQL field type)."""
    doc = _doc(text)
    for value in opaque:
        path = value["path"]
        if not path:                    # the document is the opaque value
            doc = _mysql_opaque(value["type"], doc)
            continue
        holder = doc
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = _mysql_opaque(value["type"], holder[path[-1]])
    return doc


def _mysql_opaque(field_type: int, go_value: str):
    """MySQL's text of an opaque JSON value from go-mysql's (its decodeOpaque: a DECIMAL's
    digits as a string, a DATE as a DATETIME, a TIME or DATETIME as MySQL prints them, any
    other type's bytes as a string): a DECIMAL is a number, a DATE has no time, other types
    are ``base64:type<N>:<bytes>``."""
    if field_type == FIELD_TYPE.NEWDECIMAL:
        return decimal.Decimal(go_value)
    if field_type == FIELD_TYPE.DATE:
        return go_value[:len("YYYY-MM-DD")]
    if field_type in (FIELD_TYPE.TIME, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP):
        return go_value
    return f"base64:type{field_type}:{base64.b64encode(go_value.encode()).decode()}"


def _go_row(r: dict) -> tuple:
    def image(values):
        if values is None:
            return None
        return {c: _go_text(v) for c, v in zip(r["columns"], values)
                if not (isinstance(v, dict) and v.get("absent"))}
    return (r["db"], r["table"], r["op"], image(r.get("before")), image(r.get("after")))


def _go_text(v):
    if isinstance(v, dict) and "hex" in v:
        return _text(bytes.fromhex(v["hex"]))
    if isinstance(v, dict) and "json" in v:
        return _Json(_mysql_json(v["json"], v.get("opaque", [])))
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
