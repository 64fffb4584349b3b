"""The row decoder's one design: a plan per column, read by two implementations.

A table map's columns become a **column plan** (``table_plan``): per column a
``ColumnPlan(kind, a, b, name, codec, values)`` saying how its value lies in a rows event
and what it decodes to. Two implementations read the same plan and give the same values:

* the compiled one, ``cachesync._speedups.plain_run`` (``compile_plan`` takes the plan as
  ``compiled_columns`` hands it over; ``read_value`` in ``cachesync/_speedups.c`` reads one
  value), which decodes whole buffered transactions straight to records;
* its Python twin, the decoder ``fastrows`` generates for a table from the same plan
  (``reader`` below says, per kind, how the generated code reads a value), which decodes
  every rows event the compiled run leaves, and all of them without the C extension.

The differential tests hold the two byte-identical (tests/unit/test_plain_run.py,
tests/unit/test_rowdecode.py, tests/integration/test_hotpath_differential.py), and hold
the twin to python-mysql-replication's own rows (tests/unit/test_fastrows_unit.py,
tests/integration/test_fastrows.py) and to go-mysql over real binlog files
(tests/unit/test_realbinlog.py). A column whose type has no kind (``column_plan`` returns
None: GEOMETRY, VAR_STRING, the pre-5.6 temporal types, VECTOR...) leaves its table to
python-mysql-replication, the reader of record for what neither implementation decodes.

Adding a column type: a ``Kind``, its branch in ``column_plan`` and in ``reader`` here (the
Python place), and its ``PC_`` kind in ``plan_column_ok`` and ``read_value`` in
``cachesync/_speedups.c`` (the C place); tests/unit/test_rowdecode.py then fails until both
implementations read every kind alike (docs/internals.md, "Adding a column type").

Row event body layout (what ``RowsEvent._fetch_rows`` reads), repeated until the
event ends; an update row carries two images (before, then after), each with the
columns-present bitmap of its own::

    null bitmap   ceil(popcount(columns-present bitmap) / 8) bytes; bit k (LSB first)
                  set = the k-th *present* column is NULL and has no value bytes
    values        one per present, non-NULL column, in column order, as ``Kind`` says
"""

from __future__ import annotations

import datetime
import decimal
import enum
import struct
from dataclasses import dataclass
from typing import Callable, NamedTuple

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from cachesync.producer_outbox.decode.jsoncolumns import column_doc as json_column_doc
from cachesync.producer_outbox.decode.jsoncolumns import column_text as json_column_text
from cachesync.producer_outbox.decode.keycolumns import (text_codec, time2_delta, zero_date_text,
                                                  zero_datetime_text)
from cachesync.producer_outbox.decode.mysqljson import decode_diffs as json_diffs


class Kind(enum.IntEnum):
    """How a column's value lies in a rows event; the numbers are ``_speedups.c``'s ``PC_``."""
    INT = 1          # TINY/SHORT/INT24/LONG/LONGLONG: a = 1/2/3/4/8 bytes LE, b = unsigned
    REAL = 2         # FLOAT/DOUBLE: a = 4/8 bytes IEEE LE
    YEAR = 3         # 1 byte, year - 1900
    STRING = 4       # VARCHAR/CHAR/BLOB/TEXT: a = 1-8 length bytes LE, then the bytes;
    #                  codec: the Python codec they decode with, None: they stay bytes
    DATE = 5         # 3 bytes LE: year << 9 | month << 5 | day
    ENUM = 6         # a = 1-8 bytes LE, the index into values (b of them)
    DATETIME2 = 7    # a = fsp: 5 bytes BE (sign, year*13+month, day, hour, minute, second),
    #                  then the fraction (fsp 1-2/3-4/5-6: 1/2/3 bytes BE)
    TIMESTAMP2 = 8   # a = fsp: 4 bytes BE seconds since the epoch, then the fraction
    TIME2 = 9        # a = fsp: 3 bytes BE (sign, hour, minute, second) + 0x800000, fraction
    DECIMAL = 10     # a = precision, b = decimals: 9 digits per 4 bytes BE, sign in the top
    #                  bit of the first byte, negatives complemented
    SET = 11         # a = 1-8 bytes LE, a bit mask over values (b of them)
    BIT = 12         # a = bytes BE, b = bits
    JSON = 13        # MySQL's binary JSON: a = 1-8 length bytes LE, then the document


class ColumnPlan(NamedTuple):
    """One column of a table's plan (``compiled_columns`` hands it to C as a tuple, ``name``
    None where the mapping does not keep the column)."""
    kind: Kind
    a: int
    b: int
    name: str | None
    codec: str | None = None
    values: tuple | None = None


