"""MySQL binary JSON -> the server's text, and partial JSON diffs (producer_outbox.decode.mysqljson).

Recorded bytes come from the shared folder's recorded/mysql-binary-json.json (sources in its
README). Cases marked
"built" are bytes made here from MySQL's documented binary format (json_binary.h,
json_diff.cc) because no recording of them exists; the expected text follows
``Json_wrapper::to_string`` in sql-common/json_dom.cc.
"""

from __future__ import annotations

import base64
import json
import struct

import pytest

from cachesync.producer_outbox.decode import mysqljson as mj
from tests.support.shared import recorded

# recorded from real MySQL servers (shared recorded/, sources in its README); a module
# without the shared folder skips (fails under CI)
_RECORDED = recorded("mysql-binary-json.json")
DOUBLE_VECTORS = _RECORDED["DOUBLE_VECTORS"]
RECORDED_A_1234 = _RECORDED["RECORDED_A_1234"]
RECORDED_DOCS = _RECORDED["RECORDED_DOCS"]


@pytest.mark.parametrize("data, text", RECORDED_DOCS, ids=[t[:40] for _, t in RECORDED_DOCS])
def test_recorded_documents_print_as_the_server_prints_them(data, text):
    assert mj.column_text(data) == text


def test_recorded_object_of_go_mysql_is_the_documented_layout():
    """The recorded object is the one ``small_object`` builds from the documented layout
    (one member, its INT16 inlined), and prints as such."""
    (value,) = struct.unpack_from("<h", RECORDED_A_1234, len(RECORDED_A_1234) - 3)
    built = small_object([("a", struct.pack("<h", value))])
    assert RECORDED_A_1234 == built
    assert mj.column_text(built) == '{"a": %d}' % value


def double(value: float) -> bytes:
    return bytes([mj.DOUBLE]) + struct.pack("<d", value)


@pytest.mark.parametrize("value, text", DOUBLE_VECTORS, ids=[t for _, t in DOUBLE_VECTORS])
def test_doubles_print_as_mysql_8_0_45_printed_them(value, text):
    assert mj.column_text(double(float(value))) == text
    assert float(text) == float(value)         # the text reads back to the same double


def test_double_zero_and_negative_zero_keep_their_point():
    """my_gcvt writes "0" / "-0" (dtoa keeps the sign bit); json_dom appends ".0"."""
    assert mj.column_text(double(0.0)) == "0.0"
    assert mj.column_text(double(-0.0)) == "-0.0"
    assert mj.column_text(double(1e100)) == "1e100"


def string(text: str) -> bytes:
    """Built: a STRING document (type 0x0C, 7-bit variable length, UTF-8 bytes)."""
    raw = text.encode("utf-8")
    length, n = b"", len(raw)
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return bytes([mj.STRING]) + length + raw


@pytest.mark.parametrize("value, text", [
    ('a"b\\c', r'"a\"b\\c"'),
    ("\b\f\n\r\t", r'"\b\f\n\r\t"'),
    ("\x00\x01\x1e\x1f", r'"\u0000\u0001\u001e\u001f"'),
    ("/ \x7f é 漢 😀", '"/ \x7f é 漢 😀"'),      # '/', DEL and non-ASCII as they are
    ("x" * 200, '"' + "x" * 200 + '"'),            # a two-byte length
])
def test_strings_are_escaped_as_double_quote_escapes(value, text):
    assert mj.column_text(string(value)) == text


def small_object(members: list[tuple[str, bytes]]) -> bytes:
    """Built: a SMALL_OBJECT of (key, inline INT16 value) members, keys in the given order."""
    count = len(members)
    header = 4 + count * 4 + count * 3
    keys = b"".join(k.encode() for k, _ in members)
    size = header + len(keys)
    body, at = struct.pack("<HH", count, size), header
    for key, _ in members:
        body += struct.pack("<HH", at, len(key.encode()))
        at += len(key.encode())
    for _, value in members:
        body += bytes([mj.INT16]) + value
    return bytes([mj.SMALL_OBJECT]) + body + keys


def test_object_members_print_in_the_servers_key_order():
    """Json_key_comparator: shorter keys (in bytes) first, then bytewise; a document whose
    members were stored in another order (as after a partial insert) prints the same."""
    one = struct.pack("<h", 1)
    doc = small_object([("é", one), ("b", one), ("aa", one), ("a", one), ("B", one)])
    assert mj.column_text(doc) == '{"B": 1, "a": 1, "b": 1, "aa": 1, "é": 1}'


