"""Key text on real MariaDB: for every column type, the key cachesync renders from the binlog
(and the value update mode writes) is the server's own text of the column.

Each type is written on the real server (rows of edge values: minimum, maximum, negative
zero, fractions, padding, charsets, zero dates),
the server's text is read back with ``CAST(col AS CHAR)`` (the documented forms where
the server has none: ``0x``-hex for binary strings and GEOMETRY, ``col + 0`` for BIT),
and compared with the keys and values the tailer + consumer produced. The table with a
JSON and a GEOMETRY column decodes through python-mysql-replication's ``event.rows``
(fastrows does not cover them); the other through fastrows: both paths are compared.
"""

from __future__ import annotations

import json

import pytest

from cachesync.schema.values import canonical_text
from tests.support import wait_for

pytestmark = pytest.mark.integration

# (column, type, two SQL literals) -- sql_mode '' so zero and zero-part dates are allowed
TYPES = [
    ("ti", "TINYINT", ["-128", "127", "0"]), ("tiu", "TINYINT UNSIGNED", ["255", "0"]),
    ("si", "SMALLINT", ["-32768", "32767"]), ("siu", "SMALLINT UNSIGNED", ["65535", "1"]),
    ("mi", "MEDIUMINT", ["-8388608", "8388607"]), ("miu", "MEDIUMINT UNSIGNED", ["16777215", "2"]),
    ("i", "INT", ["-2147483648", "2147483647", "-1"]), ("iu", "INT UNSIGNED", ["4294967295", "3"]),
    ("bi", "BIGINT", ["-9223372036854775808", "9223372036854775807"]),
    ("biu", "BIGINT UNSIGNED", ["18446744073709551615", "0"]),
    ("de", "DECIMAL(20,10)", ["-0.0000000000", "-0.000000001", "9999999999.9999999999"]),
    ("de2", "DECIMAL(5,2)", ["1.5", "-999.99", "-0.00", "0.01"]),
    ("de0", "DECIMAL(65,0)", ["9" * 65, "-1", "-" + "9" * 65]),
    ("deu", "DECIMAL(4,4) UNSIGNED", ["0.9999", "0"]),
    ("fl", "FLOAT", ["1.1", "123456789", "-0", "-3.4028235e38"]),
    ("fl2", "FLOAT", ["3.4028235e38", "1e-10", "1.17549435e-38"]),
    ("db", "DOUBLE", ["1e20", "1.5e-7", "-0", "1.7976931348623157e308"]),
    ("db2", "DOUBLE", ["1234567890123456.8", "0.1", "2.2250738585072014e-308", "-1e-5"]),
    ("da", "DATE", ["'0000-00-00'", "'2020-00-15'", "'9999-12-31'"]),
    ("da2", "DATE", ["'2024-02-29'", "'0001-01-01'", "'1000-01-01'"]),
    ("dt", "DATETIME", ["'0000-00-00 00:00:00'", "'2020-01-01 10:00:00'",
                        "'9999-12-31 23:59:59'"]),
    ("dt6", "DATETIME(6)", ["'2020-01-01 10:00:00'", "'2020-01-01 10:00:00.000001'",
                            "'9999-12-31 23:59:59.999999'", "'1000-01-01 00:00:00.000000'"]),
    ("dt3", "DATETIME(3)", ["'2020-01-00 10:00:00.5'", "'1999-12-31 23:59:59.999'"]),
    ("dt1", "DATETIME(1)", ["'2020-01-01 00:00:00.9'", "'2020-01-01 00:00:00'"]),
    ("ts", "TIMESTAMP NULL", ["'2020-01-01 10:00:00'", "'0000-00-00 00:00:00'",
                              "'1970-01-01 00:00:01'"]),
    ("ts6", "TIMESTAMP(6) NULL", ["'2020-01-01 10:00:00'", "'2038-01-19 03:14:07.999999'",
                                  "'1970-01-01 00:00:01.000001'"]),
    ("tm", "TIME", ["'-838:59:59'", "'25:00:00'", "'838:59:59'", "'-00:00:01'", "'00:00:00'"]),
    ("tm1", "TIME(1)", ["'-00:00:00.1'", "'-12:00:00.9'", "'00:00:00.5'"]),
    ("tm2", "TIME(2)", ["'-00:00:00.01'", "'-838:59:58.99'", "'10:00:00.10'"]),
    ("tm3", "TIME(3)", ["'-00:00:01.5'", "'10:00:00.25'", "'-00:00:00.001'"]),
    ("tm4", "TIME(4)", ["'-00:00:00.0001'", "'-01:02:03.9999'"]),
    ("tm5", "TIME(5)", ["'-00:00:00.00001'", "'-00:59:59.99999'"]),
    ("tm6", "TIME(6)", ["'-00:00:00.000001'", "'-838:59:58.999999'", "'-00:00:01.000001'",
                        "'00:00:00.999999'", "'-00:00:00.5'"]),
    ("yr", "YEAR", ["0", "2155", "1901"]),
    ("ch", "CHAR(5)", ["'ab  '", "''", "' a'"]),
    ("cl", "CHAR(5) CHARACTER SET latin1", ["'é€'", "'x'"]),
    ("vu", "VARCHAR(10) CHARACTER SET utf16", ["'héllo'", "'😀'"]),
    ("vc", "VARCHAR(10) CHARACTER SET ucs2", ["'héllo'", "'x'"]),
    ("v32", "VARCHAR(10) CHARACTER SET utf32", ["'é'", "'a'"]),
    ("vs", "VARCHAR(10) CHARACTER SET sjis", ["'日本'", "'a'"]),
    ("vg", "VARCHAR(10) CHARACTER SET gbk", ["'中文'", "'b'"]),
    ("v3", "VARCHAR(10) CHARACTER SET utf8mb3", ["'ü '", "'c'"]),
    ("tx", "TEXT", ["'😀 x'", "''", "'trailing  '"]),
    ("b4", "BINARY(4)", ["0xd0290000", "0x00", "0x61"]),
    ("vb", "VARBINARY(10)", ["0xff00", "''", "0x6100"]),
    ("bl", "BLOB", ["0x00ff", "''"]),
    ("en", "ENUM('b','a')", ["'a'", "'b'"]), ("en0", "ENUM('b','a')", ["''", "'a'"]),  # '': invalid
    ("st", "SET('z','x','y')", ["'x,z'", "''", "'y,x,z'"]),
    ("bt", "BIT(10)", ["b'101'", "b'1111111111'", "b'0'"]),
    ("bt1", "BIT(1)", ["b'1'", "b'0'"]), ("bt64", "BIT(64)", ["0xffffffffffffffff", "0x01"]),
    # MariaDB: BINARY(16)/(4) in the binlog; the server's text from the table's definition
    ("ip6", "INET6", ["'::1'", "'2001:db8::ff00:42:8329'", "'::ffff:1.2.3.4'", "'::1.2.3.4'",
                      "'1:0:2:3:4:5:6:7'", "'::'", "'fe80::'",
                      "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'"]),
    ("uu", "UUID", ["'123e4567-e89b-12d3-a456-426655440000'",
                    "'00000000-0000-0000-0000-000000000000'",
                    "'6ccd780c-baba-1026-9564-5b8c656024db'",      # version 1: stored swapped
                    "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'0192a8b7-7c4d-7e3f-8a9b-000000000000'"]),
    ("ip4", "INET4", ["'10.0.0.1'", "'0.0.0.0'", "'255.255.255.255'", "'1.2.3.0'"]),
]
LIBRARY_ONLY = [("js", "JSON", ["'{\"a\":  1}'", "'[1, 2.50]'"]),
                ("ge", "GEOMETRY", ["ST_GeomFromText('POINT(1 2)')",
                                    "ST_GeomFromText('LINESTRING(0 0,1 1)')"])]