_INT_BYTES = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4,
              FIELD_TYPE.LONGLONG: 8}
_FSP_KINDS = {FIELD_TYPE.DATETIME2: Kind.DATETIME2, FIELD_TYPE.TIMESTAMP2: Kind.TIMESTAMP2,
              FIELD_TYPE.TIME2: Kind.TIME2}
# Length and enum/set bytes the readers handle (the generated code's struct codes)
_SIZES = range(1, 9)


def column_plan(column) -> ColumnPlan | None:
    """How ``column`` (a python-mysql-replication ``Column`` of a table map) is read, or
    None: a type or metadata neither implementation reads (the library decodes the table)."""
    t, name = column.type, column.name
    if t in _INT_BYTES:
        return ColumnPlan(Kind.INT, _INT_BYTES[t], int(bool(column.unsigned)), name)
    if t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
        return ColumnPlan(Kind.REAL, 4 if t == FIELD_TYPE.FLOAT else 8, 0, name)
    if t == FIELD_TYPE.YEAR:
        return ColumnPlan(Kind.YEAR, 1, 0, name)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
        size = column.length_size if t == FIELD_TYPE.BLOB else 2 if column.max_length > 255 else 1
        return ColumnPlan(Kind.STRING, size, 0, name, _codec(column)) if size in _SIZES else None
    if t == FIELD_TYPE.DATE:
        return ColumnPlan(Kind.DATE, 3, 0, name)
    if t in _FSP_KINDS:
        return ColumnPlan(_FSP_KINDS[t], column.fsp, 0, name) if column.fsp in _FSP_BYTES \
            else None
    if t == FIELD_TYPE.NEWDECIMAL:
        ok = 0 <= column.decimals <= column.precision <= 65 and column.precision > 0
        return ColumnPlan(Kind.DECIMAL, column.precision, column.decimals, name) if ok else None
    if t == FIELD_TYPE.BIT:
        return ColumnPlan(Kind.BIT, column.bytes, column.bits, name) if column.bits > 0 else None
    if t == FIELD_TYPE.ENUM and column.enum_values is not None and column.size in _SIZES:
        values = tuple(column.enum_values)
        return ColumnPlan(Kind.ENUM, column.size, len(values), name, None, values)
    if t == FIELD_TYPE.SET and column.size in _SIZES:
        values = tuple(column.set_values or ())
        return ColumnPlan(Kind.SET, column.size, len(values), name, None, values)
    if t == FIELD_TYPE.JSON and column.length_size in _SIZES:
        return ColumnPlan(Kind.JSON, column.length_size, 0, name)
    return None


def table_plan(columns) -> tuple[ColumnPlan, ...] | None:
    """The plan of a table map's columns, or None where the library decodes the table: a
    column without a name (binlog_row_metadata=MINIMAL) or without a plan."""
    plan = tuple(column_plan(c) if c.name else None for c in columns)
    return None if None in plan else plan


# The kinds the compiled implementation reads. A JSON column (MySQL's binary JSON, whose
# decoder is jsoncolumns, in Python) leaves its table to the twin.
COMPILED_KINDS = frozenset(Kind) - {Kind.JSON}


def compiled_columns(plan: tuple[ColumnPlan, ...], keep) -> tuple | None:
    """``plan`` as ``_speedups.compile_plan`` takes it: the columns in ``keep`` (None: all)
    named (decoded), the others stepped over with the same checks; None where the twin
    decodes the table (a kind the compiled implementation does not read)."""
    if any(c.kind not in COMPILED_KINDS for c in plan):
        return None
    return tuple((int(c.kind), c.a, c.b, c.name if keep is None or c.name in keep else None,
                  c.codec, c.values) for c in plan)


# -- the Python twin: how its generated code reads each kind -------------------------------

# A converter returns the statements that set ``out`` from the raw-value expressions
# ``raws``, recording a None's source in ``ns[name]``; ``k`` names the field's constant.
_Converter = Callable[[str, list, str, "str | None"], list]


@dataclass
class Field:
    """How one column's value is read.

    Fixed width (``codes`` set): the value's bytes unpack with ``endian + codes``
    into the raw values handed to ``convert``. Length-prefixed (``codes`` empty):
    ``length_size`` bytes of little-endian length, then that many bytes, handed to
    ``convert`` as one slice expression. ``const`` is an object the statements use.
    """
    convert: _Converter
    endian: str = "<"
    codes: str = ""
    length_size: int = 0
    const: object = None

    @property
    def width(self) -> int:
        return struct.calcsize(self.endian + self.codes)

    @property
    def raw_count(self) -> int:
        """How many values ``struct`` returns for ``codes`` (a count only precedes ``s``)."""
        return sum(1 for c in self.codes if not c.isdigit())


