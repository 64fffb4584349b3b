"""Pre-fill of delete-mode tables (consumer.prefill) on the in-memory cache: the config that
allows it, and read_through's protocol per chunk (leases, a second read, lease-checked fills)."""

from __future__ import annotations

import json

import pytest

from cachesync.consumer.adapters.memory import MemoryCache
from cachesync.consumer.prefill import prefill_chunk
from cachesync.consumer.snapshot import Watermark
from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import parse_mappings

WATERMARK = Watermark("0-1-100", 100, 0.0)
PK = ("id",)


def users(**spec):
    return parse_mappings({"app.users": {"keys": ["user:{id}", "user:email:{email}"],
                                         "prefill": "json", **spec}}).get("app", "users")


@pytest.mark.parametrize("spec, error", [
    ({"mode": "update", "prefill": "json"}, "only applies to mode: delete"),
    ({"prefill": "xml"}, "expected one of"),
    ({"prefill_columns": ["id"]}, "only applies with prefill"),
    ({"prefill": "json", "prefill_columns": []}, "non-empty list"),
    ({"explicit_keys": ["user:{id}"], "prefill": "json"}, "no key template"),
])
def test_prefill_is_refused_where_no_value_can_be_rendered_or_update_mode_writes(spec, error):
    entry = {"keys": ["user:{id}"], **spec}
    if "explicit_keys" in spec:
        del entry["keys"]
    with pytest.raises(ConfigError, match=error):
        parse_mappings({"app.users": entry})


def test_the_prefill_value_is_rendered_as_update_mode_renders_it():
    m = users(prefill="hash", prefill_columns=["id", "name"], double_delete=2)
    assert (m.mode, m.prefill, m.double_delete_s) == ("delete", "hash", 2.0)
    twin = m.prefill_mapping
    assert (twin.mode, twin.value_format, twin.value_columns) == ("update", "hash", ("id", "name"))
    assert users(prefill=None).prefill_mapping is None


def rows(*ids, email="u{}@x", name="n{}"):
    return [{"id": i, "email": email.format(i), "name": name.format(i)} for i in ids]


class Table:
    """The rows a second read finds, and what happens meanwhile (``during``)."""

    def __init__(self, found, during=lambda: None):
        self.found, self.during, self.asked = {r["id"]: r for r in found}, during, []

    def __call__(self, keys):
        self.asked.append(list(keys))
        self.during()
        return [self.found[k[0]] for k in keys if k[0] in self.found]


def test_missing_keys_are_filled_from_the_second_read_and_others_left_alone():
    cache, table = MemoryCache(), Table(rows(1, 2, 3, 4))
    cache.data["user:1"] = "the application's"
    cache.leases["user:email:u2@x"] = "another reader"
    summary = prefill_chunk(cache, table, rows(1, 2, 3, 4), users(), PK, WATERMARK)
    assert table.asked == [[(1,), (2,), (3,), (4,)]]    # one second read, after the leases
    assert json.loads(cache.data["user:3"]) == {"id": 3, "email": "u3@x", "name": "n3"}
    assert cache.data["user:1"] == "the application's" and "user:email:u2@x" not in cache.data
    assert cache.ttls["user:3"] == 3600 and cache.leases == {"user:email:u2@x": "another reader"}
    assert (summary.rows, summary.keys, summary.written, summary.refused, summary.kept) == \
        (4, 8, 6, 0, 2)


def test_the_second_read_wins_over_the_first_and_a_gone_row_is_not_filled():
    cache = MemoryCache()
    table = Table(rows(1) + rows(2, email="new{}@x", name="changed"))     # 3 deleted, 2 updated
    summary = prefill_chunk(cache, table, rows(1, 2, 3), users(), PK, WATERMARK)
    assert set(cache.data) == {"user:1", "user:email:u1@x", "user:2"}
    assert json.loads(cache.data["user:2"])["name"] == "changed"
    assert not cache.leases                   # the unused ones given back
    assert (summary.written, summary.refused, summary.kept) == (3, 0, 3)


def test_an_invalidation_after_the_second_read_refuses_the_fill():
    cache = MemoryCache()
    table = Table(rows(1, 2), during=lambda: cache.delete(["user:2", "user:email:u2@x"]))
    summary = prefill_chunk(cache, table, rows(1, 2), users(), PK, WATERMARK)
    assert set(cache.data) == {"user:1", "user:email:u1@x"}
    assert (summary.written, summary.refused, summary.kept) == (2, 2, 0)


def test_a_dry_run_renders_and_touches_nothing_and_an_oversized_value_is_kept_out():
    cache, table = MemoryCache(), Table(rows(1))
    summary = prefill_chunk(cache, table, rows(1, 2), users(), PK, WATERMARK, dry_run=True)
    assert (summary.rows, summary.keys, summary.written) == (2, 4, 0) and not table.asked
    big = rows(1, name="x" * 100)
    summary = prefill_chunk(cache, Table(big), big, users(max_value_bytes=50), PK, WATERMARK)
    assert not cache.data and not cache.leases and (summary.keys, summary.kept) == (2, 2)
