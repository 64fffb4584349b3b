"""fastrows.decode_rows on real MariaDB row events, against the library's ``event.rows``.

Each test writes to its own database, then reads that binlog range with a
BinLogStreamReader as the tailer's MySQL user and, for every row event, runs
``decode_rows`` first (it consumes nothing) and ``event.rows`` second, on the same
bytes.
"""

from __future__ import annotations

import random
import time

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from cachesync.producer_outbox.decode import fastrows
from cachesync.runtime.library_adapter import (cache_rows, packet_position,
                                                       set_packet_position)
from tests.support.columns import (COLUMNS, INSERT, _datetime, _decimal, random_rows,
                                   scratch_database, special_rows, write)
from tests.support.compare import difference

ROW_EVENTS = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent]


@pytest.fixture
def db(stack):
    with scratch_database(stack, "fastrows_test") as name:
        yield name


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
    kinds, sources, texts, most_rows = set(), set(), set(), 0
    for event in row_events(stack, db, start):
        _, rows = decode_both(event)
        kinds.add(type(event))
        most_rows = max(most_rows, len(rows))
        sources.update(source for row in rows for key in row if key.endswith("none_sources")
                       for source in row[key].values())
        texts.update(v for row in rows for key in row if key.endswith("values")
                     for name, v in row[key].items()
                     if name.startswith("dt") and isinstance(v, str))
    assert kinds == set(ROW_EVENTS) and most_rows > 5
    # zero and zero-part dates were None ("out of date range", "out of datetime2 range")
    # until issue 13; both paths now decode them to the server's text
    assert sources == {"null", "cols bitmap", "empty set"}
    assert {"0000-00-00", "2020-00-15", "0000-00-00 00:00:00", "2020-00-00 10:00:00.0000",
            "2020-02-00 00:00:00.50000"} <= texts


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


def test_an_invalid_date_the_server_allowed_decodes_to_its_text(stack, db):
    # the library raised ValueError on it (stopping the tailer) until issue 13
    start = write(stack, db, [
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'",
        "CREATE TABLE odd_dates (id INT PRIMARY KEY, d DATE, t DATETIME(2))",
        "INSERT INTO odd_dates VALUES (1, '2021-02-31', '2021-02-30 10:00:00.25')",
    ])
    [event] = row_events(stack, db, start)
    fast = fastrows.decode_rows(event)
    assert fast == event.rows == [{"values": {"id": 1, "d": "2021-02-31",
                                              "t": "2021-02-30 10:00:00.25"}, "none_sources": {}}]


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
    set_packet_position(event.packet.packet, position[0])
    event.packet.read_bytes = position[1]
    cache_rows(event, None)
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
        position = (packet_position(event.packet.packet), event.packet.read_bytes)
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
