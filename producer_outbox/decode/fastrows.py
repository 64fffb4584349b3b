"""Fast row decoding for binlog row events, specialised per table.

``decode_rows`` returns the rows python-mysql-replication's ``RowsEvent.rows`` would, quirks
included, built by a Python function generated for the table's column layout (no type dispatch
at run time), or None where the library would raise or only a corrupt event could take it off
the library's results. It reads the library's internals; the tests compare it with the library
on real and synthetic events, which is what to rerun when upgrading the library. The row
layout, the quirks reproduced and how decoders are cached: docs/internals.md, "Row decoding per
table".
"""

from __future__ import annotations

import datetime
import decimal
import struct
from dataclasses import dataclass
from typing import Callable

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent, RowsEvent,
                                          UpdateRowsEvent, WriteRowsEvent)

from cachesync.producer_outbox.decode.jsoncolumns import column_doc as json_column_doc
from cachesync.producer_outbox.decode.jsoncolumns import column_text as json_column_text
from cachesync.producer_outbox.decode.keycolumns import (text_codec, time2_delta, zero_date_text,
                                                  zero_datetime_text)
from cachesync.producer_outbox.decode.mysqljson import decode_diffs as json_diffs

# The images of one row and the keys the library stores them under.
_IMAGE_KEYS = {
    WriteRowsEvent: (("values", "none_sources"),),
    DeleteRowsEvent: (("values", "none_sources"),),
    UpdateRowsEvent: (("before_values", "before_none_sources"),
                      ("after_values", "after_none_sources")),
}
_IMAGE_KEYS[PartialUpdateRowsEvent] = _IMAGE_KEYS[UpdateRowsEvent]

# Exceptions a generated decoder raises on input the library would reject or
# decode in some way it does not reproduce (truncated event, undecodable
# string, impossible date, fraction out of range): decode_rows then returns None.
GIVE_UP = (ValueError, IndexError, struct.error)

# (schema, table) -> (snapshot of the columns' attributes, decoders for that layout)
_LAYOUTS: dict[tuple[str, str], tuple[list[dict], dict]] = {}


def decode_rows(event) -> list[dict] | None:
    """``event.rows``, decoded by the table's specialised decoder, or None.

    ``event`` is a WriteRowsEvent, UpdateRowsEvent or DeleteRowsEvent whose rows
    have not been read. Nothing is consumed from its packet, so ``event.rows``
    still works afterwards (and is what to use when this returns None: a column
    type or event variant the fast path does not cover, or data it would not
    decode exactly as the library does).
    """
    kind = type(event)
    if kind not in _IMAGE_KEYS or not event.complete:
        return None
    wrapper = event.packet
    if wrapper._BinLogPacketWrapper__data_buffer:   # bytes pushed back by `unread`
        return None
    decoder = table_decoder(event.table_map[event.table_id], kind, event.columns_present_bitmap,
                            getattr(event, "columns_present_bitmap2", None),
                            event._ignore_decode_errors, event.number_of_columns)
    if decoder is None:
        return None
    packet = wrapper.packet
    start = packet._position
    try:
        return decoder(packet._data, start, start + event.event_size - wrapper.read_bytes)
    except GIVE_UP:
        return None


def _layout_decoders(table) -> dict:
    """The decoders of ``table``'s column layout: shared while the layout is unchanged."""
    columns = list(map(vars, table.columns))
    name = (table.schema, table.table)
    known = _LAYOUTS.get(name)
    if known is None or known[0] != columns:
        known = _LAYOUTS[name] = ([dict(c) for c in columns], {})
    return known[1]


def table_decoder(table, kind, bitmap: bytes, bitmap2: bytes | None, ignore_errors: bool,
                  number_of_columns: int) -> Callable | None:
    """The generated decoder of ``table``'s rows in a ``kind`` event (a library row event
    class) with these columns-present bitmaps, or None when the fast path does not cover it.

    The decoder is ``decoder(data, start, end) -> rows``: ``data[start:end]`` is the event's
    row section; it raises one of ``GIVE_UP`` where the library's result would differ.
    """
    decoders = table.__dict__.get("_fastrows")
    if decoders is None:
        decoders = table._fastrows = _layout_decoders(table)
    key = (kind, bitmap, bitmap2, ignore_errors, number_of_columns)
    try:
        return decoders[key]
    except KeyError:
        decoder = decoders[key] = _build(table.columns, key)
        return decoder


