"""fastrows.decode_rows on real MariaDB row events, against the library's ``event.rows``.

Each test writes to its own database, then reads that binlog range with a
BinLogStreamReader as the tailer's MySQL user and, for every row event, runs
``decode_rows`` first (it consumes nothing) and ``event.rows`` second, on the same
bytes.
"""

from __future__ import annotations

import datetime
import json
import random
import time
import uuid

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cachesync.producer_outbox import fastrows
from tests.support.compare import difference

ROW_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]


@pytest.fixture
def db(stack):
    name = f"fastrows_test_{uuid.uuid4().hex[:8]}"
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")


def write(stack, db, statements) -> tuple[str, int]:
    """Run ``statements`` (SQL text, or (SQL, rows) for executemany) in one session.

    Returns the binlog position before them.
    """
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = cur.fetchone()[:2]
        for statement in statements:
            if isinstance(statement, tuple):
                cur.executemany(*statement)
            else:
                cur.execute(statement)
    return start


def row_events(stack, db, start):
    """The row events of ``db`` from ``start`` to the binlog's end, as the tailer reads them."""
    env = stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"], encoding="utf-8") as f:
        password = f.read().strip()
    stream = BinLogStreamReader(
        connection_settings={"host": env["CACHESYNC_MYSQL_HOST"],
                             "port": int(env["CACHESYNC_MYSQL_PORT"]),
                             "user": env["CACHESYNC_MYSQL_USER"], "password": password},
        server_id=random.randint(10 ** 6, 2 ** 31 - 1), log_file=start[0], log_pos=start[1],
        resume_stream=True, blocking=False, only_schemas=[db], only_events=ROW_EVENTS)
    try:
        yield from stream
    finally:
        stream.close()


def decode_both(event):
    """(decode_rows(event), event.rows), in that order, asserting they are identical."""
    fast = fastrows.decode_rows(event)
    rows = event.rows
    assert fast is not None, f"fast path gave up on {event.table}: {rows!r}"
    assert difference(fast, rows) is None, difference(fast, rows)
    return fast, rows


# -- a table with every supported column type ---------------------------------------------

def _int(bits, unsigned=False):
    low, high = (0, 2 ** bits - 1) if unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return lambda r: r.choice([low, high, 0, r.randint(low, high)])


def _decimal(precision, scale):
    def value(r):
        digits = "".join(r.choice("0123456789") for _ in range(precision))
        text = f"{digits[:precision - scale]}.{digits[precision - scale:]}".strip(".") or "0"
        return ("-" if r.random() < 0.5 else "") + text
    return value


def _text(alphabet, longest):
    def value(r):
        return "".join(r.choice(alphabet) for _ in range(r.choice([0, 1, r.randint(0, longest)])))
    return value


def _datetime(fsp):
    def value(r):
        t = datetime.datetime(r.randint(1000, 9999), r.randint(1, 12), r.randint(1, 28),
                              r.randint(0, 23), r.randint(0, 59), r.randint(0, 59),
                              r.randint(0, 999999))
        return t.isoformat(" ", "microseconds")
    return value


def _timestamp(r):
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(
        seconds=r.randint(1, 2 ** 31 - 1), microseconds=r.randint(0, 999999))
    return t.isoformat(" ", "microseconds")


def _time(r):
    seconds, micro = r.randint(0, 838 * 3600 + 59 * 60 + 58), r.randint(0, 999999)
    sign = r.choice(["", "-"])
    return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02}:{seconds % 60:02}.{micro:06}"


