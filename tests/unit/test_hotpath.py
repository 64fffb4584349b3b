"""The compiled row writer (cachesync._speedups.row_record, producer_outbox/encode/hotpath.py) against
the tailer's Python path (rows.row_change + keys.kafka_key + event.encode), row by row: where
the compiled one answers, its key, record bytes and id are the Python path's, byte for byte;
where the Python path raises or decides (oversize), it answers None."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import math
import random

import pytest

from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.decode.rows import TxnContext, row_change, trim_image
from cachesync.schema import jsonfast
from cachesync.schema.event import encode
from cachesync.schema.ids import MAX_ROWS_PER_TXN
from cachesync.schema.keys import kafka_key
from tests.support.binlog import UUID
from tests.support.shared import recorded

try:
    from cachesync import _speedups
except ImportError:
    _speedups = None

pytestmark = pytest.mark.skipif(_speedups is None or not hasattr(_speedups, "row_record"),
                                reason="cachesync._speedups is not built (no C compiler at "
                                       "`make install`): the tailer's Python path does every row")

CTX = TxnContext("mariadb:1", "0-1-42", 42, 1_700_000_000.25, gtid=True)
MAX_BYTES = 1_048_576


def python_record(ctx, row_index, db, table, op, primary_key, before, after,
                  max_bytes=MAX_BYTES):
    """What the tailer's Python path publishes for one row (Tailer._publish_row), or None
    where it raises (the table is invalidated) or sends the row invalidate-only."""
    try:
        change = row_change(ctx, row_index, db, table, op, primary_key, before, after)
        key = kafka_key(change.db, change.table, change.pk)
    except (ValueError, TypeError, KeyError):
        return None
    value = encode(change)
    return None if len(value) > max_bytes else (key, value, change.id)


def compiled(ctx, row_index, db, table, op, primary_key, before, after, max_bytes=MAX_BYTES):
    return hotpath._compiled(ctx, row_index, db, table, op, primary_key, before, after, max_bytes)


def same(ctx, row_index, db, table, op, primary_key, before, after, max_bytes=MAX_BYTES):
    """The compiled answer equals the Python path's whenever it gives one; returns it."""
    got = compiled(ctx, row_index, db, table, op, primary_key, before, after, max_bytes)
    if got is not None:
        want = python_record(ctx, row_index, db, table, op, primary_key, before, after,
                             max_bytes)
        assert got == want, (before, after, primary_key)
    return got


PLAIN_VALUES = [
    0, -1, 1 << 62, -(1 << 63), (1 << 64) - 1, 1 << 70, -(1 << 90), True, False, None,
    0.0, -0.0, 1.5, 0.1, 1e15, 123456789.125, 0.0001, -2.5e-3,
    "", "plain", "ünïcödé ✓ 😀", 'quote " back \\ slash', "comma,and\\N", "\x00\x01\x1f\x7f",
    "\n\r\t\b\f", "\u2028\u2029\ufeff",
]
# values the Python path turns into tagged JSON (schema.values.to_json)
TAGGED_VALUES = [
    decimal.Decimal("12.3400"), decimal.Decimal("-0.00"), dt.datetime(2024, 2, 29, 23, 59, 1),
    dt.datetime(2024, 1, 1, 0, 0, 0, 5), dt.date(1999, 12, 31), dt.time(1, 2, 3),
    dt.timedelta(hours=-3, microseconds=7), b"\x00\xffbin", bytearray(b"ba"), {"a", "b"},
    frozenset(), {"doc": [1, 2.5, None, {"x": "y"}]}, [1, "two", [3]], (1, 2),
]
# values the compiled path leaves to Python: exponent floats, NaN, infinities, lone
# surrogates, subclasses of the JSON types
class _Int(int):
    pass


PYTHON_VALUES = [1e16, 1e-5, 5e-324, math.nan, math.inf, -math.inf, "\ud800", _Int(3),
                 {"n": math.nan}, {1: "non-str key"}]