def _build(columns, key) -> Callable | None:
    """Compile the decoder for ``columns`` and ``key`` (None: unsupported)."""
    kind, bitmap, bitmap2, ignore_errors, number_of_columns = key
    images = _IMAGE_KEYS[kind]
    errors = "ignore" if ignore_errors else "strict"
    fields = [_field(c, errors) for c in columns]
    if (number_of_columns != len(columns) or not all(fields)
            or not all(c.name for c in columns)
            or not any(any(b) for b in (bitmap, bitmap2) if b)):
        return None     # (no column present: rows of no bytes, malformed; the library's)
    names = [c.name for c in columns]
    per_image, heads = [fields] * len(images), [[]] * len(images)
    if kind is PartialUpdateRowsEvent:
        per_image, heads = _partial_json(columns, fields)
    return _compile(per_image, names, images, (bitmap, bitmap2)[:len(images)], heads)


def _partial_json(columns, fields: list) -> tuple[list, list]:
    """(fields per image, statements before each image) of a PARTIAL_UPDATE_ROWS_EVENT, as
    the library (with jsoncolumns' reader) reads it: JSON values keep their document; the
    after image starts with the value options (1: PARTIAL_JSON, else the fast path gives
    up) and then one partial bit per JSON column of the table, set where the column's
    value is a diff vector."""
    json_columns = [i for i, c in enumerate(columns) if c.type == FIELD_TYPE.JSON]
    before, after = list(fields), list(fields)
    for k, i in enumerate(json_columns):
        before[i] = _Field(_JSON_DOC, length_size=fields[i].length_size)
        after[i] = _Field(_json_partial, length_size=fields[i].length_size, const=1 << k)
    width = (len(json_columns) + 7) // 8
    head = ["opts = data[pos]",
            "if opts > 1: raise ValueError('binlog row value options')",
            "pos += 1",
            "if opts:",
            f"    pbits = _from_bytes(data[pos:pos + {width}], 'little')",
            f"    pos += {width}",
            "else:",
            "    pbits = 0"]
    return [before, after], [[], head]


# -- one column: how to read it ---------------------------------------------------------

# A converter returns the statements that set ``out`` from the raw-value expressions
# ``raws``, recording a None's source in ``ns[name]``; ``k`` names the field's constant.
_Converter = Callable[[str, list, str, "str | None"], list]


@dataclass
class _Field:
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


_INT_CODES = {FIELD_TYPE.TINY: "bB", FIELD_TYPE.SHORT: "hH", FIELD_TYPE.LONG: "iI",
              FIELD_TYPE.LONGLONG: "qQ"}