HEX = {"BINARY(4)", "VARBINARY(10)", "BLOB", "GEOMETRY"}
ROWS = max(len(values) for _, _, values in TYPES)    # NULL where a column's list is shorter


def server_text(column: str, type_: str) -> str:
    """The server's text of a column; the documented forms where it has none."""
    if type_ in HEX:
        return f"CONCAT('0x', LOWER(HEX({column})))"
    if type_.startswith("BIT"):
        return f"CAST({column} + 0 AS CHAR)"
    return f"CAST({column} AS CHAR)"


def create_and_fill(lab, table: str, types) -> dict[int, dict[str, str]]:
    """Create ``table``, insert the rows, return {id: {column: server text}}."""
    ddl = ", ".join(f"{c} {t}" for c, t, _ in types)
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = '', time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, {ddl})")
        for row in range(ROWS):
            values = ", ".join(v[row] if row < len(v) else "NULL" for _, _, v in types)
            cur.execute(f"INSERT INTO {table} VALUES ({row}, {values})")
        cur.execute(f"SELECT id, {', '.join(server_text(c, t) for c, t, _ in types)} "
                    f"FROM {table} ORDER BY id")
        return {r[0]: dict(zip([c for c, _, _ in types], r[1:])) for r in cur.fetchall()}


def mapping(types) -> dict:
    return {"keys": ["row:{id}", *[f"{c}={{{c}}}" for c, _, _ in types]], "mode": "update"}


