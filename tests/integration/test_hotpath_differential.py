"""The tailer's compiled row writer against its Python path, on one real MariaDB binlog range.

Rows of many shapes (every common column type, NULLs, text that needs escaping, composite
and missing primary keys, temporal and floating key columns, doubles Python writes with an
exponent, single-row transactions of tables the compiled run decodes) are written once;
the Tailer then reads the same range twice, with a compiled step (the row writer of
producer_outbox/encode/hotpath.py, the framing of whole transactions, the compiled run of buffered
ones) and with it switched off, and the two runs must publish the same records: key,
bytes, id and partition, in order.
"""

from __future__ import annotations

import threading
import time

import pytest

from cachesync.producer_outbox.binlog import dumpstream
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog.preflight import read_server_info
from cachesync.wiring import build_tailer

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(hotpath.compiled_record() is None,
                                 reason="cachesync._speedups is not built (or "
                                        "CACHESYNC_NO_SPEEDUPS is set): one path only")]

TABLES = {
    "zoo": ("CREATE TABLE zoo (id BIGINT UNSIGNED PRIMARY KEY, i INT, s VARCHAR(64) "
            "CHARACTER SET utf8mb4, d DOUBLE, f FLOAT, m DECIMAL(14,4), dt DATETIME(6), "
            "da DATE, tm TIME(3), ts TIMESTAMP(2) NULL, bl BLOB, vb VARBINARY(16), "
            "e ENUM('a','b'), st SET('x','y'), b BIT(5), j JSON, y YEAR, n INT NULL)"),
    "comp": "CREATE TABLE comp (a INT, b VARCHAR(40), c INT, PRIMARY KEY (a, b))",
    "nopk": "CREATE TABLE nopk (x INT, y VARCHAR(32) NULL)",
    "tkey": "CREATE TABLE tkey (k DATETIME(3) PRIMARY KEY, v INT)",
    "dkey": "CREATE TABLE dkey (k DOUBLE PRIMARY KEY, v VARCHAR(8))",
}
MAPPINGS = {"zoo": {"keys": ["zoo:{id}", "zoo:s:{s}"], "mode": "update"},
            "comp": {"keys": ["comp:{a}:{b}"]}, "nopk": {"keys": ["nopk:{x}"]},
            "tkey": {"keys": ["tkey:{k}"]}, "dkey": {"keys": ["dkey:{k}"]}}
TEXTS = ["plain", "comma,and\\back", 'quote"d', "ünï ✓ 😀", "tab\there\nnl", "", "\x01ctl"]
DOUBLES = [0.0, -1.5, 0.1, 1e15, 1e16, 1e300, 1e-7, 123.456]


def _zoo_row(i: int) -> tuple:
    return (i, i * 7 - 50, TEXTS[i % len(TEXTS)], DOUBLES[i % len(DOUBLES)], 1.25 * i,
            f"{i}.{i % 10000:04d}", f"2024-0{1 + i % 9}-1{i % 9} 12:34:56.{i:06d}",
            "2020-02-29", f"-{i % 30}:01:02.500", None if i % 3 else "2024-01-01 00:00:00.25",
            bytes([i % 256, 0, 255]), b"v\x00" + bytes([i % 256]), "ab"[i % 2],
            ["", "x", "y", "x,y"][i % 4], i % 32, '{"k": [1, "two", null], "n": %d}' % i,
            1901 + i % 150, None if i % 2 else i)


def write_range(lab) -> tuple[str, str, int]:
    """The rows, in transactions of several shapes; (start GTID, end GTID, row changes)."""
    conn = lab.stack.admin(lab.db, autocommit=False)
    rows = 0
    try:
        with conn.cursor() as cur:
            for ddl in TABLES.values():
                cur.execute(ddl)
            conn.commit()
            cur.execute("SELECT @@gtid_binlog_pos")
            start = cur.fetchone()[0]
            marks = ", ".join(["%s"] * 18)
            for i in range(1, 41):                    # single-row transactions
                rows += cur.execute(f"INSERT INTO zoo VALUES ({marks})", _zoo_row(i))
                conn.commit()
            rows += cur.executemany(f"INSERT INTO zoo VALUES ({marks})",
                                    [_zoo_row(i) for i in range(41, 101)])
            rows += cur.execute("UPDATE zoo SET s = CONCAT(s, ',u'), d = d * 3 WHERE id <= 60")
            rows += cur.execute("DELETE FROM zoo WHERE id % 5 = 0")
            conn.commit()
            for i in range(30):
                rows += cur.execute("INSERT INTO comp VALUES (%s, %s, %s)",
                                    (i % 4, TEXTS[i % len(TEXTS)] + str(i), i))
                rows += cur.execute("INSERT INTO nopk VALUES (%s, %s)",
                                    (i, None if i % 3 == 0 else TEXTS[i % 5]))
                rows += cur.execute("INSERT INTO tkey VALUES (%s, %s)",
                                    (f"2024-05-06 07:08:{i:02d}.{i:03d}", i))
                rows += cur.execute("INSERT INTO dkey VALUES (%s, %s)",
                                    (DOUBLES[i % len(DOUBLES)] * (i + 1) + i / 1000, "v"))
            conn.commit()
            for i in range(30, 70):     # one row, then two tables' rows
                rows += cur.execute("INSERT INTO comp VALUES (%s, %s, %s)",
                                    (i % 4, TEXTS[i % len(TEXTS)] + str(i), i))
                conn.commit()
                rows += cur.execute("INSERT INTO nopk VALUES (%s, %s)",
                                    (i, None if i % 3 == 0 else TEXTS[i % 5]))
                rows += cur.execute("UPDATE comp SET c = -c WHERE a = %s AND b = %s",
                                    (i % 4, TEXTS[i % len(TEXTS)] + str(i)))
                conn.commit()
            rows += cur.execute("UPDATE comp SET b = CONCAT(b, '\\\\x') WHERE a = 1")
            rows += cur.execute("DELETE FROM nopk WHERE x % 4 = 0")
            rows += cur.execute("UPDATE tkey SET v = v + 1")
            rows += cur.execute("DELETE FROM dkey")
            conn.commit()
            cur.execute("SELECT @@gtid_binlog_pos")
            end = cur.fetchone()[0]
    finally:
        conn.close()
    return start, end, rows