# Unsigned little-endian integer of n bytes: struct codes and how to combine their values.
_UINT_LE = {1: ("B", "{0}"), 2: ("H", "{0}"), 3: ("HB", "{0} | {1} << 16"), 4: ("I", "{0}"),
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


def _field(column, errors: str) -> _Field | None:
    """The reader of one column, or None when the fast path does not support it.

    Unsupported: other types (GEOMETRY, VAR_STRING, the pre-5.6 temporal
    types...), an ENUM without its values, and metadata out of the ranges a server
    sends (which the lookup tables below do not cover).
    """
    t = column.type
    if not _sane(column):
        return None
    if t in _INT_CODES:
        return _Field(_AS_IS, codes=_INT_CODES[t][column.unsigned])
    if t == FIELD_TYPE.INT24:
        return _Field(_assign("{1} << 16 | {0}"), codes="HB" if column.unsigned else "Hb")
    if t == FIELD_TYPE.FLOAT:
        return _Field(_AS_IS, codes="f")
    if t == FIELD_TYPE.DOUBLE:
        return _Field(_AS_IS, codes="d")
    if t == FIELD_TYPE.YEAR:
        return _Field(_assign("{0} + 1900"), codes="B")
    if t == FIELD_TYPE.DATE:
        return _Field(_date, codes="HB")
    if t == FIELD_TYPE.DATETIME2:
        codes, _ = _UINT_BE[5 + _FSP_BYTES[column.fsp]]
        return _Field(_datetime2(column.fsp), ">", codes)
    if t == FIELD_TYPE.TIMESTAMP2:
        return _Field(_timestamp2(column.fsp), ">", "i" + _FSP_CODES[column.fsp])
    if t == FIELD_TYPE.TIME2:
        return _Field(_time2(column.fsp), ">", "BH" + _FRAC_CODES[column.fsp])
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal(column.precision, column.decimals)
    if t == FIELD_TYPE.BIT:
        return _Field(_bit(column.bits), codes=f"{column.bytes}s")
    if t == FIELD_TYPE.ENUM and column.enum_values is not None:
        codes, expr = _UINT_LE[column.size]
        return _Field(_assign(f"{{k}}[{expr}]"), codes=codes, const=tuple(column.enum_values))
    if t == FIELD_TYPE.SET:
        codes, expr = _UINT_LE[column.size]
        members = tuple((1 << i, v) for i, v in enumerate(column.set_values or ()))
        return _Field(_set(expr), codes=codes, const=members)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _Field(_string(column, errors), length_size=2 if column.max_length > 255 else 1)
    if t == FIELD_TYPE.BLOB:
        return _Field(_string(column, errors), length_size=column.length_size)
    if t == FIELD_TYPE.JSON:       # MySQL's binary JSON: the server's text (jsoncolumns)
        return _Field(_JSON, length_size=column.length_size)
    return None


def _sane(column) -> bool:
    """Whether the column's metadata is within the ranges ``_field`` handles."""
    t = column.type
    if t in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIME2):
        return column.fsp in _FSP_BYTES
    if t == FIELD_TYPE.NEWDECIMAL:
        return 0 <= column.decimals <= column.precision <= 65 and column.precision > 0
    if t == FIELD_TYPE.BIT:
        return column.bits > 0
    if t in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        return column.size in _UINT_LE
    if t in (FIELD_TYPE.BLOB, FIELD_TYPE.JSON):
        return column.length_size in _UINT_LE
    return True


def _assign(template: str) -> _Converter:
    """``out = template``, formatted with the raw values ({0}, {1}...) and the constant {k}."""
    def convert(out, raws, name, k):
        value = template.format(*raws, k=k)
        return [] if value == out else [f"{out} = {value}"]
    return convert


# The raw value is the value: unpacked straight into the column's variable.
_AS_IS = _assign("{0}")
# A JSON column's bytes -> its text, as the patched library reader (raises JsonError, a
# ValueError: the library then reads the event and raises the same)
_JSON = _assign("_json_text({0})")
# In a partial update event: the text that keeps its document; in its after image, a diff
# vector where the column's partial bit (the constant) is set
_JSON_DOC = _assign("_json_doc({0})")


def _json_partial(out, raws, name, k):
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


def _string(column, errors: str) -> _Converter:
    """Bytes decoded as ``__read_string`` does.

    When Python lacks the codec (e.g. ``binary``) the library keeps the bytes, except
    that an empty value decodes to '' since decoding nothing never looks the codec up.
    """
    encoding = _codec(column)
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


def _decimal(precision: int, decimals: int) -> _Field:
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
                *_indent(complement),
                "    negative = True",
                "if " + " or ".join(f"{g} >= {10 ** n}" for g, (_, n) in zip(groups, parts)) + ":",
                "    raise ValueError('decimal digit group out of range')",
                f"{out} = {value}",
                "if negative:",
                f"    {out} = {out}.copy_negate()"]
    return _Field(convert, ">", codes)


# -- the compiled run's view of a table ---------------------------------------------------

# Column kinds of ``cachesync._speedups.compile_plan`` (the C source says what a and b are).
_PC_INT, _PC_REAL, _PC_YEAR, _PC_STRING, _PC_FIXED, _PC_ENUM, _PC_DATETIME2, _PC_TIMESTAMP2, \
    _PC_TIME2, _PC_DECIMAL = range(1, 11)
_INT_BYTES = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4,
              FIELD_TYPE.LONGLONG: 8}