@pytest.fixture
def typed(lab):
    """Both tables written, tailed and applied; yields {table: (types, server texts)}."""
    tables = {"fast": TYPES, "library": TYPES + LIBRARY_ONLY}
    cfg = lab.write_config({name: mapping(types) for name, types in tables.items()})
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE placeholder (id INT PRIMARY KEY)")   # the tailer needs a db
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    texts = {name: (types, create_and_fill(lab, name, types)) for name, types in tables.items()}
    rows = sum(len(r) for _, r in texts.values())
    wait_for(lambda: engine.stats.applied + engine.stats.dead_lettered >= rows, 90,
             what=f"the consumer to apply {rows} rows; tailer log:\n{lab.log(tailer)}")
    assert engine.stats.dead_lettered == 0
    return texts


def cached_keys(lab) -> set[str]:
    return {k.decode() for k in lab.redis.scan_iter(match=f"{lab.prefix}*", count=1000)}


@pytest.mark.parametrize("table", ["fast", "library"])
def test_every_type_renders_the_servers_text_as_a_key(lab, typed, table):
    types, rows = typed[table]
    keys = cached_keys(lab)
    for id_, texts in rows.items():
        for column, type_, _ in types:
            if texts[column] is None:       # NULL: no key
                continue
            key = f"{lab.prefix}{column}={texts[column]}"
            mine = sorted(k for k in keys if k.startswith(f"{lab.prefix}{column}="))
            assert key in keys, (f"{type_} {column!r} row {id_}: the server's text is "
                                 f"{texts[column]!r}; cached keys for it: {mine}")


@pytest.mark.parametrize("table", ["fast", "library"])
def test_every_type_is_written_as_the_servers_text_in_update_mode(lab, typed, table):
    types, rows = typed[table]
    for id_, texts in rows.items():
        value = json.loads(lab.redis.get(f"{lab.prefix}row:{id_}"))
        for column, type_, _ in types:
            if texts[column] is None:
                assert value[column] is None, (type_, id_, value[column])
                continue
            assert canonical_text(value[column]) == texts[column], (type_, id_, value[column])


def test_audit_reads_the_same_key_text_and_values(lab, typed):
    """The Spark audit (JDBC) renders every type's key and value as the consumer wrote them:
    all consistent, nothing stale, missing or extra."""
    from click.testing import CliRunner

    from cachesync.cli import cli
    from cachesync.consumer.spark.session import spark_session
    types, rows = typed["library"]
    cfg = str(lab.tmp / "cachesync.yaml")
    with spark_session("cachesync-key-text", "local[2]"):
        result = CliRunner().invoke(cli, ["audit", "--config", cfg, "--table",
                                          f"{lab.db}.library", "--partitions", "2"],
                                    env=lab.stack.env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    keys = sum(1 + sum(text is not None for text in texts.values()) for texts in rows.values())
    assert (report["consistent"], report["stale"], report["missing"], report["extra"]) == (
        keys, 0, 0, 0), report