# Integers by bytes: struct codes (signed, unsigned); INT24 combines its two values.
_INT_CODES = {1: ("b", "B"), 2: ("h", "H"), 3: ("Hb", "HB"), 4: ("i", "I"), 8: ("q", "Q")}
# Unsigned little-endian integer of n bytes: struct codes and how to combine their values.
UINT_LE = {1: ("B", "{0}"), 2: ("H", "{0}"), 3: ("HB", "{0} | {1} << 16"), 4: ("I", "{0}"),
            5: ("IB", "{0} | {1} << 32"), 6: ("IH", "{0} | {1} << 32"),
            7: ("IHB", "{0} | {1} << 32 | {2} << 48"), 8: ("Q", "{0}")}
# Unsigned big-endian integer of 5 to 8 bytes: struct codes and how to combine them.
_UINT_BE = {5: ("IB", "{0} << 8 | {1}"), 6: ("IH", "{0} << 16 | {1}"),
            7: ("IHB", "{0} << 24 | {1} << 8 | {2}"), 8: ("Q", "{0}")}
# Fractional seconds by fsp: bytes, and struct codes of the big-endian signed value.
_FSP_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
_FSP_CODES = {0: "", 1: "b", 2: "b", 3: "h", 4: "h", 5: "bH", 6: "bH"}
_FRAC_CODES = {0: "", 1: "B", 2: "B", 3: "H", 4: "H", 5: "BH", 6: "BH"}     # the same, unsigned
# Packed decimals: bytes used by the leftover (< 9) digits; struct codes of a group by size.
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_PART_CODES = {1: "B", 2: "H", 3: "BH", 4: "I"}
# Decimal(digits) with exponent -decimals, for any NEWDECIMAL (at most 65 digits) exact.
_EXACT = decimal.Context(prec=65)

# The names the readers' statements use, the generated decoder's globals.
RUNTIME = {"_date": datetime.date, "_datetime": datetime.datetime,
           "_zero_date": zero_date_text, "_zero_datetime": zero_datetime_text,
           "_timedelta": datetime.timedelta,
           "_utcfromtimestamp": datetime.datetime.utcfromtimestamp, "_time2": time2_delta,
           "_from_bytes": int.from_bytes, "_Decimal": decimal.Decimal,
           "_scaleb": _EXACT.scaleb, "_json_text": json_column_text,
           "_json_doc": json_column_doc, "_json_diffs": json_diffs}


def reader(spec: ColumnPlan, errors: str) -> Field:
    """How the generated decoder reads a column of ``spec`` (``errors``: the text codec's
    error handling, the event's ``ignore_decode_errors``)."""
    kind, a, b = spec.kind, spec.a, spec.b
    if kind == Kind.INT:
        return Field(_assign("{1} << 16 | {0}") if a == 3 else AS_IS, codes=_INT_CODES[a][b])
    if kind == Kind.REAL:
        return Field(AS_IS, codes="f" if a == 4 else "d")
    if kind == Kind.YEAR:
        return Field(_assign("{0} + 1900"), codes="B")
    if kind == Kind.STRING:
        return Field(_string(spec.codec, errors), length_size=a)
    if kind == Kind.DATE:
        return Field(_date, codes="HB")
    if kind == Kind.DATETIME2:
        return Field(_datetime2(a), ">", _UINT_BE[5 + _FSP_BYTES[a]][0])
    if kind == Kind.TIMESTAMP2:
        return Field(_timestamp2(a), ">", "i" + _FSP_CODES[a])
    if kind == Kind.TIME2:
        return Field(_time2(a), ">", "BH" + _FRAC_CODES[a])
    if kind == Kind.DECIMAL:
        return _decimal(a, b)
    if kind == Kind.BIT:
        return Field(_bit(b), codes=f"{a}s")
    if kind == Kind.ENUM:
        codes, expr = UINT_LE[a]
        return Field(_assign(f"{{k}}[{expr}]"), codes=codes, const=spec.values)
    if kind == Kind.SET:
        codes, expr = UINT_LE[a]
        return Field(_set(expr), codes=codes,
                     const=tuple((1 << i, v) for i, v in enumerate(spec.values)))
    if kind == Kind.JSON:       # MySQL's binary JSON: the server's text (jsoncolumns)
        return Field(JSON_TEXT, length_size=a)
    raise ValueError(f"no reader of column kind {kind!r}")