def compiled_columns(columns, keep) -> tuple | None:
    """Each column as the compiled run (``_speedups.plain_run``) reads it, in
    ``compile_plan``'s form ``(kind, a, b, name if kept else None, codec)``: the columns in
    ``keep`` (None: all) decoded to the values the generated decoder gives, the others
    stepped over with the same checks. None where it cannot: a column the generated
    decoder does not cover (the library decodes the table), a kept column of a kind the
    compiled run only steps over (temporal, DECIMAL, ENUM, SET, BIT), or a JSON column."""
    if not all(c.name for c in columns):
        return None
    out = []
    for c in columns:
        if _field(c, "strict") is None:
            return None
        t, kept = c.type, keep is None or c.name in keep
        codec = None
        if t in _INT_BYTES:
            spec = (_PC_INT, _INT_BYTES[t], int(bool(c.unsigned)))
        elif t in (FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE):
            spec = (_PC_REAL, 4 if t == FIELD_TYPE.FLOAT else 8, 0)
        elif t == FIELD_TYPE.YEAR:
            spec = (_PC_YEAR, 1, 0)
        elif t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB):
            size = c.length_size if t == FIELD_TYPE.BLOB else 2 if c.max_length > 255 else 1
            if size > 4:
                return None
            spec, codec = (_PC_STRING, size, 0), _codec(c)
        elif kept:
            return None
        elif t == FIELD_TYPE.DATE:
            spec = (_PC_FIXED, 3, 0)
        elif t in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIME2):
            spec = ({FIELD_TYPE.DATETIME2: _PC_DATETIME2, FIELD_TYPE.TIMESTAMP2: _PC_TIMESTAMP2,
                     FIELD_TYPE.TIME2: _PC_TIME2}[t], c.fsp, 0)
        elif t == FIELD_TYPE.NEWDECIMAL:
            spec = (_PC_DECIMAL, c.precision, c.decimals)
        elif t == FIELD_TYPE.BIT:
            spec = (_PC_FIXED, c.bytes, 0)
        elif t == FIELD_TYPE.ENUM and c.size in (1, 2):
            spec = (_PC_ENUM, c.size, len(c.enum_values))
        elif t == FIELD_TYPE.SET:
            spec = (_PC_FIXED, c.size, 0)
        else:
            return None
        out.append((*spec, c.name if kept else None, codec))
    return tuple(out)


# -- code generation ----------------------------------------------------------------------

def _indent(lines: list) -> list:
    return ["    " + line for line in lines]


def _compile(per_image: list, names: list, images, bitmaps, heads: list) -> Callable:
    """Generate and compile ``decode(data, pos, end) -> rows``.

    ``data`` is the whole packet, ``pos`` where the first row starts, ``end`` where
    the rows end. ``per_image``: the fields of each image; ``heads``: the statements
    that read what precedes each image's null bitmap. Returns None instead of rows that
    would overrun the packet.
    """
    scope = {"_date": datetime.date, "_datetime": datetime.datetime,
             "_zero_date": zero_date_text, "_zero_datetime": zero_datetime_text,
             "_timedelta": datetime.timedelta,
             "_utcfromtimestamp": datetime.datetime.utcfromtimestamp, "_time2": time2_delta,
             "_from_bytes": int.from_bytes, "_Decimal": decimal.Decimal,
             "_scaleb": _EXACT.scaleb, "_json_text": json_column_text,
             "_json_doc": json_column_doc, "_json_diffs": json_diffs}

    def bind(value, prefix: str) -> str:
        name = f"{prefix}{len(scope)}"
        scope[name] = value
        return name

    body, row = [], []
    for n, ((values_key, ns_key), bitmap) in enumerate(zip(images, bitmaps)):
        fields = per_image[n]
        consts = [None if f.const is None else bind(f.const, "K") for f in fields]
        image = _Image(fields, consts, names, bitmap, bind)
        body += heads[n] + image.lines() + [f"values{n} = {image.values_display()}",
                                            f"ns{n} = ns"]
        row += [f"{values_key!r}: values{n}", f"{ns_key!r}: ns{n}"]
    source = "\n".join(["def decode(data, pos, end):",
                        "    rows = []",
                        "    while pos < end:",
                        *_indent(_indent(body)),
                        f"        rows.append({{{', '.join(row)}}})",
                        "    return rows if pos <= len(data) else None"])
    exec(compile(source, "<fastrows>", "exec"), scope)
    return scope["decode"]


