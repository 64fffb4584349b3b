"""MySQL's binary JSON (the JSON column in the binlog) and its partial-update diffs, pure.

column_text turns a JSON column's binary value into the text CAST(col AS CHAR) prints on the
server; decode_diffs reads a PARTIAL_JSON diff vector and apply_diffs applies it to the before
image as the replica does, or raises DiffRejected where the replica would. Raises JsonError (a
ValueError) on bytes that are not such a document. How the server prints each value, and the
document model: docs/internals.md, "MySQL's binary JSON".
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cachesync.producer_outbox.binlog.eventtypes import length_encoded

# Value types of the binary format (json_binary.h)
SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x00, 0x01, 0x02, 0x03
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64 = 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A
DOUBLE, STRING, OPAQUE = 0x0B, 0x0C, 0x0F
_LITERALS = {0x00: None, 0x01: True, 0x02: False}
_SCALARS = {INT16: struct.Struct("<h"), UINT16: struct.Struct("<H"), INT32: struct.Struct("<i"),
            UINT32: struct.Struct("<I"), INT64: struct.Struct("<q"), UINT64: struct.Struct("<Q"),
            DOUBLE: struct.Struct("<d")}
_CONTAINERS = {SMALL_OBJECT: (True, False), LARGE_OBJECT: (True, True),
               SMALL_ARRAY: (False, False), LARGE_ARRAY: (False, True)}
_U16, _U32 = struct.Struct("<H"), struct.Struct("<I")
_PACKED = struct.Struct("<q")

# SQL field types of opaque values that print as themselves (mysql_com.h enum_field_types)
TYPE_TIMESTAMP, TYPE_DATE, TYPE_TIME, TYPE_DATETIME, TYPE_NEWDECIMAL = 7, 10, 11, 12, 246

# my_gcvt(d, MY_GCVT_ARG_DOUBLE, MY_GCVT_MAX_FIELD_WIDTH, ...): DBL_DIG + 4 + max(5, DBL_DIG)
_GCVT_WIDTH = 34
_MAX_DECPT_FOR_F_FORMAT = 15      # DBL_DIG
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)

# Json_diff operations (enum_json_diff_operation)
REPLACE, INSERT, REMOVE = 0, 1, 2
OPERATIONS = {REPLACE: "replace", INSERT: "insert", REMOVE: "remove"}


class JsonError(ValueError):
    """Bytes that are not MySQL binary JSON, or not a JSON diff vector."""


class DiffRejected(JsonError):
    """A diff the document cannot take (MySQL's replica rejects it the same way)."""


@dataclass(frozen=True)
class Scalar:
    """An opaque value of the document (DECIMAL, a date or time, other SQL types), kept
    as the JSON text the server prints for it (quoted where the server quotes it)."""

    text: str


class JsonText(str):
    """A JSON column's text that keeps its document, so that a partial update of the
    same row can be applied to it (:func:`apply_diffs`)."""

    doc: Any

    @classmethod
    def of(cls, doc: Any) -> "JsonText":
        out = cls(to_text(doc))
        out.doc = doc
        return out


# -- binary JSON -> document ----------------------------------------------------------------

def column_text(data: bytes) -> str:
    """The text of a JSON column's binary value (empty: the JSON null literal, as the
    server reads an empty JSON field). Raises JsonError."""
    return to_text(decode(data))


def decode(data: bytes) -> Any:
    """The document of one binary JSON value (type byte, then the value). Raises JsonError."""
    if not data:
        return None                      # Field_json::val_json: an empty field is null
    return _value(data[0], memoryview(data)[1:])


def _value(kind: int, data: memoryview) -> Any:
    try:
        if kind in _CONTAINERS:
            is_object, large = _CONTAINERS[kind]
            return _container(data, is_object, large)
        if kind == LITERAL:
            return _literal(data[0])
        if kind in _SCALARS:
            value = _SCALARS[kind].unpack_from(data)[0]
            if kind == DOUBLE and not math.isfinite(value):
                raise JsonError("a JSON double is not finite")
            return value
        if kind == STRING:
            length, pos = _varlen(data, 0)
            return _utf8(data[pos:pos + length], length)
        if kind == OPAQUE:
            field_type = data[0]
            length, pos = _varlen(data, 1)
            payload = bytes(data[pos:pos + length])
            if len(payload) != length:
                raise JsonError("opaque value runs past the document")
            return Scalar(opaque_text(field_type, payload))
    except (struct.error, IndexError) as e:
        raise JsonError(f"truncated JSON value of type {kind:#x}") from e
    raise JsonError(f"unknown JSON value type {kind:#x}")


def _literal(byte: int) -> Any:
    if byte not in _LITERALS:
        raise JsonError(f"unknown JSON literal {byte:#x}")
    return _LITERALS[byte]


def _utf8(raw: memoryview, length: int) -> str:
    if len(raw) != length:
        raise JsonError("string runs past the document")
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonError(f"JSON string is not UTF-8: {e}") from e


def _varlen(data: memoryview, pos: int) -> tuple[int, int]:
    """A length of 7 bits per byte, low bits first, high bit set while more follow."""
    value = 0
    for i in range(5):
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise JsonError("variable-length integer longer than 5 bytes")


def _container(data: memoryview, is_object: bool, large: bool) -> Any:
    """An object or array: count and byte size, key entries (objects), value entries;
    offsets count from the container's first byte."""
    offset = _U32 if large else _U16
    width = offset.size
    count, size = offset.unpack_from(data, 0)[0], offset.unpack_from(data, width)[0]
    if size > len(data):
        raise JsonError("container runs past the document")
    data = data[:size]
    keys_at = 2 * width
    values_at = keys_at + (count * (width + 2) if is_object else 0)
    if values_at + count * (1 + width) > size:
        raise JsonError("container header runs past its size")
    values = [_entry(data, values_at + i * (1 + width), large) for i in range(count)]
    if not is_object:
        return values
    out = {}
    for i, value in enumerate(values):
        at = keys_at + i * (width + 2)
        key_offset = offset.unpack_from(data, at)[0]
        key_length = _U16.unpack_from(data, at + width)[0]
        out[_utf8(data[key_offset:key_offset + key_length], key_length)] = value
    return out


def _entry(data: memoryview, at: int, large: bool) -> Any:
    """One value entry: its type, then the value itself (small scalars) or its offset."""
    kind = data[at]
    slot = data[at + 1:]
    if kind == LITERAL:
        return _literal(slot[0])
    if kind in (INT16, UINT16) or (large and kind in (INT32, UINT32)):
        return _SCALARS[kind].unpack_from(slot)[0]
    where = (_U32 if large else _U16).unpack_from(slot)[0]
    if where >= len(data):
        raise JsonError("value offset runs past its container")
    return _value(kind, data[where:])


# -- opaque values ----------------------------------------------------------------------------

def opaque_text(field_type: int, payload: bytes) -> str:
    """The JSON text of an opaque value of SQL type ``field_type``."""
    if field_type == TYPE_NEWDECIMAL:
        if len(payload) < 2:
            raise JsonError("opaque DECIMAL shorter than its precision and scale")
        return decimal_text(payload[0], payload[1], payload[2:])
    if field_type in (TYPE_DATE, TYPE_TIME, TYPE_DATETIME, TYPE_TIMESTAMP):
        if len(payload) < _PACKED.size:
            raise JsonError("opaque temporal value shorter than 8 bytes")
        return '"' + temporal_text(field_type, _PACKED.unpack_from(payload)[0]) + '"'
    return quote(f"base64:type{field_type}:{mysql_base64(payload)}")


def decimal_text(precision: int, scale: int, raw: bytes) -> str:
    """``decimal2string`` of MySQL's packed DECIMAL(precision, scale): 9 digits per 4
    big-endian bytes, leftover digits in 1-4 bytes, top bit set when not negative and
    every byte complemented when negative; all ``scale`` fraction digits printed."""
    intg = precision - scale
    if not 0 <= scale <= precision or precision == 0:
        raise JsonError(f"DECIMAL({precision},{scale}) is not a decimal type")
    parts = ([(_DIG2BYTES[intg % 9], intg % 9)] if intg % 9 else []) + [(4, 9)] * (intg // 9)
    n_int = len(parts)
    parts += [(4, 9)] * (scale // 9) + ([(_DIG2BYTES[scale % 9], scale % 9)] if scale % 9 else [])
    size = sum(p for p, _ in parts)
    if len(raw) < size:
        raise JsonError("DECIMAL value shorter than its precision")
    buf = bytearray(raw[:size])
    negative = not buf[0] & 0x80
    buf[0] ^= 0x80
    if negative:
        buf = bytearray(b ^ 0xFF for b in buf)
    groups, pos = [], 0
    for nbytes, digits in parts:
        value = int.from_bytes(buf[pos:pos + nbytes], "big")
        if value >= 10 ** digits:
            raise JsonError("DECIMAL digit group out of range")
        groups.append(f"{value:0{digits}d}")
        pos += nbytes
    whole = "".join(groups[:n_int]).lstrip("0") or "0"
    fraction = "".join(groups[n_int:])
    return ("-" if negative else "") + whole + ("." + fraction if scale else "")


def temporal_text(field_type: int, packed: int) -> str:
    """``my_TIME_to_str(t, 6)`` of a packed DATE/TIME/DATETIME/TIMESTAMP
    (``TIME_from_longlong_*_packed``): the fraction in the low 24 bits, then the fields."""
    negative = packed < 0
    packed = -packed if negative else packed
    micro, whole = packed % (1 << 24), packed >> 24
    if field_type == TYPE_TIME:
        hour, minute, second = whole >> 12 & 0x3FF, whole >> 6 & 63, whole & 63
        return f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    ymd, hms = whole >> 17, whole % (1 << 17)
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd % 32
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if field_type == TYPE_DATE:
        return date
    return (f"{date} {hms >> 12:02d}:{hms >> 6 & 63:02d}:{hms & 63:02d}.{micro:06d}")


def mysql_base64(raw: bytes) -> str:
    """MySQL's ``base64_encode``: standard alphabet and padding, a newline after every 76
    characters (MIME style)."""
    text = base64.b64encode(raw).decode("ascii")
    return "\n".join(text[i:i + 76] for i in range(0, len(text), 76))


# -- document -> text ---------------------------------------------------------------------------

def to_text(doc: Any) -> str:
    """The text ``CAST(doc AS CHAR)`` prints for a document."""
    out: list[str] = []
    _write(doc, out)
    return "".join(out)


def key_order(key: str) -> tuple[int, bytes]:
    """How MySQL orders object keys (``Json_key_comparator``): length in bytes, then bytes."""
    raw = key.encode("utf-8")
    return len(raw), raw


def _write(doc: Any, out: list) -> None:
    if isinstance(doc, str):
        out.append(quote(doc))
    elif doc is None:
        out.append("null")
    elif doc is True or doc is False:
        out.append("true" if doc else "false")
    elif isinstance(doc, int):
        out.append(str(doc))
    elif isinstance(doc, float):
        out.append(double_text(doc))
    elif isinstance(doc, Scalar):
        out.append(doc.text)
    elif isinstance(doc, dict):
        out.append("{")
        for i, key in enumerate(sorted(doc, key=key_order)):
            out.append(", " if i else "")
            out.append(quote(key))
            out.append(": ")
            _write(doc[key], out)
        out.append("}")
    elif isinstance(doc, list):
        out.append("[")
        for i, item in enumerate(doc):
            out.append(", " if i else "")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON document value: {type(doc).__name__}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t"}
_ESCAPES.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in _ESCAPES})
_SPECIAL = re.compile(r'["\\\x00-\x1f]')


def quote(text: str) -> str:
    """``double_quote``: the string in double quotes, with ``"``, ``\\`` and the control
    characters below 0x20 escaped; every other character (DEL, non-ASCII) as it is."""
    return '"' + _SPECIAL.sub(lambda m: _ESCAPES[m.group()], text) + '"'


def double_text(value: float) -> str:
    """A JSON DOUBLE as the server prints it: ``my_gcvt`` at the field width
    ``MY_GCVT_MAX_FIELD_WIDTH`` (34), then ``.0`` when neither ``.`` nor ``e`` appears."""
    if not math.isfinite(value):
        raise JsonError("a JSON double is not finite")
    digits, decpt = _shortest_digits(value)
    negative = math.copysign(1.0, value) < 0
    text = ("-" if negative else "") + _gcvt(digits, decpt, _GCVT_WIDTH - (value < 0))
    return text if "." in text or "e" in text else text + ".0"


def _shortest_digits(value: float) -> tuple[str, int]:
    """(significant digits, decimal point position) of the shortest text that reads back
    to ``value`` (what dtoa mode 4 gives for 34 digits); zero is ("0", 1)."""
    if value == 0:
        return "0", 1
    sign, digits, exponent = Decimal(repr(abs(value))).as_tuple()
    text = "".join(map(str, digits))
    decpt = len(text) + exponent
    return text.rstrip("0"), decpt


def _gcvt(digits: str, decpt: int, width: int) -> str:
    """``my_gcvt``'s choice between 'f' and 'e' formats, for digits that always fit the
    width (at most 17 significant digits, width 33 or 34: no truncation arises)."""
    n = len(digits)
    exp_len = 1 + (decpt >= 101 or decpt <= -99) + (decpt >= 11 or decpt <= -9)
    f_len = n - decpt + 2 if decpt <= 0 else n + 1 if decpt < n else decpt
    have_space = f_len <= width
    force_e = decpt <= 0 and width <= 2 - decpt and width >= 3 + exp_len
    use_f = ((have_space or (decpt <= width and (decpt >= -1 or (decpt == -2 and (
        n > 1 or not force_e))) and not force_e))
        and (not have_space or (decpt >= -_MAX_DECPT_FOR_F_FORMAT + 1
                                and (decpt <= _MAX_DECPT_FOR_F_FORMAT or n > decpt))))
    if use_f:
        if decpt <= 0:
            return "0." + "0" * -decpt + digits
        if decpt < n:
            return digits[:decpt] + "." + digits[decpt:]
        return digits + "0" * (decpt - n)
    exponent = decpt - 1
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{mantissa}e{exponent}"


# -- partial updates: diff vectors ----------------------------------------------------------------

@dataclass(frozen=True)
class ArrayIndex:
    """An array path leg: ``[index]``, or ``[last - index]`` when ``from_end``."""

    index: int
    from_end: bool = False

    def position(self, size: int) -> int:
        """``Json_array_index::position``: clamped to the array (an insert past the end
        appends)."""
        if self.from_end:
            return size - self.index - 1 if self.index < size else 0
        return min(self.index, size)

    def within(self, size: int) -> bool:
        return self.index < size


@dataclass(frozen=True)
class JsonDiff:
    """One operation of a diff vector: ``path`` legs are member names (str) and
    ArrayIndex; ``value`` is the document inserted or replaced (None for remove)."""

    operation: int
    path: tuple
    value: Any = None


@dataclass(frozen=True)
class JsonDiffs:
    """The after image of a JSON column a PARTIAL_UPDATE_ROWS_EVENT logged as a diff."""

    diffs: tuple[JsonDiff, ...]


def decode_diffs(data: bytes) -> JsonDiffs:
    """The diffs of a diff vector's body (the column's bytes after its 4-byte length):
    per diff, the operation byte, the path text (length-encoded), then for replace and
    insert the binary JSON value (length-encoded). Raises JsonError."""
    view, pos, diffs = memoryview(data), 0, []
    try:
        while pos < len(view):
            operation = view[pos]
            if operation not in OPERATIONS:
                raise JsonError(f"unknown JSON diff operation {operation}")
            length, pos = _net_length(view, pos + 1)
            path = parse_path(_utf8(view[pos:pos + length], length))
            pos += length
            value = None
            if operation != REMOVE:
                length, pos = _net_length(view, pos)
                if pos + length > len(view):
                    raise JsonError("JSON diff value runs past the column")
                value = decode(bytes(view[pos:pos + length]))
                pos += length
            diffs.append(JsonDiff(operation, path, value))
    except IndexError as e:
        raise JsonError("truncated JSON diff") from e
    return JsonDiffs(tuple(diffs))


def _net_length(data: memoryview, pos: int) -> tuple[int, int]:
    """``net_field_length`` in a JSON diff; a malformed or cut-short one is a JsonError."""
    try:
        return length_encoded(data, pos)
    except ValueError as e:
        raise JsonError(f"{e} in JSON diff") from None


_LEG = re.compile(r'\s*(?:\.\s*(?:"((?:[^"\\]|\\.)*)"|([^\s.\[\]"*]+))'
                  r'|\[\s*(?:(\d+)|last(?:\s*-\s*(\d+))?)\s*\])', re.S)


def parse_path(text: str) -> tuple:
    """The legs of a path as ``Json_path::to_string`` writes it (``$``, ``.member`` or
    ``."quoted member"``, ``[n]``, ``[last]``, ``[last-n]``). Wildcards and ranges are
    never in a diff; they raise JsonError like any other text."""
    text = text.strip()
    if not text.startswith("$"):
        raise JsonError(f"JSON path does not start with $: {text!r}")
    legs, pos = [], 1
    while pos < len(text):
        m = _LEG.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise JsonError(f"unsupported JSON path {text!r}")
            break
        quoted, plain, index, back = m.groups()
        if quoted is not None:
            legs.append(_unquote(quoted, text))
        elif plain is not None:
            legs.append(plain)
        elif index is not None:
            legs.append(ArrayIndex(int(index)))
        else:
            legs.append(ArrayIndex(int(back or 0), from_end=True))
        pos = m.end()
    return tuple(legs)


def _unquote(body: str, path: str) -> str:
    try:
        return json.loads('"' + body + '"')
    except ValueError as e:
        raise JsonError(f"bad member name in JSON path {path!r}") from e


def apply_diffs(doc: Any, diffs: JsonDiffs) -> Any:
    """The document after ``diffs`` (``doc`` is not changed). Raises DiffRejected where
    MySQL's ``apply_json_diffs`` rejects: the root path, a path that is not there (replace,
    remove, an insert's parent), an insert of a member that exists."""
    doc = _copy(doc)
    for diff in diffs.diffs:
        if not diff.path:
            raise DiffRejected("a JSON diff at the document root")
        parent = _seek(doc, diff.path[:-1])
        leg = diff.path[-1]
        if diff.operation == REPLACE:
            _replace(parent, leg, diff.value)
        elif diff.operation == INSERT:
            _insert(parent, leg, diff.value)
        else:
            _remove(parent, leg)
    return doc


def _copy(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _copy(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_copy(v) for v in doc]
    return doc


def _seek(doc: Any, legs: tuple) -> Any:
    """``seek_exact_path``: the value at ``legs``, no auto-wrapping."""
    for leg in legs:
        if isinstance(doc, list) and isinstance(leg, ArrayIndex) and leg.within(len(doc)):
            doc = doc[leg.position(len(doc))]
        elif isinstance(doc, dict) and isinstance(leg, str) and leg in doc:
            doc = doc[leg]
        else:
            raise DiffRejected("JSON diff path not found in the before image")
    return doc


def _replace(parent: Any, leg, value: Any) -> None:
    if isinstance(parent, list) and isinstance(leg, ArrayIndex) and leg.within(len(parent)):
        parent[leg.position(len(parent))] = value
    elif isinstance(parent, dict) and isinstance(leg, str) and leg in parent:
        parent[leg] = value
    else:
        raise DiffRejected("JSON diff replaces a value that is not there")


def _insert(parent: Any, leg, value: Any) -> None:
    if isinstance(parent, dict) and isinstance(leg, str):
        if leg in parent:
            raise DiffRejected("JSON diff inserts a member that exists")
        parent[leg] = value
    elif isinstance(parent, list) and isinstance(leg, ArrayIndex):
        parent.insert(leg.position(len(parent)), value)
    else:
        raise DiffRejected("JSON diff inserts into a value that is not a container")


def _remove(parent: Any, leg) -> None:
    if isinstance(parent, dict) and isinstance(leg, str) and leg in parent:
        del parent[leg]
    elif isinstance(parent, list) and isinstance(leg, ArrayIndex) and leg.within(len(parent)):
        del parent[leg.position(len(parent))]
    else:
        raise DiffRejected("JSON diff removes a value that is not there")