def _assign(template: str) -> _Converter:
    """``out = template``, formatted with the raw values ({0}, {1}...) and the constant {k}."""
    def convert(out, raws, name, k):
        value = template.format(*raws, k=k)
        return [] if value == out else [f"{out} = {value}"]
    return convert


# The raw value is the value: unpacked straight into the column's variable.
AS_IS = _assign("{0}")
# A JSON column's bytes -> its text, as the patched library reader (raises JsonError, a
# ValueError: the library then reads the event and raises the same)
JSON_TEXT = _assign("_json_text({0})")
# In a partial update event: the text that keeps its document; in its after image, a diff
# vector where the column's partial bit (the constant) is set
JSON_DOC = _assign("_json_doc({0})")


def json_partial(out, raws, name, k):
    return [f"if pbits & {k}:", f"    {out} = _json_diffs({raws[0]})",
            "else:", f"    {out} = _json_doc({raws[0]})"]


def _date(out, raws, name, k):
    """As the patched ``__read_date`` (``keycolumns.install_readers``): a date Python
    cannot hold ('0000-00-00', '2020-00-15') is the server's text."""
    return [f"t = {raws[0]} | {raws[1]} << 16",
            "y, mo, d = t >> 9 & 0x7FFF, t >> 5 & 15, t & 31",
            "try:",
            f"    {out} = _date(y, mo, d)",
            "except ValueError:",
            f"    {out} = _zero_date(y, mo, d)"]


def _fraction(fsp: int, value: str) -> list:
    """Statements setting ``micro`` from the fraction's stored ``value``, as ``__read_fsp``."""
    if fsp == 0:
        return ["micro = 0"]
    if fsp % 2:
        value = f"int({value} / 10)"
    scale = 10 ** (6 - fsp)
    return [f"micro = {value}" + (f" * {scale}" if scale > 1 else "")]


def _signed_fraction(fsp: int, raws: list) -> list:
    """``_fraction`` of the struct values of a fraction read signed, as the library does."""
    if fsp == 0:
        return _fraction(0, "")
    return _fraction(fsp, f"({raws[0]} << 16 | {raws[1]})" if fsp >= 5 else raws[0])


# The library adds microseconds with datetime.replace, only when positive (raising
# beyond 999999); building the datetime in one call (or adding a timedelta) is several
# times cheaper, so give up on fractions outside 0..999999 (only a corrupt event has them).
_CHECK_MICRO = "if not 0 <= micro < 1000000: raise ValueError('fraction out of range')"


def _datetime2(fsp: int) -> _Converter:
    """DATETIME2 and its fraction read as one unsigned big-endian integer.

    A fraction the library reads as negative (top bit set) is > 999999 read
    unsigned, so the range check gives up on it as on any other bad fraction.
    """
    frac_bits = 8 * _FSP_BYTES[fsp]
    _, combine = _UINT_BE[5 + _FSP_BYTES[fsp]]

    def convert(out, raws, name, k):
        packed = combine.format(*raws)
        x, assign = (packed, []) if len(raws) == 1 else ("x", [f"x = {packed}"])
        fraction = [*_fraction(fsp, f"({x} & {(1 << frac_bits) - 1})"),
                    "if micro > 999999: raise ValueError('fraction out of range')"] if fsp else []
        fields = [f"{x} >> {shift + frac_bits} & {mask}" for shift, mask in
                  ((17, 31), (12, 31), (6, 63), (0, 63))]
        return [*assign,
                f"ym = {x} >> {22 + frac_bits} & 0x1FFFF",
                *fraction,
                "try:",
                f"    {out} = _datetime(ym // 13, ym % 13, {', '.join(fields)}"
                f"{', micro' if fsp else ''})",
                "except ValueError:",
                f"    {out} = _zero_datetime(ym // 13, ym % 13, {', '.join(fields)}, "
                f"{'micro' if fsp else '0'}, {fsp})"]
    return convert


def _timestamp2(fsp: int) -> _Converter:
    """As the library: utcfromtimestamp of the seconds, then the fraction if positive."""
    def convert(out, raws, name, k):
        if not fsp:
            return [f"{out} = _utcfromtimestamp({raws[0]})"]
        return [*_signed_fraction(fsp, raws[1:]), _CHECK_MICRO,
                f"{out} = _utcfromtimestamp({raws[0]})",
                "if micro:",
                f"    {out} += _timedelta(0, 0, micro)"]
    return convert


