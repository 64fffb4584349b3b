"""Rows at the edges, pure: partial row images, TIME2 bytes, MariaDB INET4/INET6/UUID text."""

from __future__ import annotations

import datetime as dt
import ipaddress

import pytest

from cachesync.producer_outbox.images import RowImages, absent_columns, known_images
from cachesync.producer_outbox.keycolumns import time2_delta
from cachesync.schema.keytext import inet4_text, inet6_text, time_text, uuid_text

NAMES = ["id", "email", "name", "bio"]


@pytest.mark.parametrize("bitmap, absent", [
    (b"\x0f", set()), (b"\xff", set()), (b"\x01", {"email", "name", "bio"}),
    (b"\x0b", {"name"}), (b"", set(NAMES)), (None, set())])
def test_absent_columns_read_the_bitmap(bitmap, absent):
    assert absent_columns(bitmap, NAMES) == absent


def test_minimal_update_carries_unchanged_columns_from_the_before_image():
    row = known_images("update", {"id": 3, "email": None, "name": None, "bio": None},
                       {"id": None, "email": "new@x", "name": None, "bio": None},
                       (frozenset({"email", "name", "bio"}), frozenset({"id", "name", "bio"})))
    assert row == RowImages({"id": 3}, {"id": 3, "email": "new@x"},
                            frozenset({"email", "name", "bio"}), frozenset({"name", "bio"}))
    assert row.absent() == {"before": ["bio", "email", "name"], "after": ["bio", "name"]}
    assert row.unknown({"id", "email"}) == {"email"}


def test_full_nodup_after_image_is_completed_exactly():
    before = {"id": 1, "email": "a@x", "name": "n", "bio": "b"}
    row = known_images("update", before, {"id": None, "email": None, "name": "m", "bio": None},
                       (frozenset(), frozenset({"id", "email", "bio"})))
    assert row.after == {"id": 1, "email": "a@x", "name": "m", "bio": "b"}
    assert row.unknown(NAMES) == frozenset()


@pytest.mark.parametrize("op, absent, before, after", [
    ("insert", (frozenset({"bio"}), frozenset({"bio"})), None, {"id": 1, "email": "e", "name": "n"}),
    ("delete", (frozenset({"bio"}), frozenset({"bio"})), {"id": 1, "email": "e", "name": "n"}, None),
])
def test_single_image_events_use_their_one_bitmap(op, absent, before, after):
    image = {"id": 1, "email": "e", "name": "n", "bio": None}
    row = known_images(op, image if before else None, image if after else None, absent)
    assert (row.before, row.after) == (before, after)
    assert row.unknown({"bio"}) == {"bio"}


def time2_bytes(value: dt.timedelta, fsp: int) -> tuple[int, int]:
    """The server's TIME2 bytes of ``value`` (my_time_packed_to_binary), split as the
    decoders read them: the 3-byte integer part and the fraction."""
    micro = abs(value) // dt.timedelta(microseconds=1)
    seconds, frac = divmod(micro, 1_000_000)
    hms = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
    packed = ((hms << 24) + frac) * (-1 if value < dt.timedelta(0) else 1)
    nbytes = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}[fsp]
    if nbytes == 3:
        whole = packed + (0x800000 << 24)
        return whole >> 24, whole & 0xFFFFFF
    intpart = packed >> 24                          # arithmetic: floor
    rest = packed - (intpart << 24)                 # 0 <= rest < 2**24
    if nbytes == 0:
        return intpart + 0x800000, 0
    if rest and packed < 0:                         # C's truncating % on a negative value
        rest -= 1 << 24
    unit = 10000 if nbytes == 1 else 100
    return intpart + 0x800000, (rest // unit) % (1 << 8 * nbytes)


@pytest.mark.parametrize("text, fsp", [
    ("-00:00:00.000001", 6), ("-00:00:01.000001", 6), ("-838:59:58.999999", 6),
    ("00:00:00.999999", 6), ("-00:00:00.00001", 5), ("-00:00:00.0001", 4),
    ("-01:02:03.9999", 4), ("-00:00:01.500", 3), ("-00:00:00.01", 2), ("-00:00:00.1", 1),
    ("-838:59:59", 0), ("00:00:00", 0), ("12:34:56.5", 1)])
def test_time2_reads_negative_fractions_as_the_server(text, fsp):
    sign = -1 if text.startswith("-") else 1
    h, m, s = text.lstrip("-").split(":")
    value = sign * dt.timedelta(hours=int(h), minutes=int(m), seconds=float(s))
    value = dt.timedelta(microseconds=round(value / dt.timedelta(microseconds=1)))
    assert time_text(time2_delta(*time2_bytes(value, fsp), fsp), fsp) == text


@pytest.mark.parametrize("address, text", [
    ("::1", "::1"), ("::", "::"), ("2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
    ("::ffff:1.2.3.4", "::ffff:1.2.3.4"), ("::1.2.3.4", "::1.2.3.4"),
    ("1:0:2:3:4:5:6:7", "1::2:3:4:5:6:7"),     # MariaDB shortens a single zero word too
    ("1:0:0:2:0:0:0:3", "1:0:0:2::3"), ("fe80::", "fe80::"), ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
])
def test_inet6_text_is_mariadbs(address, text):
    assert inet6_text(ipaddress.IPv6Address(address).packed) == text


def test_inet4_and_uuid_text():
    assert inet4_text(bytes([10, 0, 0, 1])) == "10.0.0.1"
    raw = bytes.fromhex("123e4567e89b12d3a456426655440000")
    assert uuid_text(raw) == "123e4567-e89b-12d3-a456-426655440000"
