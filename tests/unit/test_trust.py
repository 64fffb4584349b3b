"""The trust boundary (cachesync.schema.trust): reserved keys and explicit-key allow-lists."""

from __future__ import annotations

import logging

import pytest

from cachesync.consumer.adapters.memory import MemoryCache, MemoryDeadLetters, MemoryDedupStore
from cachesync.consumer.applier import Applier
from cachesync.consumer.core.plan import plan_batch
from cachesync.schema.errors import ConfigError
from cachesync.schema.event import ChangeEvent, Source, encode
from cachesync.schema.mapping import parse_mappings
from cachesync.schema.trust import KEY_NOT_ALLOWED, RESERVED_KEY, KeyPattern
from tests.support.events import record

MAPPINGS = parse_mappings({
    "app.users": {"keys": ["user:{id}", "name:{name}"], "explicit_keys": ["page:home"]},
    "app.leaderboard": {"explicit_keys": ["leaderboard:{board}", "page:*"]},
    "app.plain": {"keys": ["plain:{id}"]},
    "app.raw": {"keys": ["{key}"]},                       # a bare field renders any text
    "app.counts": {"keys": ["{id}"], "mode": "update"},
})


def ev(table: str, after: dict | None = None, keys: tuple = (), msg_id: str = "m1",
       db: str = "app") -> ChangeEvent:
    return ChangeEvent(msg_id, Source("outbox", "s", "1", 0.0), db, table, "update",
                       (("id", 1),), None, after, 1, keys=keys)


@pytest.mark.parametrize("pattern, key, matches", [
    ("leaderboard:{board}", "leaderboard:7", True),
    ("leaderboard:{board}", "leaderboard:7:x", False),     # a field is one segment
    ("leaderboard:{board}", "leaderboard:", False),
    ("page:*", "page:a:b", True),
    ("page:*", "pages:a", False),
    ("page:home", "page:home", True),
    ("page:home", "page:homeX", False),
    ("a.b:{x}", "aXb:1", False),                            # literal text is literal
    ("user:{42}", "user:{42}", True),                       # a hash tag is literal text
])
def test_key_patterns(pattern, key, matches):
    assert KeyPattern.parse(pattern).matches(key) is matches


@pytest.mark.parametrize("event", [
    ev("users", {"id": 1, "name": "x"}, keys=("cachesync:ver:user:1",)),
    ev("leaderboard", keys=("cachesync:lease:page:x",)),
    ev("raw", {"key": "cachesync:dedup:x"}),                    # rendered from a template
    ev("counts", {"id": "cachesync:ver:1"}),                    # update mode: written key
    ev("nomapping", keys=("cachesync:x",)),
])
def test_reserved_keys_are_poison(event):
    plan = plan_batch([event], MAPPINGS)
    assert not plan.events
    [(_, error)] = plan.poison
    assert error.reason == RESERVED_KEY and "cachesync:" in error.detail
    assert not any(k.startswith("cachesync:") for ep in plan.salvaged for k in ep.keys)


@pytest.mark.parametrize("event", [
    ev("users", {"id": 1, "name": "x"}, keys=("session:42",)),   # no pattern matches
    ev("plain", {"id": 1}, keys=("plain:2",)),                   # no explicit_keys: none allowed
    ev("nomapping", keys=("anything:1",)),                       # no mapping: none allowed
    ev("leaderboard", keys=("leaderboard:1", "leaderboard:1:x")),
], ids=["unmatched", "no-allow-list", "no-mapping", "one-of-two"])
def test_explicit_keys_outside_the_allow_list_are_poison(event):
    plan = plan_batch([event], MAPPINGS)
    [(_, error)] = plan.poison
    assert error.reason == KEY_NOT_ALLOWED and event.qualified_table in error.detail