def test_large_containers_built_from_the_documented_layout():
    """Built (json_binary.h): LARGE_OBJECT / LARGE_ARRAY use 4-byte counts and offsets and
    hold INT32 inline."""
    body = (struct.pack("<II", 2, 34) + struct.pack("<IH", 30, 1) + struct.pack("<IH", 31, 1)
            + bytes([mj.INT32]) + struct.pack("<i", -70000)
            + bytes([mj.STRING]) + struct.pack("<I", 32) + b"ab" + b"\x01x")
    assert mj.column_text(bytes([mj.LARGE_OBJECT]) + body) == '{"a": -70000, "b": "x"}'
    array = (struct.pack("<II", 3, 25) + bytes([mj.INT16, 1, 0, 0, 0])
             + bytes([mj.STRING]) + struct.pack("<I", 23) + bytes([mj.LITERAL, 1, 0, 0, 0])
             + b"\x01x")
    assert mj.column_text(bytes([mj.LARGE_ARRAY]) + array) == '[1, "x", true]'


def opaque(field_type: int, payload: bytes) -> bytes:
    """Built: an OPAQUE document (type 0x0F, SQL field type, variable length, payload)."""
    assert len(payload) < 128
    return bytes([mj.OPAQUE, field_type, len(payload)]) + payload


def packed_datetime(y, mo, d, h, mi, s, micro=0) -> bytes:
    """Built: TIME_to_longlong_datetime_packed, little-endian."""
    return struct.pack("<q", ((((y * 13 + mo) << 5 | d) << 17 | h << 12 | mi << 6 | s) << 24)
                       + micro)


def packed_time(h, mi, s, micro=0, negative=False) -> bytes:
    value = ((h << 12 | mi << 6 | s) << 24) + micro
    return struct.pack("<q", -value if negative else value)


@pytest.mark.parametrize("field_type, payload, text", [
    (mj.TYPE_DATETIME, packed_datetime(2024, 1, 15, 10, 30, 45, 123456),
     '"2024-01-15 10:30:45.123456"'),
    (mj.TYPE_TIMESTAMP, packed_datetime(2038, 1, 19, 3, 14, 7), '"2038-01-19 03:14:07.000000"'),
    (mj.TYPE_DATETIME, bytes(8), '"0000-00-00 00:00:00.000000"'),
    (mj.TYPE_DATE, packed_datetime(2024, 2, 29, 0, 0, 0), '"2024-02-29"'),
    (mj.TYPE_DATE, bytes(8), '"0000-00-00"'),
    (mj.TYPE_TIME, packed_time(838, 59, 59), '"838:59:59.000000"'),
    (mj.TYPE_TIME, packed_time(0, 0, 0, 1, negative=True), '"-00:00:00.000001"'),
    (mj.TYPE_TIME, bytes(8), '"00:00:00.000000"'),
    # DECIMAL(5,2) -123.45: precision, scale, then the packed digits, complemented
    (mj.TYPE_NEWDECIMAL, bytes([5, 2]) + bytes(b ^ 0xFF for b in b"\x80\x7b\x2d"), "-123.45"),
    (mj.TYPE_NEWDECIMAL, bytes([4, 2, 0x81, 0x0A]), "1.10"),     # the scale is kept
    (mj.TYPE_NEWDECIMAL, bytes([3, 0, 0x80, 0x00]), "0"),
    (13, b"\x07\xe8", '"base64:type13:B+g="'),                           # YEAR: opaque
])
def test_opaque_values_print_as_the_server_prints_them(field_type, payload, text):
    assert mj.column_text(opaque(field_type, payload)) == text


def test_long_opaque_values_wrap_their_base64_every_76_characters():
    """MySQL's base64_encode puts a newline after 76 characters; to_string escapes it."""
    payload = bytes(range(100))
    encoded = base64.b64encode(payload).decode()
    data = bytes([mj.OPAQUE, 252, 100]) + payload
    assert mj.column_text(data) == ('"base64:type252:' + encoded[:76] + "\\n" + encoded[76:]
                                    + '"')