@pytest.mark.parametrize("value", PLAIN_VALUES + TAGGED_VALUES, ids=repr)
def test_a_value_in_an_image_and_in_the_key_is_written_as_python_writes_it(value):
    image = {"id": value, "v": value, "other": 7}
    for op, before, after in (("insert", None, image), ("delete", image, None),
                              ("update", {"id": 1, "v": None}, image)):
        got = same(CTX, 3, "app", "t", op, "id", before, after)
        if value is not None and not isinstance(value, (set, frozenset, dict, list, tuple)):
            assert got is not None, value     # the plain and tagged cases run compiled


@pytest.mark.parametrize("value", PYTHON_VALUES, ids=repr)
def test_a_value_python_must_write_leaves_the_row_to_python(value):
    image = {"id": 1, "v": value}
    assert compiled(CTX, 0, "app", "t", "insert", "id", None, image) is None
    assert compiled(CTX, 0, "app", "t", "insert", "v", None, {"v": value}) is None


@pytest.mark.parametrize("primary_key", ["", None, (), "b", ("a", "b"), ("b", "a")])
def test_primary_keys_as_the_library_reports_them(primary_key):
    image = {"a": 1, "b": "x,y\\z", "c": None}
    assert same(CTX, 0, "app", "t", "insert", primary_key, None, image) is not None


def test_what_the_python_path_refuses_is_left_to_it():
    image = {"id": 1}
    assert compiled(CTX, 0, "app", "t", "insert", "missing", None, image) is None
    assert python_record(CTX, 0, "app", "t", "insert", "missing", None, image) is None
    assert compiled(CTX, MAX_ROWS_PER_TXN, "app", "t", "insert", "id", None, image) is None
    assert python_record(CTX, MAX_ROWS_PER_TXN, "app", "t", "insert", "id", None,
                         image) is None
    assert compiled(CTX, 0, "app", "t", "insert", "id", None, None) is None
    assert compiled(CTX, 0, "app", "t", "insert", ["id"], None, image) is None


def test_a_row_over_the_record_limit_goes_to_the_python_path():
    image = {"id": 1, "blob": "x" * 500}
    size = len(python_record(CTX, 0, "app", "t", "insert", "id", None, image, MAX_BYTES)[1])
    assert compiled(CTX, 0, "app", "t", "insert", "id", None, image, size) is not None
    assert compiled(CTX, 0, "app", "t", "insert", "id", None, image, size - 1) is None


@pytest.mark.parametrize("ctx", [
    CTX, TxnContext(UUID, "mysql-bin.000003:1234",
                    (3 << 32) | 1234, 1_700_000_001.0),
    TxnContext("mariadb:1", "0-1-7", 7, 1_700_000_000.0, gtid=True, cluster="eu-1"),
    TxnContext("s", "0-1-9", (1 << 80) + 9, 0.5, gtid=True)])
def test_every_transaction_context_gives_the_python_ids_and_versions(ctx):
    assert same(ctx, 17, "app", "t", "update", "id", {"id": 1}, {"id": 1}) is not None


def test_the_heartbeat_table_keeps_its_source_kind():
    got = same(CTX, 0, "cachesync", "cachesync_heartbeat", "update", "name",
               {"name": "t", "beat": 1}, {"name": "t", "beat": 2})
    assert b'"heartbeat"' in got[1]


def test_a_commit_time_python_writes_with_an_exponent_leaves_the_row_to_python():
    ctx = TxnContext("s", "0-1-9", 9, 1e16, gtid=True)
    assert compiled(ctx, 0, "app", "t", "insert", "id", None, {"id": 1}) is None


def test_recorded_mysql_json_documents_as_column_text():
    """The JSON texts the tailer gives MySQL JSON columns (documents recorded from MySQL)."""
    docs = recorded("mysql-binary-json.json")["RECORDED_DOCS"]
    for i, (_, text) in enumerate(docs):
        assert same(CTX, i, "app", "docs", "insert", "id", None, {"id": i, "doc": text})


