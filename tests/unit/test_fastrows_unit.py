"""fastrows.decode_rows against the library's own decoding, on synthetic row events.

Each event is a real pymysqlreplication WriteRowsEvent / UpdateRowsEvent /
DeleteRowsEvent around a real packet, built without a server: ``decode_rows`` runs
first (it must not consume anything), then ``event.rows`` decodes the same bytes.
Valid values must decode to exactly the library's rows; arbitrary bytes must
decode to exactly the library's rows or give None, and give None whenever the
library raises.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import random

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from cachesync.producer_outbox.decode import fastrows, keycolumns
from cachesync.runtime.library_adapter import (bare_rows_event, bare_wrapper,
                                                       packet_position)
from tests.support.compare import difference

EVENT_TYPES = {WriteRowsEvent: BINLOG.WRITE_ROWS_EVENT_V2,
               UpdateRowsEvent: BINLOG.UPDATE_ROWS_EVENT_V2,
               DeleteRowsEvent: BINLOG.DELETE_ROWS_EVENT_V2}


# -- synthetic events ----------------------------------------------------------------------

def column(name, type_, unsigned=False, charset=None, **metadata) -> Column:
    """A column as TableMapEvent leaves it with binlog_row_metadata=FULL."""
    return Column(**{"type": type_, "name": name, "unsigned": unsigned, "is_primary": False,
                     "charset_id": None, "character_set_name": charset, "collation_name": None,
                     "enum_values": None, "set_values": None, "visibility": False, **metadata})


def event(cls, columns, body: bytes, bitmaps=None, ignore_decode_errors=False,
          table="t", packet_tail=b"\0\0\0\0"):
    """``cls`` positioned at its rows, as BinLogStreamReader hands it over."""
    wrapper = bare_wrapper(MysqlPacket(body + packet_tail, "utf8"))
    full = bytes([0xFF]) * ((len(columns) + 7) // 8)
    bitmaps = bitmaps or [full, full]
    ev = bare_rows_event(
        cls, wrapper, table_map={7: Table(7, "db", table, columns)}, table_id=7,
        schema="db", table=table, columns=columns, number_of_columns=len(columns),
        event_type=EVENT_TYPES[cls], event_size=len(body), complete=True,
        columns_present_bitmap=bitmaps[0], ignore_decode_errors=ignore_decode_errors)
    if cls is UpdateRowsEvent:
        ev.columns_present_bitmap2 = bitmaps[1]
    return ev


def check(ev, must_decode: bool) -> str:
    """decode_rows(ev) is ev.rows (or None where allowed); says "decoded", "fell back"
    or "library raised"."""
    fast = fastrows.decode_rows(ev)
    assert (packet_position(ev.packet.packet), ev.packet.read_bytes) == (0, 0), \
        "decode_rows consumed"
    try:
        lib = ev.rows
    except Exception as e:   # the library rejects the bytes: the fast path must have too
        assert fast is None, f"library raised {e!r}, fast path decoded {fast!r}"
        assert not must_decode, f"library raised {e!r} on valid values"
        return "library raised"
    if must_decode:
        assert fast is not None, "fast path gave up on valid values"
    if fast is None:
        return "fell back"
    assert difference(fast, lib) is None, difference(fast, lib)
    return "decoded"


# -- value generators: (valid bytes, arbitrary bytes) per column ---------------------------

def pack_decimal(precision: int, scale: int, value: decimal.Decimal) -> bytes:
    """MySQL's decimal2bin."""
    negative = value < 0
    integral, _, fraction = format(abs(value), "f").partition(".")
    integral = integral.lstrip("0").rjust(precision - scale, "0")
    fraction = (fraction + "0" * scale)[:scale]
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    out = b""
    lead = (precision - scale) % 9
    if lead:
        out += int(integral[:lead]).to_bytes(sizes[lead], "big")
    for k in range(lead, precision - scale, 9):
        out += int(integral[k:k + 9]).to_bytes(4, "big")
    for k in range(0, scale - scale % 9, 9):
        out += int(fraction[k:k + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(fraction[scale - scale % 9:]).to_bytes(sizes[scale % 9], "big")
    out = bytearray(out)
    out[0] ^= 0x80
    return bytes(b ^ 0xFF for b in out) if negative else bytes(out)


def pack_fraction(fsp: int, micro: int) -> bytes:
    if fsp == 0:
        return b""
    size = (fsp + 1) // 2
    return (micro // 10 ** (6 - 2 * size)).to_bytes(size, "big")


def random_datetime(rng) -> datetime.datetime:
    return datetime.datetime(rng.randint(1000, 9999), rng.randint(1, 12), rng.randint(1, 28),
                             rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                             rng.randint(0, 999999))


def truncated_micro(fsp: int, micro: int) -> int:
    return micro - micro % 10 ** (6 - fsp)


def gen_datetime2(fsp):
    def valid(rng):
        if rng.random() < 0.1:   # zero and zero-part dates: their text
            return (1 << 39 | rng.choice([0, 13 * 2020]) << 22).to_bytes(5, "big") + bytes(
                (fsp + 1) // 2)
        t = random_datetime(rng)
        packed = (1 << 39 | (t.year * 13 + t.month) << 22 | t.day << 17 | t.hour << 12
                  | t.minute << 6 | t.second)
        return packed.to_bytes(5, "big") + pack_fraction(fsp, truncated_micro(fsp, t.microsecond))
    return valid, 5 + (fsp + 1) // 2


def gen_timestamp2(fsp):
    def valid(rng):
        return (rng.randint(0, 2 ** 31 - 1).to_bytes(4, "big")
                + pack_fraction(fsp, truncated_micro(fsp, rng.randint(0, 999999))))
    return valid, 4 + (fsp + 1) // 2


def gen_time2(fsp):
    def valid(rng):
        seconds = rng.randint(0, 838 * 3600 + 59 * 60 + 59)
        packed = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
        return (0x800000 + rng.choice([1, -1]) * packed).to_bytes(3, "big") + pack_fraction(
            fsp, truncated_micro(fsp, rng.randint(0, 999999)))
    return valid, 3 + (fsp + 1) // 2


def gen_date():
    def valid(rng):
        y, m, d = rng.choice([(rng.randint(1000, 9999), rng.randint(1, 12), rng.randint(1, 28)),
                              (0, 0, 0), (2020, 0, 1), (2020, 1, 0)])
        return (y << 9 | m << 5 | d).to_bytes(3, "little")
    return valid, 3


def gen_decimal(precision, scale):
    def valid(rng):
        digits = rng.randint(0, precision)
        value = decimal.Decimal(rng.randint(-10 ** digits + 1, 10 ** digits - 1)).scaleb(-scale)
        return pack_decimal(precision, scale, value)
    return valid, len(pack_decimal(precision, scale, decimal.Decimal(0)))


def gen_any(width):
    return (lambda rng: rng.randbytes(width)), width


def gen_text(length_size, max_chars, encoding="utf8"):
    """Length-prefixed text in ``encoding``, or arbitrary bytes if None."""
    def valid(rng):
        if encoding:
            alphabet = "aé€\0 " + ("😀" if encoding == "utf8" else "")
            raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_chars))).encode(
                encoding)
        else:
            raw = rng.randbytes(rng.randint(0, max_chars))
        return len(raw).to_bytes(length_size, "little") + raw
    return valid, None


def gen_enum(count, size=1):
    return (lambda rng: rng.randint(1, count).to_bytes(size, "little")), size


I, S = FIELD_TYPE, True
# (column, generator of valid bytes and fixed width or None)
LAYOUT = [
    (column("tiny", I.TINY), gen_any(1)), (column("utiny", I.TINY, S), gen_any(1)),
    (column("short", I.SHORT), gen_any(2)), (column("ushort", I.SHORT, S), gen_any(2)),
    (column("int24", I.INT24), gen_any(3)), (column("uint24", I.INT24, S), gen_any(3)),
    (column("long", I.LONG), gen_any(4)), (column("ulong", I.LONG, S), gen_any(4)),
    (column("longlong", I.LONGLONG), gen_any(8)), (column("ulonglong", I.LONGLONG, S), gen_any(8)),
    (column("float", I.FLOAT, size=4), gen_any(4)),
    (column("double", I.DOUBLE, size=8), gen_any(8)),
    (column("year", I.YEAR, S), gen_any(1)), (column("date", I.DATE), gen_date()),
    *[(column(f"datetime{f}", I.DATETIME2, fsp=f), gen_datetime2(f)) for f in range(7)],
    *[(column(f"timestamp{f}", I.TIMESTAMP2, fsp=f), gen_timestamp2(f)) for f in range(7)],
    *[(column(f"time{f}", I.TIME2, fsp=f), gen_time2(f)) for f in range(7)],
    *[(column(f"dec{p}_{s}", I.NEWDECIMAL, precision=p, decimals=s), gen_decimal(p, s))
      for p, s in [(1, 0), (5, 5), (9, 0), (10, 2), (12, 2), (18, 9), (20, 5), (30, 10), (65, 30),
                   (65, 0), (7, 3)]],
    *[(column(f"bit{b}", I.BIT, bits=b, bytes=(b + 7) // 8), gen_any((b + 7) // 8))
      for b in (1, 7, 8, 9, 16, 33, 64)],
    (column("enum", I.ENUM, charset="utf8", size=1, enum_values=["", "x", "yy", "zzz"]),
     gen_enum(3)),
    (column("set", I.SET, charset="utf8", size=1, set_values=list("abcde")), gen_any(1)),
    (column("enum2", I.ENUM, charset="utf8", size=2,
            enum_values=[""] + [f"v{n}" for n in range(300)]), gen_enum(300, 2)),
    (column("set24", I.SET, charset="utf8", size=3, set_values=[f"m{n}" for n in range(20)]),
     gen_any(3)),
    (column("set64", I.SET, charset="utf8", size=8, set_values=list("abc")), gen_any(8)),
    (column("char", I.STRING, charset="utf8", max_length=40), gen_text(1, 10)),
    (column("varchar", I.VARCHAR, charset="utf8", max_length=1200), gen_text(2, 300)),
    (column("latin1", I.STRING, charset="cp1252", max_length=3), gen_text(1, 3, "cp1252")),
    (column("varbinary", I.VARCHAR, charset="binary", max_length=10), gen_text(1, 10, None)),
    (column("nocharset", I.VARCHAR, max_length=100), gen_text(1, 20)),
    *[(column(f"text{n}", I.BLOB, charset="utf8", length_size=n), gen_text(n, 50))
      for n in (1, 2, 3, 4)],
    (column("blob", I.BLOB, charset="binary", length_size=2), gen_text(2, 50, None)),
]


def row_image(rng, layout, present, garbage: float = 0.0) -> bytes:
    """Null bitmap and values of the present columns, a ``garbage`` share of them
    arbitrary bytes (for a length-prefixed column: maybe a length beyond the event)."""
    nulls, values = 0, b""
    for k, i in enumerate(present):
        if rng.random() < 0.2:
            nulls |= 1 << k
            continue
        valid, width = layout[i][1]
        if rng.random() < garbage:
            values += rng.randbytes(width or rng.randint(1, 6))
        else:
            values += valid(rng)
    return nulls.to_bytes((len(present) + 7) // 8, "little") + values


@pytest.mark.parametrize("cls", [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
def test_valid_values_match_library(cls):
    rng = random.Random(cls.__name__)
    columns = [c for c, _ in LAYOUT]
    images = 2 if cls is UpdateRowsEvent else 1
    for _ in range(300):
        body = b"".join(row_image(rng, LAYOUT, range(len(columns)))
                        for _ in range(rng.randint(1, 4) * images))
        check(event(cls, columns, body, table=f"all_{cls.__name__}"), must_decode=True)


def test_arbitrary_bytes_match_library_or_fall_back():
    rng = random.Random("garbage")
    columns = [c for c, _ in LAYOUT]
    outcomes = collections.Counter()
    for _ in range(700):
        body = b"".join(row_image(rng, LAYOUT, range(len(columns)), garbage=0.02)
                        for _ in range(rng.randint(1, 3)))
        outcomes[check(event(WriteRowsEvent, columns, body, table="garbage"),
                       must_decode=False)] += 1
    assert min(outcomes.values()) > 30 and len(outcomes) == 3, outcomes


def test_partial_images_match_library():
    """Columns missing from the columns-present bitmaps (binlog_row_image=MINIMAL/NOBLOB)."""
    rng = random.Random("minimal")
    columns = [c for c, _ in LAYOUT]
    for _ in range(30):   # (each pair of bitmaps compiles a decoder)
        bitmaps = []
        for _ in range(2):
            bits = rng.getrandbits(len(columns)) | 1
            bitmaps.append(bits.to_bytes((len(columns) + 7) // 8, "little"))
        presents = [[i for i in range(len(columns)) if b[i // 8] >> (i % 8) & 1] for b in bitmaps]
        body = b"".join(row_image(rng, LAYOUT, p) for _ in range(2) for p in presents)
        check(event(UpdateRowsEvent, columns, body, bitmaps, table="minimal"), must_decode=True)


def test_ignore_decode_errors():
    columns = [column("s", I.VARCHAR, charset="utf8", max_length=100),
               column("l", I.STRING, charset="cp1252", max_length=10)]
    body = b"\0" + b"\x03a\xffb" + b"\x02\x81x"
    strict = event(WriteRowsEvent, columns, body, table="errors")
    assert fastrows.decode_rows(strict) is None
    with pytest.raises(UnicodeDecodeError):
        strict.rows
    lenient = event(WriteRowsEvent, columns, body, ignore_decode_errors=True, table="errors")
    assert check(lenient, must_decode=True) == "decoded"
    assert lenient.rows[0]["values"] == {"s": "ab", "l": "x"}


def test_library_quirks_are_kept_and_key_images_correct_them():
    # Zero dates were None ("out of date range") until issue 13: indistinguishable from NULL,
    # so their keys were skipped. The patched readers (keycolumns) and fastrows now give the
    # server's text; key_images turns the other quirks into the server's text too.
    columns = [column("year", I.YEAR, S), column("date", I.DATE),
               column("dt", I.DATETIME2, fsp=0), column("ts", I.TIMESTAMP2, fsp=0),
               column("bin", I.VARCHAR, charset="binary", max_length=10),
               column("set", I.SET, charset="utf8", size=1, set_values=["a", "b"]),
               column("bit", I.BIT, bits=10, bytes=2)]
    body = (b"\0" + b"\0" + b"\0\0\0" + (1 << 39).to_bytes(5, "big") + bytes(4) + b"\0" + b"\0"
            + b"\x02\x05")
    ev = event(WriteRowsEvent, columns, body, table="quirks")
    assert check(ev, must_decode=True) == "decoded"
    assert ev.rows == [{
        "values": {"year": 1900, "date": "0000-00-00", "dt": "0000-00-00 00:00:00",
                   "ts": datetime.datetime(1970, 1, 1), "bin": "", "set": None,
                   "bit": "1000000101"},
        "none_sources": {"set": "empty set"}}]
    specs = tuple(filter(None, map(keycolumns.column_spec, columns)))
    assert keycolumns.key_images(ev.rows[0], specs)["values"] == {
        "year": "0000", "date": "0000-00-00", "dt": "0000-00-00 00:00:00",
        "ts": "0000-00-00 00:00:00", "bin": b"", "set": "", "bit": 517}


def test_zero_part_and_invalid_dates_decode_to_their_text():
    columns = [column("date", I.DATE), column("dt", I.DATETIME2, fsp=3)]
    date = (2020 << 9 | 0 << 5 | 15).to_bytes(3, "little")                  # 2020-00-15
    dt_ = (1 << 39 | (2020 * 13 + 2) << 22 | 31 << 17 | 10 << 12).to_bytes(5, "big")
    ev = event(WriteRowsEvent, columns, b"\0" + date + dt_ + (500 * 10).to_bytes(2, "big"),
               table="zeroes")
    assert check(ev, must_decode=True) == "decoded"
    assert ev.rows[0]["values"] == {"date": "2020-00-15", "dt": "2020-02-31 10:00:00.500"}


@pytest.mark.parametrize("type_, metadata", [
    (FIELD_TYPE.GEOMETRY, {"length_size": 4}),
    (FIELD_TYPE.VAR_STRING, {"max_length": 10}), (FIELD_TYPE.DATETIME, {}),
    (FIELD_TYPE.TIMESTAMP, {}), (FIELD_TYPE.TIME, {}), (FIELD_TYPE.ENUM, {"size": 1}),
    (FIELD_TYPE.DATETIME2, {"fsp": 7}), (FIELD_TYPE.NEWDECIMAL, {"precision": 0, "decimals": 0})])
def test_unsupported_columns_fall_back(type_, metadata):
    """An unsupported type (or an ENUM without its values, or odd metadata) gives None."""
    columns = [column("id", I.LONG), column("x", type_, **metadata)]
    ev = event(WriteRowsEvent, columns, b"\x02" + bytes(4), table=f"unsupported{type_}")
    assert fastrows.decode_rows(ev) is None
    assert (packet_position(ev.packet.packet), ev.packet.read_bytes) == (0, 0)
    assert ev.rows[0]["values"]["id"] == 0


def test_missing_column_names_fall_back():
    columns = [column("id", I.LONG), column(None, I.LONG)]
    ev = event(WriteRowsEvent, columns, bytes(9), table="nameless")
    assert fastrows.decode_rows(ev) is None


def test_truncated_event_gives_none():
    columns = [column("id", I.LONG), column("s", I.VARCHAR, charset="utf8", max_length=10)]
    body = b"\0" + bytes(4) + b"\x09abc"
    ev = event(WriteRowsEvent, columns, body, packet_tail=b"", table="truncated")
    assert fastrows.decode_rows(ev) is None
    with pytest.raises(AssertionError):
        ev.rows


def test_decoders_follow_the_column_layout():
    """A new table map with the same columns reuses the decoders; changed columns do not."""
    def decoder_of(columns):
        ev = event(WriteRowsEvent, columns, b"\0" + bytes(4 * len(columns)), table="layout")
        assert check(ev, must_decode=True) == "decoded"
        return ev.table_map[7]._fastrows

    first = decoder_of([column("a", I.LONG)])
    assert decoder_of([column("a", I.LONG)]) is first
    assert decoder_of([column("a", I.LONG, S)]) is not first
    assert decoder_of([column("a", I.LONG, S), column("b", I.LONG)]) is not first