def _time2(fsp: int) -> _Converter:
    """As the patched ``__read_time2`` (``keycolumns.time2_delta``): the server's value."""
    def convert(out, raws, name, k):
        frac = ("0" if len(raws) == 2 else raws[2] if len(raws) == 3
                else f"({raws[2]} << 16 | {raws[3]})")
        return [f"{out} = _time2({raws[0]} << 16 | {raws[1]}, {frac}, {fsp})"]
    return convert


def _bit(bits: int) -> _Converter:
    """As ``__read_bit``: the low ``bits`` bits, most significant first, as '0'/'1'."""
    return _assign(f"format(_from_bytes({{0}}, 'big') & {(1 << bits) - 1}, '0{bits}b')")


def _set(expr: str) -> _Converter:
    """As the library: the set of members whose bit is set, None ("empty set") if none."""
    def convert(out, raws, name, k):
        return [f"m = {expr.format(*raws)}",
                f"{out} = {{v for b, v in {k} if m & b}}",
                f"if not {out}:",
                f"    {out} = None",
                f"    ns[{name}] = {NONE_SOURCE.EMPTY_SET!r}"]
    return convert


def _string(encoding: str | None, errors: str) -> _Converter:
    """Bytes decoded as ``__read_string`` does.

    When Python lacks the codec (e.g. ``binary``) the library keeps the bytes, except
    that an empty value decodes to '' since decoding nothing never looks the codec up.
    """
    if encoding is None:
        return _assign("{0} or ''")
    return _assign(f"{{0}}.decode({encoding!r}, {errors!r})")


def _codec(column) -> str | None:
    """The Python codec a string column's bytes decode with, None where Python has none."""
    if column.character_set_name is None:
        encoding = "utf-8"
    else:
        encoding = text_codec(column.character_set_name)
    try:
        b"\0".decode(encoding)
    except LookupError:
        return None
    except UnicodeDecodeError:
        pass
    return encoding


def _decimal(precision: int, decimals: int) -> Field:
    """NEWDECIMAL(precision, decimals), with the value ``__read_new_decimal`` returns.

    Layout: the integral digits, then the fractional ones, each in groups of 9
    digits per 4 big-endian bytes; the leftover digits (integral: leading,
    fractional: trailing) take 1-4 bytes. The top bit of the first byte is set for
    non-negative numbers; a negative number has all its bytes complemented.

    The library concatenates the groups' digits into text (``{:09d}`` per full
    group) and parses that: for groups within their digit count, the Decimal of
    the digits as one integer, with exponent -decimals, negated (even zero) when
    negative, which is what is built here. A group out of range (only in a corrupt
    event) raises ValueError.
    """
    int_groups, int_rest = divmod(precision - decimals, 9)
    frac_groups, frac_rest = divmod(decimals, 9)
    parts = [(size, digits) for size, digits in
             [(_DIG2BYTES[int_rest], int_rest), *[(4, 9)] * (int_groups + frac_groups),
              (_DIG2BYTES[frac_rest], frac_rest)] if size]
    codes = "".join(_PART_CODES[size] for size, _ in parts)

    def convert(out, raws, name, k):
        raw, lines, groups = iter(raws), [], []
        for j, (size, _) in enumerate(parts):
            group = next(raw)
            if size == 3:
                lines.append(f"g{j} = {group} << 16 | {next(raw)}")
                group = f"g{j}"
            groups.append(group)
        sign_bit = 1 << (8 * parts[0][0] - 1)
        complement = [f"{g} ^= {(1 << 8 * size) - 1}" for g, (size, _) in zip(groups, parts)][1:]
        digits = groups[0]
        for group, (_, n) in zip(groups[1:], parts[1:]):
            digits = f"({digits}) * {10 ** n} + {group}"
        value = f"_scaleb({digits}, {-decimals})" if decimals else f"_Decimal({digits})"
        return [*lines,
                f"if {groups[0]} & {sign_bit}:",
                f"    {groups[0]} ^= {sign_bit}",
                "    negative = False",
                "else:",
                f"    {groups[0]} ^= {sign_bit - 1}",
                *["    " + line for line in complement],
                "    negative = True",
                "if " + " or ".join(f"{g} >= {10 ** n}" for g, (_, n) in zip(groups, parts)) + ":",
                "    raise ValueError('decimal digit group out of range')",
                f"{out} = {value}",
                "if negative:",
                f"    {out} = {out}.copy_negate()"]
    return Field(convert, ">", codes)
