import pytest

from cachesync.consumer.core.dedup import ClaimState, decide
from cachesync.consumer.core.plan import plan_batch
from cachesync.schema.event import ChangeEvent, Source
from cachesync.schema.mapping import parse_mappings

MAPPINGS = parse_mappings({
    # explicit keys need an allow-list (issue 15: unchecked, any producer could delete any key)
    "shop.users": {"keys": ["user:{id}", "user:email:{email}"], "explicit_keys": ["explicit:{n}"]},
    "shop.orders": {"keys": ["order:{id}", "user:orders:{user_id}"]},
})


def ev(op, before=None, after=None, table="users", msg_id="m1", keys=()):
    image = after or before
    return ChangeEvent(msg_id, Source("binlog", "s", "0-1-1", 0.0), "shop", table, op,
                       (("id", image["id"]),), before, after, 1, keys=keys)


@pytest.mark.parametrize("event, expected", [
    (ev("insert", after={"id": 1, "email": "a@x"}), ["user:1", "user:email:a@x"]),
    (ev("delete", before={"id": 1, "email": "a@x"}), ["user:1", "user:email:a@x"]),
    (ev("update", before={"id": 1, "email": "a@x"}, after={"id": 1, "email": "b@x"}),
     ["user:1", "user:email:a@x", "user:email:b@x"]),
    (ev("update", before={"id": 1, "email": "a@x"}, after={"id": 2, "email": "a@x"}),
     ["user:1", "user:email:a@x", "user:2"]),
    (ev("insert", after={"id": 1, "email": None}), ["user:1"]),
    (ev("insert", after={"id": 5, "email": "e"}, keys=("explicit:1",)),
     ["explicit:1", "user:5", "user:email:e"]),
])
def test_keys_come_from_before_and_after_images(event, expected):
    plan = plan_batch([event], MAPPINGS)
    assert plan.keys == expected and not plan.poison


def test_null_key_columns_are_counted_not_fatal():
    plan = plan_batch([ev("insert", after={"id": 1, "email": None})], MAPPINGS)
    assert plan.null_skips == 1


def test_repeated_keys_in_a_batch_collapse():
    events = [ev("update", before={"id": 1, "email": "a"}, after={"id": 1, "email": "a"}, msg_id=f"m{i}")
              for i in range(5)]
    assert plan_batch(events, MAPPINGS).keys == ["user:1", "user:email:a"]


@pytest.mark.parametrize("event, reason", [
    (ev("insert", after={"id": 1}, table="ghosts"), "unknown_table"),
    (ev("insert", after={"id": 1}), "missing_column"),
])
def test_poison_is_set_aside_and_the_rest_planned(event, reason):
    good = ev("insert", after={"id": 9, "email": "g"}, msg_id="good")
    plan = plan_batch([event, good], MAPPINGS)
    assert [e.reason for _, e in plan.poison] == [reason]
    assert plan.keys == ["user:9", "user:email:g"]


O, D, B = ClaimState.OWNED, ClaimState.DONE, ClaimState.BUSY


@pytest.mark.parametrize("ids, states, apply, dup, busy", [
    (["a", "b"], {"a": O, "b": O}, ("a", "b"), (), ()),
    (["a", "b"], {"a": D, "b": O}, ("b",), ("a",), ()),
    (["a", "b"], {"a": B, "b": D}, (), ("b",), ("a",)),
    (["a"], {}, (), (), ("a",)),                       # unconfirmed claim: wait, never skip
    (["a", "a", "b"], {"a": O, "b": O}, ("a", "b"), (), ()),
])
def test_decide(ids, states, apply, dup, busy):
    d = decide(ids, states)
    assert (d.apply, d.duplicates, d.busy) == (apply, dup, busy)
    assert d.complete is (not busy)