class Capture:
    """A publisher that keeps every record and acknowledges it at once."""

    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        with self.lock:
            self.sent.append((key, value, msg_id, partition))
        on_ack()

    def partitions(self, topic):
        return [0, 1, 2]

    def flush(self, timeout_s=None):
        pass

    def close(self):
        pass


def tail(lab, settings, server: str, start: str, rows: int) -> list:
    capture = Capture()
    tailer = build_tailer(settings, start=Checkpoint(server, gtid=start), publisher=capture,
                          topic=lab.topic)
    worker = threading.Thread(target=tailer.run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while len(capture.sent) < rows and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    tailer.stop()
    worker.join(30)
    assert len(capture.sent) == rows, (len(capture.sent), rows)
    return capture.sent


def _range_and_settings(lab):
    """The written range (its start and row count), the settings to tail it one row per pack,
    and the server's identity."""
    start, _, rows = write_range(lab)
    settings = lab.settings(lab.write_config(MAPPINGS, tailer={"pack_rows": 1}))
    with lab.stack.admin(lab.db) as conn:
        server = read_server_info(conn).identity
    return start, rows, settings, server


def _tail_with_and_without(lab, monkeypatch, module, name: str, observe):
    """Tails the written range twice: with ``module.<name>`` wrapped so that ``observe``
    sees each call's arguments and result, then with it set to None (the Python path).
    Returns (row changes, the first run's records, the second's)."""
    start, rows, settings, server = _range_and_settings(lab)
    real = getattr(module, name)

    def wrapped(*args):
        out = real(*args)
        observe(args, out)
        return out

    monkeypatch.setattr(module, name, wrapped)
    first = tail(lab, settings, server, start, rows)
    monkeypatch.setattr(module, name, None)
    return rows, first, tail(lab, settings, server, start, rows)


def test_compiled_and_python_rows_publish_the_same_records(lab, monkeypatch):
    calls = []          # (table, ran compiled) per row: args are (ctx, row_index, db, table, ...)
    monkeypatch.setattr(hotpath, "_plain_run", None)     # every row through the row writer
    rows, fast, python = _tail_with_and_without(
        lab, monkeypatch, hotpath, "record",
        lambda args, out: calls.append((args[3], out is not None)))
    assert fast == python
    # every row ran compiled but those with a double Python writes with an exponent
    # (1e16, 1e300, 1e-07: zoo.d and dkey.k), which the Python path wrote
    compiled_rows = {t: sum(ok for name, ok in calls if name == t) for t in TABLES}
    python_rows = {t: sum(not ok for name, ok in calls if name == t) for t in TABLES}
    assert len(calls) == rows
    assert python_rows["comp"] == python_rows["nopk"] == python_rows["tkey"] == 0, python_rows
    assert min(compiled_rows.values()) > 0 and python_rows["zoo"] and python_rows["dkey"]


def test_transactions_framed_at_once_publish_what_event_by_event_reading_does(lab, monkeypatch):
    """The fast reader's compiled framing of whole transactions (``scan_group``) against
    its event-by-event path, on the same range: the same records, in order; transactions
    the read buffer held after a framed one went out with it as one group."""
    framed = []         # events per transaction framed at once
    batched = []        # transactions the source took from the buffer after a framed one
    real = dumpstream.DumpStreamReader.buffered_group

    def buffered_group(self):
        found = real(self)
        if found is not None:
            batched.append(found)
        return found
    monkeypatch.setattr(dumpstream.DumpStreamReader, "buffered_group", buffered_group)
    _, grouped, one_by_one = _tail_with_and_without(
        lab, monkeypatch, dumpstream, "_scan_group",
        lambda args, found: found is not None and framed.append(len(found[2])))
    assert grouped == one_by_one
    # transactions with rows went as whole groups (how many the read buffer holds whole
    # depends on how the socket hands out the bytes)
    assert framed and max(framed) >= 4, framed
    assert batched, "no transaction went out in a group with the one before it"


def test_transactions_written_in_c_publish_what_the_python_path_does(lab, monkeypatch):
    """The compiled run of buffered transactions (``_speedups.plain_run``: records written
    straight from the read buffer, once a table map has a plan) against the same range read
    without it: the same records, in order; the run took transactions of the tables whose
    kept columns it decodes, and left the others to Python."""
    taken = []          # transactions per compiled run
    _, compiled, python = _tail_with_and_without(
        lab, monkeypatch, hotpath, "_plain_run",
        lambda args, found: found and taken.append(found[2]))
    assert compiled == python
    assert taken and sum(taken) >= 20, taken     # comp, nopk and dkey's single-row ones
