import pytest

from cachesync.schema.ids import binlog_message_id, binlog_version, file_pos_ordinal, new_time_ordered_id
from cachesync.schema.keys import kafka_key


def test_binlog_ids_are_deterministic_and_distinct():
    a = binlog_message_id("mariadb:1", "0-1-42", 0)
    assert a == binlog_message_id("mariadb:1", "0-1-42", 0)
    others = {binlog_message_id("mariadb:1", "0-1-42", 1), binlog_message_id("mariadb:1", "0-1-43", 0),
              binlog_message_id("mariadb:2", "0-1-42", 0), binlog_message_id("mariadb:1", "f.000001:4", 0)}
    assert a not in others and len(others) == 4
    assert len(a) == 32 and int(a, 16) >= 0


@pytest.mark.parametrize("earlier, later", [
    ((41, 999), (42, 0)),   # next transaction beats any row of the previous one
    ((42, 0), (42, 1)),     # rows of one transaction in order
])
def test_versions_grow_with_commit_order(earlier, later):
    assert binlog_version(*earlier) < binlog_version(*later)


def test_version_rejects_rows_past_the_budget():
    with pytest.raises(ValueError):
        binlog_version(1, 1 << 24)


def test_file_pos_ordinal_orders_across_files():
    assert file_pos_ordinal("mysql-bin.000001", 2**31) < file_pos_ordinal("mysql-bin.000002", 4)
    with pytest.raises(ValueError):
        file_pos_ordinal("nosuffix", 4)


def test_time_ordered_ids_sort_by_time():
    assert new_time_ordered_id(1_000_000_000) < new_time_ordered_id(2_000_000_000)


@pytest.mark.parametrize("pk, expected", [
    ((("id", 7),), "shop.users:7"),
    ((("tenant", "t1"), ("id", 7)), "shop.users:t1,7"),
    ((("code", "a,b\\c"),), "shop.users:a\\,b\\\\c"),
    ((("uuid", b"\x00\xab"),), "shop.users:0x00ab"),
    ((("name", "zoë ✓"),), "shop.users:zoë ✓"),
])
def test_kafka_key_is_db_table_pk(pk, expected):
    assert kafka_key("shop", "users", pk) == expected


def test_composite_keys_with_commas_do_not_collide():
    assert kafka_key("d", "t", (("a", "x,y"), ("b", "z"))) != kafka_key("d", "t", (("a", "x"), ("b", "y,z")))