UNICODE = "aZ é€中😀'\"\\\0"
# (name, SQL type, random value); every column but id is nullable
COLUMNS = [
    ("ti", "TINYINT", _int(8)), ("uti", "TINYINT UNSIGNED", _int(8, True)),
    ("si", "SMALLINT", _int(16)), ("usi", "SMALLINT UNSIGNED", _int(16, True)),
    ("mi", "MEDIUMINT", _int(24)), ("umi", "MEDIUMINT UNSIGNED", _int(24, True)),
    ("i", "INT", _int(32)), ("ui", "INT UNSIGNED", _int(32, True)),
    ("bi", "BIGINT", _int(64)), ("ubi", "BIGINT UNSIGNED", _int(64, True)),
    ("f", "FLOAT", lambda r: r.choice([0.0, -1.5, 3.4e38, r.uniform(-1e30, 1e30)])),
    ("d", "DOUBLE", lambda r: r.choice([-0.0, 1.7976931348623157e308, r.uniform(-1e300, 1e300)])),
    ("dec65", "DECIMAL(65,30)", _decimal(65, 30)), ("dec65i", "DECIMAL(65,0)", _decimal(65, 0)),
    ("dec10", "DECIMAL(10,0)", _decimal(10, 0)), ("dec5", "DECIMAL(5,5)", _decimal(5, 5)),
    ("dec18", "DECIMAL(18,9)", _decimal(18, 9)), ("dec7", "DECIMAL(7,3)", _decimal(7, 3)),
    ("vc", "VARCHAR(20)", _text(UNICODE, 20)), ("vcl", "VARCHAR(300)", _text(UNICODE, 300)),
    ("c", "CHAR(10)", _text(UNICODE, 10)),
    ("cl", "CHAR(5) CHARACTER SET latin1", _text("aé€ ", 5)),
    ("ca", "VARCHAR(10) CHARACTER SET ascii", _text("az09 ", 10)),
    ("u16", "VARCHAR(10) CHARACTER SET utf16", _text(UNICODE, 10)),
    ("uc2", "CHAR(4) CHARACTER SET ucs2", _text("aé€中", 4)),
    ("vb", "VARBINARY(20)", lambda r: r.randbytes(r.randint(0, 20))),
    ("bn", "BINARY(4)", lambda r: r.randbytes(r.randint(0, 4))),
    ("tt", "TINYTEXT", _text(UNICODE, 60)), ("tx", "TEXT", _text(UNICODE, 500)),
    ("mt", "MEDIUMTEXT", _text(UNICODE, 500)), ("lt", "LONGTEXT", _text(UNICODE, 500)),
    ("tb", "TINYBLOB", lambda r: r.randbytes(r.randint(0, 255))),
    ("bl", "BLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("mb", "MEDIUMBLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("lb", "LONGBLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("js", "JSON", lambda r: json.dumps({"k": r.random(), "s": _text(UNICODE, 5)(r)})),
    *[(f"dt{n}", f"DATETIME({n})", _datetime(n)) for n in range(7)],
    *[(f"ts{n}", f"TIMESTAMP({n}) NULL", _timestamp) for n in range(7)],
    *[(f"tm{n}", f"TIME({n})", _time) for n in range(7)],
    ("dte", "DATE", lambda r: f"{r.randint(1000, 9999)}-{r.randint(1, 12)}-{r.randint(1, 28)}"),
    ("yr", "YEAR", lambda r: r.choice([0, 1901, 2155, r.randint(1901, 2155)])),
    ("en", "ENUM('a','b','ç')", lambda r: r.choice("abç")),
    ("st", "SET('x','y','z')", lambda r: ",".join(r.sample("xyz", r.randint(0, 3)))),
    ("b1", "BIT(1)", lambda r: r.randint(0, 1)), ("b10", "BIT(10)", lambda r: r.getrandbits(10)),
    ("b64", "BIT(64)", lambda r: r.getrandbits(64)),
    ("ip", "INET6", lambda r: r.choice(["::", "::1", "2001:db8::ff00:42:8329", "10.1.2.3"])),
    ("uu", "UUID", lambda r: str(uuid.UUID(int=r.getrandbits(128)))),
]
NAMES = [name for name, _, _ in COLUMNS]
INSERT = (f"INSERT INTO every_type (id, {', '.join(NAMES)}) "
          f"VALUES (%s, {', '.join(['%s'] * len(NAMES))})")


def random_rows(ids, seed):
    r = random.Random(seed)
    return [(i, *[None if r.random() < 0.15 else value(r) for _, _, value in COLUMNS]) for i in ids]


def special_rows():
    """NULLs, minimums, maximums and zero or odd dates (under sql_mode='')."""
    minimum = {"ti": -128, "uti": 0, "si": -32768, "usi": 0, "mi": -8388608, "umi": 0,
               "i": -2 ** 31, "ui": 0, "bi": -2 ** 63, "ubi": 0, "f": -3.4e38,
               "d": -1.7976931348623157e308, "dec65": "-" + "9" * 35 + "." + "9" * 30,
               "dec65i": "-" + "9" * 65, "dec10": "-9999999999", "dec5": "-0.99999",
               "dec18": "-0.000000001", "dec7": "0.000", "vc": "", "vcl": "", "c": "",
               "cl": "", "ca": "", "u16": "", "uc2": "", "vb": b"", "bn": b"", "tt": "",
               "tx": "", "mt": "", "lt": "", "tb": b"", "bl": b"", "mb": b"", "lb": b"",
               "js": "[]", **{f"dt{n}": "1000-01-01 00:00:00" for n in range(7)},
               **{f"ts{n}": "1970-01-01 00:00:01" for n in range(7)},
               **{f"tm{n}": "-838:59:59" for n in range(7)},
               "dte": "1000-01-01", "yr": 1901, "en": "a", "st": "", "b1": 0, "b10": 0,
               "b64": 0, "ip": "::", "uu": "00000000-0000-0000-0000-000000000000"}
    maximum = {"ti": 127, "uti": 255, "si": 32767, "usi": 65535, "mi": 8388607, "umi": 16777215,
               "i": 2 ** 31 - 1, "ui": 2 ** 32 - 1, "bi": 2 ** 63 - 1, "ubi": 2 ** 64 - 1,
               "f": 3.4e38, "d": 1.7976931348623157e308, "dec65": "9" * 35 + "." + "9" * 30,
               "dec65i": "9" * 65, "dec10": "9999999999", "dec5": "0.99999",
               "dec18": "999999999.999999999", "dec7": "-9999.999", "vc": "😀" * 20,
               "vcl": "é" * 300, "c": "中" * 10, "cl": "€é", "ca": "z" * 10, "u16": "😀" * 5,
               "uc2": "中中中中", "vb": b"\0\xff" * 10, "bn": b"\xff\0\xff\0", "tt": "x" * 255,
               "tx": "€" * 21000, "mt": "m" * 70000, "lt": "l" * 70000, "tb": b"\xff" * 255,
               "bl": b"\0" * 65535, "mb": b"\x01" * 70000, "lb": b"\x02" * 70000,
               "js": json.dumps({"deep": [[[1.5]]], "text": "😀"}),
               **{f"dt{n}": "9999-12-31 23:59:59.999999" for n in range(7)},
               **{f"ts{n}": "2038-01-19 03:14:07.999999" for n in range(7)},
               **{f"tm{n}": "838:59:58.999999" for n in range(7)},
               "dte": "9999-12-31", "yr": 2155, "en": "ç", "st": "x,y,z", "b1": 1,
               "b10": 1023, "b64": 2 ** 64 - 1, "ip": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
               "uu": "ffffffff-ffff-ffff-ffff-ffffffffffff"}
    odd = {**{f"dt{n}": "0000-00-00 00:00:00" for n in range(4)},
           "dt4": "2020-00-00 10:00:00", "dt5": "2020-02-00 00:00:00.5",
           "dt6": "0000-01-01 00:00:00",
           **{f"ts{n}": "0000-00-00 00:00:00" for n in range(7)},
           **{f"tm{n}": f"-00:00:01.{'123456'[:n]}" for n in range(7)},
           "dte": "0000-00-00", "yr": 0, "en": "", "st": "", "dec5": "0.00000",
           "dec65": "-0.000000000000000000000000000001", "d": -0.0}
    fractions = {**{f"dt{n}": "2024-02-29 12:34:56.123456" for n in range(7)},
                 **{f"ts{n}": "2024-02-29 12:34:56.654321" for n in range(7)},
                 **{f"tm{n}": "-12:34:56.000001" for n in range(7)}, "dte": "2020-00-15"}
    return [(i, *[values.get(name) for name in NAMES])
            for i, values in enumerate([{}, minimum, maximum, odd, fractions], start=1)]


def test_every_supported_type_decodes_like_the_library(stack, db):
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type, _ in COLUMNS)
    start = write(stack, db, [
        "SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
        f"CREATE TABLE every_type (id INT PRIMARY KEY, {columns})",
        (INSERT, special_rows()),
        (INSERT, random_rows(range(10, 310), seed=1)),           # multi-row events
        "INSERT INTO every_type (id, i) VALUES (400, 1)",
        "UPDATE every_type SET id = id + 1000 WHERE id % 3 = 0",  # key changes
        "UPDATE every_type SET vc = NULL, d = -d, dt6 = '2001-01-01 00:00:00.5', "
        "st = 'y', dec65 = -dec65 WHERE id % 3 = 1",
        "UPDATE every_type SET id = 9999 WHERE id = 400",
        "SET SESSION binlog_row_image = 'MINIMAL'",               # partial row images
        "UPDATE every_type SET i = 7, tx = 'minimal' WHERE id % 5 = 0",
        "DELETE FROM every_type WHERE id % 5 = 1",
        "SET SESSION binlog_row_image = 'NOBLOB'",
        "UPDATE every_type SET ui = 7 WHERE id % 7 = 0",
        "DELETE FROM every_type WHERE id % 7 = 1",
        "SET SESSION binlog_row_image = 'FULL'",
        "DELETE FROM every_type",
    ])
    kinds, sources, most_rows = set(), set(), 0
    for event in row_events(stack, db, start):
        _, rows = decode_both(event)
        kinds.add(type(event))
        most_rows = max(most_rows, len(rows))
        sources.update(source for row in rows for key in row if key.endswith("none_sources")
                       for source in row[key].values())
    assert kinds == set(ROW_EVENTS) and most_rows > 5
    assert sources == {"null", "cols bitmap", "out of date range", "out of datetime2 range",
                       "empty set"}


def test_unsupported_type_falls_back_to_the_library(stack, db):
    start = write(stack, db, [
        "CREATE TABLE shapes (id INT PRIMARY KEY, g GEOMETRY NOT NULL)",
        "INSERT INTO shapes VALUES (1, POINT(1, 2)), (2, POINT(3, 4))",
        "UPDATE shapes SET g = POINT(5, 6) WHERE id = 1",
        "DELETE FROM shapes",
    ])
    events = 0
    for event in row_events(stack, db, start):
        assert fastrows.decode_rows(event) is None
        rows = event.rows          # the packet was left untouched
        image = rows[0].get("values") or rows[0]["after_values"]
        assert image["id"] in (1, 2) and isinstance(image["g"], bytes) and len(image["g"]) == 25
        events += 1
    assert events == 3


def test_invalid_date_the_library_rejects_gives_none(stack, db):
    start = write(stack, db, [
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "CREATE TABLE odd_dates (id INT PRIMARY KEY, d DATE)",
        "INSERT INTO odd_dates VALUES (1, '2021-02-31')",
    ])
    [event] = row_events(stack, db, start)
    assert fastrows.decode_rows(event) is None
    with pytest.raises(ValueError):
        event.rows


def test_ddl_mid_stream_rebuilds_the_decoder(stack, db):
    start = write(stack, db, [
        "CREATE TABLE evolving (id INT PRIMARY KEY, a INT NOT NULL)",
        "INSERT INTO evolving VALUES (1, 1), (2, -2)",
        "UPDATE evolving SET a = a + 1",
        "ALTER TABLE evolving ADD COLUMN b VARCHAR(10) NULL",
        "INSERT INTO evolving VALUES (3, 3, 'x')",
        "UPDATE evolving SET b = 'y' WHERE id = 1",
        # same column count and names, a wider type: a stale decoder would misread `a`
        "ALTER TABLE evolving MODIFY a BIGINT NOT NULL",
        f"INSERT INTO evolving VALUES (4, {2 ** 40}, 'z')",
        "DELETE FROM evolving WHERE id = 4",
    ])
    decoders, images = [], []
    for event in row_events(stack, db, start):
        fast, _ = decode_both(event)
        decoders.append(event.table_map[event.table_id]._fastrows)
        images.append(fast[-1].get("values") or fast[-1]["after_values"])
    assert [len(image) for image in images] == [2, 2, 3, 3, 3, 3]
    assert images[4] == {"id": 4, "a": 2 ** 40, "b": "z"}
    # one set of decoders per layout, shared by the transactions of that layout
    assert decoders[0] is decoders[1] and decoders[2] is decoders[3] and decoders[4] is decoders[5]
    assert len({id(d) for d in decoders}) == 3


# -- speed -----------------------------------------------------------------------------------

def _rewound(event, position):
    """Rewind ``event`` to its rows, as if just read: the library's cached rows dropped,
    and its table map new to decode_rows (each decode pays the first-sight lookup)."""
    event.packet.packet._position, event.packet.read_bytes = position
    event._RowsEvent__rows = None
    event.table_map[event.table_id].__dict__.pop("_fastrows", None)


def _best_of(rounds, events, decode) -> float:
    """Best time over ``rounds`` for decoding all ``events``.

    Each event is rewound before and after (no decoded rows stay alive, as in the
    tailer, which drops them once published: a heap full of them would slow the
    garbage collector, hence both sides).
    """
    best = float("inf")
    for _ in range(rounds):
        elapsed = 0.0
        for event, position in events:
            _rewound(event, position)
            started = time.perf_counter()
            decode(event)
            elapsed += time.perf_counter() - started
            _rewound(event, position)
        best = min(best, elapsed)
    return best


def test_speedup_over_the_library(stack, db):
    """Prints the library's and the fast path's µs per row (run with -s to see them)."""
    r = random.Random(5)
    wide = ["id BIGINT PRIMARY KEY"] + [
        f"{kind}{j} {sql_type}" for j in range(5) for kind, sql_type in
        [("i", "INT NOT NULL"), ("n", "BIGINT NULL"), ("s", "VARCHAR(64) NOT NULL"),
         ("f", "DOUBLE NOT NULL"), ("d", "DATETIME(6) NOT NULL"), ("x", "DECIMAL(12,2) NOT NULL")]
    ][:29]

    def wide_row(i):
        values = {"i": r.randint(-2 ** 31, 2 ** 31 - 1), "s": f"name-{i}-{r.random()}"[:64],
                  "f": r.random() * 1e6, "d": _datetime(6)(r), "x": _decimal(12, 2)(r)}
        return (i, *[None if kind == "n" and r.random() < 0.3 else
                     values.get(kind, r.randint(-2 ** 63, 2 ** 63 - 1))
                     for kind in (name[0] for name in wide[1:])])

    start = write(stack, db, [
        "CREATE TABLE narrow (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NOT NULL, "
        "c DOUBLE NOT NULL, d DATETIME(6) NOT NULL)",
        f"CREATE TABLE wide ({', '.join(wide)})",
        ("INSERT INTO narrow VALUES (%s, %s, %s, %s, %s)",
         [(i, r.randint(-2 ** 31, 2 ** 31 - 1), f"name-{i}", r.random(), _datetime(6)(r))
          for i in range(2000)]),
        (f"INSERT INTO wide VALUES ({', '.join(['%s'] * 30)})",
         [wide_row(i) for i in range(2000)]),
        "UPDATE narrow SET a = a DIV 2",
        "UPDATE wide SET i0 = i0 DIV 2",
        # one transaction, so one TABLE_MAP, per row
        *[f"INSERT INTO narrow VALUES ({i}, {i}, 'single', 0.5, '2024-01-01 00:00:00.5')"
          for i in range(2000, 2300)],
    ])
    groups, rows = {}, {}
    for event in row_events(stack, db, start):
        position = (event.packet.packet._position, event.packet.read_bytes)
        decoded = decode_both(event)[1]
        _rewound(event, position)
        single = decoded[0].get("values", {}).get("b") == "single"
        key = (event.table, type(event).__name__ + (" (1 row)" if single else ""))
        rows[key] = rows.get(key, 0) + len(decoded)
        groups.setdefault(key, []).append((event, position))

    speedups = {}
    for (table, kind), events in groups.items():
        n = rows[table, kind]
        library = _best_of(5, events, lambda e: e.rows)
        fast = _best_of(20, events, fastrows.decode_rows)
        speedups[table, kind] = library / fast
        print(f"\n{table:6} {kind:23} {n:4} rows in {len(events):3} events: library "
              f"{library / n * 1e6:6.2f} µs/row, decode_rows {fast / n * 1e6:5.2f} µs/row, "
              f"{library / fast:4.1f}x")
    assert len(speedups) == 5
    # Regression guards with room for a busy machine (measured: 10-15x, and about 5x for
    # one-row events, where a new table map's layout check and the call dominate).
    assert all(x > (3 if "1 row" in kind else 6) for (_, kind), x in speedups.items()), speedups
