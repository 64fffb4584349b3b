import datetime as dt
import decimal
import json

import pytest

from cachesync import speedups
from cachesync.schema import event as codec
from cachesync.schema import jsonfast
from cachesync.schema.errors import DecodeError
from cachesync.schema.event import ChangeEvent, Source, decode, encode

compiled_from_doc = getattr(speedups(), "event_from_doc", None)
NOT_BUILT = pytest.mark.skip(reason="cachesync._speedups is not built (no C compiler at "
                                    "`make install`) or CACHESYNC_NO_SPEEDUPS is set")


@pytest.fixture(autouse=True, params=["stdlib", "orjson"])
def parser(request):
    """Every codec test runs on the pure-Python parser and on the accelerator."""
    if request.param == "orjson" and jsonfast.orjson is None:
        pytest.fail("orjson is a dependency (pyproject.toml) but is not installed")
    jsonfast.use_stdlib(request.param == "stdlib")
    yield request.param
    jsonfast.use_stdlib(False)


@pytest.fixture(autouse=True, params=[
    "python", pytest.param("compiled", marks=[] if compiled_from_doc else [NOT_BUILT])])
def builder(request):
    """... and on the Python event builder and the compiled one (cachesync._speedups)."""
    codec.use_python(request.param == "python")
    yield request.param
    codec.use_python(False)


def make_event(**overrides):
    fields = dict(
        id="a" * 32, source=Source("binlog", "mariadb:1", "0-1-42", 1700000000.5, 3),
        db="shop", table="users", op="update", pk=(("id", 7),),
        before={"id": 7, "email": "old@example.com"}, after={"id": 7, "email": "new@example.com"},
        version=42 << 24 | 3)
    fields.update(overrides)
    return ChangeEvent(**fields)


@pytest.mark.parametrize("value", [
    None, 0, -1, 2**63 - 1, 2**64 - 1, -(2**63), 2**64, -(2**100), 10**30 + 1, 1.5, 1e300,
    float("nan") if False else 0.1, "", "ünïcødé ✓", b"\x00\xff\x10", decimal.Decimal("12.340"),
    dt.datetime(2024, 2, 29, 23, 59, 59, 123456), dt.date(2024, 1, 1), dt.time(12, 30),
    dt.timedelta(hours=-3, seconds=1), frozenset({"a", "b"}), {"json": [1, {"n": None}]},
])
def test_values_survive_the_round_trip(value):
    event = make_event(after={"id": 7, "v": value})
    assert decode(encode(event)).after["v"] == value


def test_round_trip_keeps_every_field():
    event = make_event(pk=(("tenant", "t1"), ("id", b"\x01\x02")), keys=("k:1", "k:2"),
                       extra={"aggregate": "user"})
    assert decode(encode(event)) == event


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfe not utf8", "invalid_json"),
    (b"{not json", "invalid_json"),
    (b"[1, 2]", "invalid_envelope"),
    (json.dumps({"v": 99, "id": "x"}).encode(), "unsupported_version"),
    (json.dumps({"id": "x"}).encode(), "unsupported_version"),
    (json.dumps({"v": 1, "id": "x"}).encode(), "invalid_envelope"),
    (encode(make_event()).replace(b'"op":"update"', b'"op":"upsert"'), "invalid_envelope"),
    (encode(make_event()).replace(b'"binlog"', b'"carrier-pigeon"'), "invalid_envelope"),
    (b"", "invalid_json"),
])
def test_bad_bytes_raise_decode_error_with_reason_and_raw(raw, reason):
    with pytest.raises(DecodeError) as info:
        decode(raw)
    assert info.value.reason == reason
    assert info.value.raw == raw


def test_out_of_range_floats_and_huge_integers_decode_exactly(parser):
    event = make_event(after={"id": 7, "inf": float("inf"), "big": 123456789012345678901234567890,
                              "neg": -(2**70)})
    after = decode(encode(event)).after
    assert after["inf"] == float("inf") and type(after["big"]) is int
    assert (after["big"], after["neg"]) == (123456789012345678901234567890, -(2**70))
    nan = decode(encode(make_event(after={"id": 7, "x": float("nan")}))).after["x"]
    assert nan != nan
    assert jsonfast.ACCELERATED == (parser == "orjson")


