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


def _reference_keys(event, mapping):
    """The general path of event_keys for a delete-mode row: render each image with its
    templates, check the rendered keys, then each key once (before's first)."""
    from cachesync.consumer.core.plan import _keys, _render
    from cachesync.schema.trust import check_rendered
    before, nulls_b = _render(mapping, event.before)
    after, nulls_a = _render(mapping, event.after)
    check_rendered(event, before, after)
    return tuple(dict.fromkeys([*_keys(before), *_keys(after)])), nulls_b + nulls_a


def _renderers():
    from cachesync import speedups
    return [pytest.param(False, id="python"),
            pytest.param(True, id="c", marks=[] if speedups() else [pytest.mark.skip(
                reason="cachesync._speedups is not built or CACHESYNC_NO_SPEEDUPS is set")])]


@pytest.mark.parametrize("templates", [["t:{a}", "t:{b}:{a}", "t:b:{b}", "{c}"],
                                       ["t:{a}", "t:b:{b}", "{c}", "t:{a}"]],
                         ids=["a two-field template", "one-field templates"])
@pytest.mark.parametrize("compiled", _renderers())
def test_the_delete_mode_fast_path_plans_what_the_general_path_plans(templates, compiled,
                                                                    monkeypatch, request):
    """event_keys renders a delete-mode row without explicit keys of one-field templates in
    C when built; keys, NULL skips and the poison (its class and reason) must be the general
    path's."""
    import random
    from cachesync.consumer.core import plan
    from cachesync.consumer.core.plan import event_keys
    taken = []
    if not compiled:
        plan.use_python()
        request.addfinalizer(lambda: plan.use_python(False))
    else:
        compiled_keys = plan._compiled_keys

        def counting(*args):
            rendered = compiled_keys(*args)
            taken.append(rendered is not None)
            return rendered
        monkeypatch.setattr(plan, "_compiled_keys", counting)
    mappings = parse_mappings({"shop.t": {"keys": templates}})
    mapping = mappings.get("shop", "t")
    rng = random.Random(7)
    values = [None, 1, -7, 2**70, 1.5, "x", "cachesync:lease:k", "x", True, b"\x00", "a,b", "é"]
    for _ in range(3000):
        images = []
        for _ in range(2):
            image = {col: rng.choice(values) for col in "abc" if rng.random() > 0.05}
            images.append(image if rng.random() > 0.3 else None)
        before, after = images
        if before is None and after is None:
            continue
        op = "update" if before and after else ("delete" if before else "insert")
        event = ChangeEvent("m", Source("binlog", "s", "0-1-1", 0.0), "shop", "t", op,
                            (("a", 1),), before, after, 1)
        try:
            expected = _reference_keys(event, mapping)
        except Exception as e:          # poison: the same error, the same reason
            with pytest.raises(type(e)) as got:
                event_keys(event, mappings)
            assert str(got.value) == str(e)
            continue
        planned = event_keys(event, mappings)
        assert (planned.keys, planned.null_skips) == expected
    one_field = all("}:{" not in t for t in templates)
    assert (sum(taken) > 300) == (compiled and one_field)       # C did render, where it may