class _Image:
    """Statements reading one row image: its values into ``v<i>``, None sources into ``ns``.

    Consecutive present fixed-width columns form a run: when none of them is NULL
    (the usual case), one struct call per byte order reads them all at fixed
    offsets; otherwise each is read in turn.
    """

    def __init__(self, fields, consts, names, bitmap: bytes, bind):
        self.fields, self.consts, self.names, self.bind = fields, consts, names, bind
        present = [i for i in range(len(fields)) if bitmap[i >> 3] & (1 << (i & 7))]
        self.null_bit = {i: 1 << k for k, i in enumerate(present)}
        # The library sizes the null bitmap by every bit set in the columns-present
        # bitmap, padding bits included.
        self.null_bytes = (sum(bin(b).count("1") for b in bitmap) + 7) // 8

    def values_display(self) -> str:
        return "{" + ", ".join(f"{name!r}: v{i}" for i, name in enumerate(self.names)) + "}"

    def lines(self) -> list:
        n = self.null_bytes
        out = ["nulls = data[pos]" if n == 1 else
               f"nulls = _from_bytes(data[pos:pos + {n}], 'little')" if n else "nulls = 0",
               f"pos += {n}", "ns = {}"]
        run = []
        for i, field in enumerate(self.fields):
            if i in self.null_bit and field.codes:
                run.append(i)
                continue
            out += self._run(run)
            run = []
            if i in self.null_bit:
                out += self._nullable(i, self._prefixed(i))
            else:
                out += [f"v{i} = None", f"ns[{self.names[i]!r}] = {NONE_SOURCE.COLS_BITMAP!r}"]
        return out + self._run(run)

    def _raws(self, i: int) -> list:
        """Names for the struct values of fixed-width column ``i``."""
        if self.fields[i].convert is _AS_IS:
            return [f"v{i}"]
        return [f"r{i}_{k}" for k in range(self.fields[i].raw_count)]

    def _convert(self, i: int, raws: list) -> list:
        return self.fields[i].convert(f"v{i}", raws, repr(self.names[i]), self.consts[i])

    def _nullable(self, i: int, read: list) -> list:
        return [f"if nulls & {self.null_bit[i]}:",
                f"    v{i} = None",
                f"    ns[{self.names[i]!r}] = {NONE_SOURCE.NULL!r}",
                "else:", *_indent(read)]

    def _prefixed(self, i: int) -> list:
        """Length-prefixed column ``i`` at ``pos``."""
        size = self.fields[i].length_size
        if size == 1:
            length = ["n = data[pos]"]
        else:
            codes, expr = _UINT_LE[size]
            unpack = self.bind(struct.Struct("<" + codes).unpack_from, "U")
            parts = [f"n{k}" for k in range(len(codes))]
            length = [f"{', '.join(parts)}, = {unpack}(data, pos)", f"n = {expr.format(*parts)}"]
        return [*length, f"pos += {size}", *self._convert(i, ["data[pos:pos + n]"]), "pos += n"]

    def _fixed(self, i: int) -> list:
        """Fixed-width column ``i`` at ``pos``."""
        field = self.fields[i]
        unpack = self.bind(struct.Struct(field.endian + field.codes).unpack_from, "U")
        raws = self._raws(i)
        return [f"{', '.join(raws)}, = {unpack}(data, pos)", f"pos += {field.width}",
                *self._convert(i, raws)]

    def _run(self, run: list) -> list:
        one_by_one = [line for i in run for line in self._nullable(i, self._fixed(i))]
        if len(run) < 2:
            return one_by_one
        mask = sum(self.null_bit[i] for i in run)
        return [f"if nulls & {mask}:", *_indent(one_by_one),
                "else:", *_indent(self._at_fixed_offsets(run))]

    def _at_fixed_offsets(self, run: list) -> list:
        """The columns of ``run``, none NULL: one unpack per byte order, then conversions."""
        out, raws = [], {}
        for endian in "<>":
            members = [i for i in run if self.fields[i].endian == endian]
            if not members:
                continue
            fmt = "".join(self.fields[i].codes if i in members else f"{self.fields[i].width}x"
                          for i in run)
            for i in members:
                raws[i] = self._raws(i)
            unpack = self.bind(struct.Struct(endian + fmt).unpack_from, "U")
            out.append(f"{', '.join(r for i in members for r in raws[i])}, = {unpack}(data, pos)")
        for i in run:
            out += self._convert(i, raws[i])
        return out + [f"pos += {sum(self.fields[i].width for i in run)}"]
