"""The canonical key text of every type: python-mysql-replication's decoded value, corrected
by its column spec (``key_values``), renders the server's text (``canonical_text``).

Expected texts are what MariaDB 10.11 returns for ``CAST(col AS CHAR)`` (the documented
forms for binary strings, BIT and GEOMETRY); tests/integration/test_key_text.py checks the
same on the real server.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cachesync.consumer.core.writes import render_value, version_text
from cachesync.schema import keytext
from cachesync.schema.keytext import ColumnSpec, key_values
from cachesync.schema.mapping import parse_mappings
from cachesync.schema.values import canonical_text, from_json, to_json

T = dt.datetime(2020, 1, 1, 10, 0)
SET_ZXY = ColumnSpec("c", keytext.SET, members=("z", "x", "y"))

CASES = [
    # (type, column spec or None = not converted, decoded value, none source, server text)
    ("TINYINT", None, -128, None, "-128"),
    ("BIGINT UNSIGNED", None, 18446744073709551615, None, "18446744073709551615"),
    ("DECIMAL(20,10) zero", None, Decimal("0E-10"), None, "0.0000000000"),
    ("DECIMAL(20,10) small", None, Decimal("-1.0E-9"), None, "-0.0000000010"),
    ("DECIMAL(5,2)", None, Decimal("1.50"), None, "1.50"),
    ("DECIMAL(65,0)", None, Decimal("9" * 65), None, "9" * 65),
    ("FLOAT 1.1", ColumnSpec("c", keytext.FLOAT), 1.100000023841858, None, "1.1"),
    ("FLOAT 123456789", ColumnSpec("c", keytext.FLOAT), 123456792.0, None, "123457000"),
    ("FLOAT max", ColumnSpec("c", keytext.FLOAT), 3.4028234663852886e38, None, "3.40282e38"),
    ("FLOAT 1e-10", ColumnSpec("c", keytext.FLOAT), 1.000000013351432e-10, None, "0.0000000001"),
    ("DOUBLE 1e20", None, 1e20, None, "1e20"),
    ("DOUBLE 1e15", None, 1e15, None, "1e15"),
    ("DOUBLE 987654321000000", None, 987654321000000.0, None, "987654321000000"),
    ("DOUBLE 1.5e-7", None, 1.5e-7, None, "0.00000015"),
    ("DOUBLE 9e-16", None, 9e-16, None, "9e-16"),
    ("DOUBLE 17 digits", None, 1234567890123456.8, None, "1234567890123456.8"),
    ("DOUBLE 16 digits", None, 9442823545383632.0, None, "9.442823545383632e15"),
    ("DOUBLE -2.5", None, -2.5, None, "-2.5"),
    ("DOUBLE 1.0", None, 1.0, None, "1"),
    ("DATE", None, dt.date(2024, 2, 29), None, "2024-02-29"),
    ("DATE zero", None, "0000-00-00", None, "0000-00-00"),
    ("DATETIME", ColumnSpec("c", keytext.DATETIME), T, None, "2020-01-01 10:00:00"),
    ("DATETIME zero", ColumnSpec("c", keytext.DATETIME), "0000-00-00 00:00:00", None,
     "0000-00-00 00:00:00"),
    ("DATETIME(6) whole second", ColumnSpec("c", keytext.DATETIME, fsp=6), T, None,
     "2020-01-01 10:00:00.000000"),
    ("DATETIME(3)", ColumnSpec("c", keytext.DATETIME, fsp=3), T.replace(microsecond=500000), None,
     "2020-01-01 10:00:00.500"),
    ("TIMESTAMP", ColumnSpec("c", keytext.TIMESTAMP), T, None, "2020-01-01 10:00:00"),
    ("TIMESTAMP zero", ColumnSpec("c", keytext.TIMESTAMP), dt.datetime(1970, 1, 1), None,
     "0000-00-00 00:00:00"),
    ("TIMESTAMP(6) zero", ColumnSpec("c", keytext.TIMESTAMP, fsp=6), dt.datetime(1970, 1, 1),
     None, "0000-00-00 00:00:00.000000"),
    ("TIME negative", ColumnSpec("c", keytext.TIME), -dt.timedelta(hours=838, minutes=59,
                                                                    seconds=59), None,
     "-838:59:59"),
    ("TIME over a day", ColumnSpec("c", keytext.TIME), dt.timedelta(hours=25), None, "25:00:00"),
    ("TIME(3)", ColumnSpec("c", keytext.TIME, fsp=3), -dt.timedelta(seconds=1.5), None,
     "-00:00:01.500"),
    ("YEAR", ColumnSpec("c", keytext.YEAR), 2155, None, "2155"),
    ("YEAR 0", ColumnSpec("c", keytext.YEAR), 1900, None, "0000"),
    ("CHAR", None, "ab", None, "ab"),
    ("VARCHAR utf8mb4", None, "😀 x", None, "😀 x"),
    ("BINARY(4) padded", ColumnSpec("c", keytext.BINARY, length=4), b"\xd0\x29", None,
     "0xd0290000"),
    ("BINARY(4) empty", ColumnSpec("c", keytext.BINARY, length=4), "", None, "0x00000000"),
    ("VARBINARY", ColumnSpec("c", keytext.VARBINARY), b"\xff\x00", None, "0xff00"),
    ("VARBINARY empty", ColumnSpec("c", keytext.VARBINARY), "", None, "0x"),
    ("GEOMETRY", ColumnSpec("c", keytext.VARBINARY), b"\0\0\0\0\x01", None, "0x0000000001"),
    ("ENUM", None, "a", None, "a"),
    ("SET", SET_ZXY, {"x", "z"}, None, "z,x"),
    ("SET empty", SET_ZXY, None, "empty set", ""),
    ("BIT(10)", ColumnSpec("c", keytext.BIT), "0000000101", None, "5"),
    ("JSON MariaDB", None, '{"a":  1}', None, '{"a":  1}'),
    ("JSON MySQL", None, {"a": 1, "b": [1, "x"]}, None, '{"a": 1, "b": [1, "x"]}'),
]


@pytest.mark.parametrize("type_, spec, decoded, none_source, text", CASES,
                         ids=[c[0] for c in CASES])
def test_each_type_renders_the_servers_text(type_, spec, decoded, none_source, text):
    row = key_values({"c": decoded}, {"c": none_source} if none_source else {},
                     (spec,) if spec else ())
    assert canonical_text(row["c"]) == text
    # the text survives the envelope: the consumer renders what the tailer rendered
    assert canonical_text(from_json(to_json(row["c"]))) == text


def test_set_text_does_not_depend_on_the_set_order():
    texts = {canonical_text(key_values({"c": set(order)}, {}, (SET_ZXY,))["c"])
             for order in (["x", "z"], ["z", "x"])}
    assert texts == {"z,x"}


def test_null_stays_null_and_other_columns_are_untouched():
    row = {"c": None, "d": 1.100000023841858}
    assert key_values(row, {"c": "null"}, (SET_ZXY,)) == row


def test_a_binary_value_decoded_as_text_is_an_error():
    with pytest.raises(ValueError, match="binary value decoded as text"):
        key_values({"c": "x"}, {}, (ColumnSpec("c", keytext.VARBINARY),))


def test_update_mode_value_and_version_use_the_text():
    m = parse_mappings({"d.t": {"keys": ["t:{id}"], "mode": "update",
                                "version_column": "at"}}).get("d", "t")
    row = key_values({"id": 1, "at": T, "d": "0000-00-00", "s": {"x"}},
                     {}, (ColumnSpec("at", keytext.DATETIME, fsp=6),
                          ColumnSpec("s", keytext.SET, members=("x",))))
    assert render_value(row, m) == (
        "json", '{"id":1,"at":"2020-01-01 10:00:00.000000","d":"0000-00-00","s":"x"}')

    class Event:
        version, after, before = 7, row, None
    assert version_text(Event, m) == "2020-01-01T10:00:00.000000/" + "0" * 23 + "7"


@pytest.mark.parametrize("data_type, expr", [
    ("int", "CAST(`c` AS CHAR) AS `c`"),
    ("datetime", "CAST(`c` AS CHAR) AS `c`"),
    ("binary", "CONCAT('0x', LOWER(HEX(`c`))) AS `c`"),
    ("geometry", "CONCAT('0x', LOWER(HEX(`c`))) AS `c`"),
    ("bit", "CAST(`c` + 0 AS CHAR) AS `c`"),
])
def test_the_audit_reads_each_type_as_its_key_text(data_type, expr):
    assert keytext.server_text_sql("c", data_type) == expr


@pytest.mark.parametrize("text, data_type, value", [
    ("-5", "bigint", -5), ("1e20", "double", 1e20), ("1.1", "float", 1.1), ("5", "bit", 5),
    ("2155", "year", 2155), ("0000", "year", "0000"), ("1.50", "decimal", "1.50"),
    ("2020-01-01 10:00:00.000000", "datetime", "2020-01-01 10:00:00.000000"), (None, "int", None),
])
def test_audit_values_are_the_tailers(text, data_type, value):
    got = keytext.value_from_text(text, data_type)
    assert got == value and type(got) is type(value)