def test_row_change_builds_the_same_event_as_the_constructor():
    from cachesync.producer_outbox.decode.rows import TxnContext, row_change
    from cachesync.schema.ids import binlog_message_id, binlog_version
    ctx = TxnContext("mariadb:1", "0-1-9", 9, 1700000000.25)
    built = row_change(ctx, 4, "shop", "users", "update", "id", {"id": 1, "e": "a"}, {"id": 1, "e": "b"})
    assert built == ChangeEvent(binlog_message_id("mariadb:1", "0-1-9", 4),
                                Source("binlog", "mariadb:1", "0-1-9", 1700000000.25, 4),
                                "shop", "users", "update", (("id", 1),), {"id": 1, "e": "a"},
                                {"id": 1, "e": "b"}, binlog_version(9, 4))
    assert vars(built).keys() == vars(make_event()).keys() and hash(built.source)
    assert decode(encode(built)) == built


def test_the_builder_in_use_is_the_compiled_one_when_built(builder):
    assert codec.ACCELERATED == (builder == "compiled")


def _mutations(doc):
    """``doc`` and variants of it, each one field changed, added or removed."""
    odd = [None, True, 0, 1, -1, 2**70, 1.5, "", "x", "insert", "binlog", [], [1], {}, {"a": 1},
           {"$dec": "1.5"}, ["id", 1], [["id", 1]], [["id", {"$b64": "AA=="}]], ("t",)]
    yield doc
    for field in list(doc) + ["keys", "x", "extra"]:
        without = dict(doc)
        without.pop(field, None)
        yield without
        for value in odd:
            yield {**doc, field: value}
    for i in range(5):
        for value in odd:
            src = list(doc["src"])
            src[i] = value
            yield {**doc, "src": src}
    yield {**doc, "src": doc["src"][:4]}
    for value in odd:
        yield {**doc, "pk": [["id", value]]}
        yield {**doc, "pk": [[value, 1]]}
        yield {**doc, "a": {"id": 1, "v": value}}
        yield {**doc, "b": {"id": 1, "v": value}}


@pytest.mark.skipif(compiled_from_doc is None, reason="cachesync._speedups is not built or switched off")
def test_the_compiled_builder_takes_only_what_python_builds_identically(parser):
    """The compiled builder returns the event the Python builder builds, field for field and
    type for type, or None (then Python decides, with its own errors); never an event where
    Python raises."""
    built = 0
    for event in (make_event(), make_event(op="insert", before=None), make_event(
            op="delete", after=None, source=Source("outbox", "s", "p", 1.0, 0), pk=(("a", "x"), ("b", 2.5)))):
        for doc in _mutations(json.loads(encode(event))):
            try:
                expected = codec._from_doc(doc)
            except (KeyError, TypeError, ValueError):
                expected = None
            got = compiled_from_doc(doc, ChangeEvent, Source)
            if got is None:
                continue
            built += 1
            assert expected is not None, doc
            assert got == expected
            assert list(vars(got).items()) == list(vars(expected).items())
            assert [type(x) for x in vars(got).values()] == [type(x) for x in vars(expected).values()]
            assert [type(x) for x in vars(got.source).values()] == \
                [type(x) for x in vars(expected.source).values()]
            assert [type(v) for _, v in got.pk] == [type(v) for _, v in expected.pk]
            assert got.extra == {} and got.extra is not expected.extra
    assert built > 50                  # the plain shape is taken, not always left to Python


@pytest.mark.skipif(compiled_from_doc is None, reason="cachesync._speedups is not built or switched off")
def test_the_compiled_builder_leaves_a_dict_with_a_key_that_is_not_text_to_python(parser):
    """Only a JSON parser's dicts (text keys) are built in C: a key of another type could run
    its own __eq__ during a lookup and change the dict under the compiled builder."""
    built = {}

    class Collides:
        def __hash__(self):
            return hash("v")

        def __eq__(self, other):
            built.get("doc", {}).pop("src", None)
            return False

    doc = built["doc"] = {**json.loads(encode(make_event())), Collides(): 0}
    assert compiled_from_doc(doc, ChangeEvent, Source) is None
    image = {**json.loads(encode(make_event())), "a": {"id": 7, 1: "x"}}
    assert compiled_from_doc(image, ChangeEvent, Source) is None
    assert compiled_from_doc(json.loads(encode(make_event())), ChangeEvent, Source) is not None