@pytest.mark.parametrize("data", [
    bytes([0x0D, 1]),                               # no such type
    bytes([mj.SMALL_OBJECT, 1, 0, 40, 0]),           # size beyond the document
    bytes([mj.STRING, 5]) + b"abc",                  # string beyond the document
    bytes([mj.STRING, 2]) + b"\xff\xfe",             # not UTF-8
    bytes([mj.LITERAL, 9]),                          # no such literal
    bytes([mj.INT64, 1, 2]),                         # truncated scalar
    bytes([mj.DOUBLE]) + struct.pack("<d", float("inf")),
    opaque(mj.TYPE_NEWDECIMAL, b"\x05"),
])
def test_bytes_that_are_not_binary_json_raise_json_error(data):
    with pytest.raises(mj.JsonError):
        mj.column_text(data)


# -- partial updates ------------------------------------------------------------------------

def diff(operation: int, path: str, value: bytes | None = None) -> bytes:
    """Built (Json_diff::write_binary): operation byte, net-length path, net-length value."""
    raw = path.encode()
    out = bytes([operation, len(raw)]) + raw
    return out if value is None else out + bytes([len(value)]) + value


INT = lambda n: bytes([mj.INT16]) + struct.pack("<h", n)    # noqa: E731
# a recorded object with a string member "a", a member "c" and an array member "bc" of two
BEFORE_DOC = RECORDED_DOCS[4]
BEFORE = mj.decode(BEFORE_DOC[0])
ARRAY_DOC = RECORDED_DOCS[3]            # a recorded array


def edited(edit) -> str:
    """MySQL's text of the before document after ``edit`` (a function of the document as
    Python values): members keep their order (a new member's key sorts last here), ", " and
    ": " separate."""
    return json.dumps(edit(json.loads(BEFORE_DOC[1])))


@pytest.mark.parametrize("diffs, edit", [
    ([diff(mj.REPLACE, "$.a", INT(7))], lambda d: {**d, "a": 7}),
    ([diff(mj.INSERT, "$.zz", ARRAY_DOC[0])], lambda d: {**d, "zz": json.loads(ARRAY_DOC[1])}),
    ([diff(mj.REMOVE, "$.bc[0]")], lambda d: {**d, "bc": d["bc"][1:]}),
    ([diff(mj.INSERT, "$.bc[9]", INT(3)), diff(mj.REPLACE, "$.bc[last]", INT(4)),
      diff(mj.REMOVE, "$.c")],
     lambda d: {k: (v + [4] if k == "bc" else v) for k, v in d.items() if k != "c"}),
    ([diff(mj.INSERT, "$.bc[last]", INT(0))],
     lambda d: {**d, "bc": d["bc"][:-1] + [0] + d["bc"][-1:]}),
    ([diff(mj.INSERT, '$."a b"', string("q\n"))], lambda d: {**d, "a b": "q\n"}),
    ([], lambda d: d),
])
def test_diff_vectors_apply_as_the_replica_applies_them(diffs, edit):
    parsed = mj.decode_diffs(b"".join(diffs))
    assert len(parsed.diffs) == len(diffs)
    assert mj.to_text(mj.apply_diffs(BEFORE, parsed)) == edited(edit)
    assert mj.to_text(BEFORE) == BEFORE_DOC[1]          # the before document is kept


@pytest.mark.parametrize("diffs", [
    [diff(mj.REPLACE, "$.nope", INT(1))],       # replace what is not there
    [diff(mj.INSERT, "$.a", INT(1))],           # insert a member that exists
    [diff(mj.REMOVE, "$.bc[5]")],               # remove beyond the array
    [diff(mj.INSERT, "$.a.b", INT(1))],         # insert into a scalar
    [diff(mj.REPLACE, "$", INT(1))],            # the root is never a diff
])
def test_diffs_the_replica_rejects_are_rejected(diffs):
    with pytest.raises(mj.DiffRejected):
        mj.apply_diffs(BEFORE, mj.decode_diffs(b"".join(diffs)))


@pytest.mark.parametrize("data", [
    bytes([7, 2]) + b"$a",                        # no such operation
    bytes([mj.REPLACE, 9]) + b"$.a",              # path beyond the vector
    diff(mj.REPLACE, "$.a"),                      # replace without its value
    diff(mj.REMOVE, "$.a[*]"),                    # a wildcard is never a diff path
    diff(mj.REMOVE, "a"),                         # not a path
])
def test_malformed_diff_vectors_raise_json_error(data):
    with pytest.raises(mj.JsonError):
        mj.decode_diffs(data)