def test_random_rows_match_the_python_path():
    rng = random.Random(27)
    pool = PLAIN_VALUES + TAGGED_VALUES + PYTHON_VALUES
    answered = 0
    for n in range(3000):
        names = rng.sample(["id", "a", "b", "c", "d", "e"], rng.randint(1, 6))
        image = {c: rng.choice(pool) for c in names}
        image2 = {c: rng.choice(pool) for c in names}
        pk = rng.choice(["", names[0], tuple(names[:2])])
        op, before, after = rng.choice([("insert", None, image), ("delete", image, None),
                                        ("update", image, image2)])
        answered += same(CTX, n % 100, "app", "t", op, pk, before, after) is not None
    assert answered > 1000


def trimmed_same(ctx, row_index, op, primary_key, before, after, keep):
    """The compiled writer given untrimmed images and ``keep`` answers what the Python path
    answers for the images trimmed to ``keep`` (rows.trim_image), whenever it answers."""
    got = hotpath._compiled(ctx, row_index, "app", "t", op, primary_key, before, after,
                            MAX_BYTES, keep)
    if got is not None:
        assert got == python_record(ctx, row_index, "app", "t", op, primary_key,
                                    trim_image(before, keep), trim_image(after, keep))
    return got


def test_the_compiled_writer_trims_the_images_to_the_kept_columns():
    before = {"id": 1, "a": "x", "dropped": 2.5, "c": None}
    after = {"id": 1, "a": "y", "dropped": 3, "c": 4}
    for keep in (frozenset({"id", "a"}), {"id", "c"}, frozenset({"id"}), frozenset({"id", "zz"})):
        got = trimmed_same(CTX, 0, "update", "id", before, after, keep)
        assert got is not None and b'"dropped"' not in got[1]
    # a primary key the trim drops, or none at all (the key is the trimmed image): Python's
    assert trimmed_same(CTX, 0, "insert", "id", None, after, frozenset({"a"})) is None
    assert trimmed_same(CTX, 0, "insert", "", None, after, frozenset({"id", "a"})) is None
    assert trimmed_same(CTX, 0, "insert", "id", None, after, ["id", "a"]) is None   # not a set


def test_random_trimmed_rows_match_the_python_path():
    rng = random.Random(28)
    answered = 0
    for n in range(2000):
        names = ["id", *rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 5))]
        image = {c: rng.choice(PLAIN_VALUES + TAGGED_VALUES) for c in names}
        image2 = {c: rng.choice(PLAIN_VALUES + TAGGED_VALUES) for c in names}
        keep = frozenset(rng.sample(["id", "a", "b", "c", "d", "e", "f"], rng.randint(1, 7)))
        op, before, after = rng.choice([("insert", None, image), ("delete", image, None),
                                        ("update", image, image2)])
        answered += trimmed_same(CTX, n % 50, op, "id", before, after, keep) is not None
    assert answered > 500


def test_the_compiled_blake2b_is_hashlib_s():
    rng = random.Random(5)
    for n in (0, 1, 63, 127, 128, 129, 255, 256, 257, 1000):
        data = rng.randbytes(n)
        assert _speedups.blake2b_16(data) == hashlib.blake2b(data, digest_size=16).hexdigest()


def test_the_stdlib_encoder_writes_the_same_bytes(monkeypatch):
    """Without orjson the Python path writes with the stdlib: the same bytes here too."""
    monkeypatch.setattr(jsonfast, "_dumps_fast", None)
    for value in PLAIN_VALUES + TAGGED_VALUES:
        same(CTX, 0, "app", "t", "insert", "id", None, {"id": 1, "v": value})


def test_the_switch_turns_the_compiled_path_off(monkeypatch):
    monkeypatch.setenv(hotpath.NO_SPEEDUPS, "1")
    assert hotpath.compiled_record() is None
    monkeypatch.delenv(hotpath.NO_SPEEDUPS)
    assert hotpath.compiled_record() is hotpath._compiled