def test_allowed_explicit_keys_are_invalidated_with_the_rendered_ones():
    plan = plan_batch([ev("users", {"id": 1, "name": "x"}, keys=("page:home",)),
                       ev("leaderboard", keys=("leaderboard:3", "page:a:b"), msg_id="m2")],
                      MAPPINGS)
    assert not plan.poison
    assert plan.keys == ["page:home", "user:1", "name:x", "leaderboard:3", "page:a:b"]


def test_a_refused_event_still_invalidates_what_the_table_allows():
    bad = ev("users", {"id": 1, "name": "x"}, keys=("page:home", "session:9", "cachesync:ver:a"))
    plan = plan_batch([bad], MAPPINGS)
    [salvaged] = plan.salvaged
    assert salvaged.keys == ("page:home", "user:1", "name:x")


def test_the_applier_dead_letters_warns_and_counts(caplog):
    cache = MemoryCache()
    cache.data.update({"cachesync:ver:user:1": b"9", "session:9": b"s", "user:1": b"u"})
    dlq = MemoryDeadLetters()
    applier = Applier(cache, MAPPINGS, dead_letters=dlq, dedup=MemoryDedupStore())
    bad = [record(0, encode(ev("users", {"id": 1, "name": "x"}, keys=("cachesync:ver:user:1",)))),
           record(1, encode(ev("plain", {"id": 2}, keys=("session:9",), msg_id="m2")))]
    with caplog.at_level(logging.WARNING):
        result = applier.apply(bad)
    assert [reason for _, reason, _ in dlq.sent] == [RESERVED_KEY, KEY_NOT_ALLOWED]
    assert not result.applied
    assert cache.data.keys() == {"cachesync:ver:user:1", "session:9"}    # user:1 salvaged
    counts = applier.tables.snapshot()
    assert counts[("untrusted_keys", "app.users", RESERVED_KEY)] == 1
    assert counts[("untrusted_keys", "app.plain", KEY_NOT_ALLOWED)] == 1
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("app.users" in m and RESERVED_KEY in m for m in warned)
    assert any("app.plain" in m and KEY_NOT_ALLOWED in m for m in warned)


@pytest.mark.parametrize("spec, message", [
    ({"keys": ["cachesync:{id}"]}, "keys under 'cachesync:'"),
    ({"keys": ["u:{id}"], "explicit_keys": ["cachesync:*"]}, "keys under 'cachesync:'"),
    ({"keys": ["u:{id}"], "explicit_keys": "page:*"}, "expected a list of key patterns"),
    ({"keys": ["u:{id}"], "explicit_keys": [""]}, "must be a non-empty string"),
    ({}, "keys: expected a non-empty list"),
    ({"explicit_keys": []}, "keys: expected a non-empty list"),
])
def test_mapping_errors(spec, message):
    with pytest.raises(ConfigError) as info:
        parse_mappings({"d.t": spec}, "app.yaml")
    assert message in str(info.value)


def test_an_entry_with_only_explicit_keys_is_an_aggregate_type():
    table = MAPPINGS.get("app", "leaderboard")
    assert table.keys == () and [p.text for p in table.explicit_keys] == ["leaderboard:{board}",
                                                                           "page:*"]


def test_lint_flags_templates_that_can_render_reserved_keys():
    from cachesync.explain import lint
    tables = parse_mappings({"d.t": {"keys": ["{name}", "c{code}", "x:{name}", "{id}:x"]}})
    types = {"d.t": {"name": ("varchar", "utf8mb4_bin"), "code": ("varchar", "utf8mb4_bin"),
                     "id": ("bigint", None)}}
    found = [f for f in lint(tables, types=types) if f.check == "reserved-key"]
    assert [f.message.split(":", 1)[0] for f in found] == ["'{name}'", "'c{code}'"]
    assert all("dead-letters" in f.message for f in found)
    # offline (key columns assumed integer) an integer cannot begin with "cachesync:"
    assert not [f for f in lint(tables) if f.check == "reserved-key"]
