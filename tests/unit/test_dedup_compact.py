"""The compact MySQL dedup layout's pure parts: record keys and the window plan."""

from __future__ import annotations

import math

import pytest

from cachesync.consumer.adapters.mysql_dedup_compact import (
    WINDOWS_AHEAD, CompactMySQLDedupStore, boundary, commit_ms, namespace_bytes, new_token, record_id, window_end,
    windows_to_add, windows_to_drop)
from cachesync.runtime.mysql import MySQLParams
from cachesync.schema.errors import FatalError
from tests.support.fakedb import FakeConnection


@pytest.mark.parametrize("ts, ms", [
    (1_700_000_000.1234, 1_700_000_000_123), (0.0, 0), (-5.0, 0), (None, 0),
    (math.nan, 0), (math.inf, 0), (1e15, (1 << 48) - 1)])
def test_commit_ms_keeps_times_and_sends_non_times_to_zero(ts, ms):
    assert commit_ms(ts) == ms


def test_record_ids_sort_by_commit_time_then_hash_and_depend_on_both():
    a, b = record_id("m1", 1000.0), record_id("m1", 1000.001)
    assert len(a) == 16 and a < b and a[6:] == b[6:]
    assert record_id("m1", 1000.0) == a and record_id("m2", 1000.0) != a


def test_a_token_is_never_older_than_its_newest_commit():
    assert new_token(5_000, now_ms=1_000)[:6] == (5_000).to_bytes(6, "big")
    assert new_token(5_000, now_ms=9_000)[:6] == (9_000).to_bytes(6, "big")


def test_boundary_is_the_window_end_as_a_key_prefix():
    assert boundary(1) == "0x0000000003e8" + "00" * 10
    assert window_end("w3600") == 3600 and window_end("pmax") is None


@pytest.mark.parametrize("ends, now, retention, want", [
    # the window still within the retention, the current one and WINDOWS_AHEAD more
    ((), 7_200.5, 100, [7_200 + 3600 * i for i in range(WINDOWS_AHEAD + 2)]),
    ((10_800, 14_400, 18_000, 21_600), 7_300, 100, []),
    ((10_800, 14_400, 18_000, 21_600), 11_000, 100, [25_200]),      # time moved on: one more
    # stopped for long: nothing older than the retention is created
    ((3_600,), 360_000, 7_200, [356_400 + 3600 * i for i in range(WINDOWS_AHEAD + 3)]),
])
def test_windows_to_add(ends, now, retention, want):
    assert windows_to_add(ends, now, 3600, retention) == want


def test_windows_to_drop_are_those_wholly_past_the_retention():
    assert windows_to_drop([7_200, 3_600, 10_800], now_s=14_000, retention_s=3_600) == [3_600,
                                                                                        7_200]
    assert windows_to_drop([7_200], now_s=10_799, retention_s=3_600) == []


def test_long_namespaces_are_hashed_to_fit():
    assert namespace_bytes("group") == b"group"
    long = namespace_bytes("g" * 100)
    assert len(long) <= 64 and long != namespace_bytes("g" * 101)


class _Conn(FakeConnection):
    """A connection an account lacking the compact layout's grants opens (no server)."""
    open, closed = True, False

    def execute(self, sql, args=None):
        self.last = sql

    def fetchone(self):
        return ("app",)

    def fetchall(self):
        return [("GRANT SELECT, INSERT, UPDATE, DELETE ON `app`.* TO `c`@`%`",)]

    def commit(self):
        pass

    def close(self):
        self.closed = True


def test_a_failed_grant_check_closes_the_connection_it_ran_on():
    opened = []

    class Params(MySQLParams):
        def connect(self, **overrides):
            opened.append(_Conn())
            return opened[-1]
    store = CompactMySQLDedupStore(Params("h", 1, "c", "pw"), "ns")
    for _attempt in range(2):       # each start-up attempt opens and closes its own
        with pytest.raises(FatalError, match="compact: the account needs"):
            store.claim(["m1"], 5.0)
    assert len(opened) == 2 and all(c.closed for c in opened)
