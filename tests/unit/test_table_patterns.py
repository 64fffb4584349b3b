"""Table patterns and column filters in the mapping (pure)."""

import pytest
import yaml

from cachesync.consumer.core.plan import plan_batch
from cachesync.consumer.core.tally import UNWATCHED, TableTally
from cachesync.producer_outbox.binlog.statements import table_changes
from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import AmbiguousTableError, parse_mappings
from cachesync.schema.patterns import TablePattern, globs_overlap
from cachesync.explain import make_event


@pytest.mark.parametrize("pattern, db, table, expected", [
    ("app.user_*", "app", "user_00", True),
    ("app.user_*", "app", "users", False),
    ("app.user_*", "other", "user_00", False),
    ("tenant_*.orders", "tenant_17", "orders", True),
    ("app.user_[0-9][0-9]", "app", "user_07", True),
    ("app.user_[0-9][0-9]", "app", "user_7x", False),
    ("app.user_[!0]?", "app", "user_17", True),
    ("app.user_[!0]?", "app", "user_07", False),
    ("app.user_?", "app", "user_.", False),          # ? never matches the separator
    (r"re:app\.user_\d{2}", "app", "user_15", True),
    (r"re:app\.user_\d{2}", "app", "user_150", False),
    ("re:app.user_1", "appXuser_1", "", False),        # full match of db.table
    # online schema change shadow tables are never matched by a pattern
    ("app.*", "app", "_user_00_gho", False),
    ("app.*", "app", "_user_00_ghc", False),
    ("app.*", "app", "_user_00_del", False),
    ("app.*", "app", "_user_00_new", False),
    ("app.*", "app", "_user_00_old", False),
    ("app.*", "app", "user_00_new", True),             # no leading underscore: a real table
    ("App.User_*", "app", "user_00", False),            # case-sensitive, as MySQL on Linux
])
def test_pattern_matches(pattern, db, table, expected):
    assert TablePattern.parse(pattern).matches(db, table) is expected


@pytest.mark.parametrize("a, b, overlap", [
    ("app.user_*", "app.*_00", True),
    ("app.user_*", "app.order_*", False),
    ("app.user_[0-4]*", "app.user_[5-9]*", False),
    ("app.user_[0-4]*", "app.user_?5", True),
    ("tenant_*.orders", "*.orders", True),
    ("tenant_*.orders", "tenant_*.items", False),
    ("a*.t", "*b.t", True),
])
def test_glob_overlap(a, b, overlap):
    assert globs_overlap(TablePattern.parse(a), TablePattern.parse(b)) is overlap


def test_two_globs_on_one_table_is_a_load_error_naming_both():
    with pytest.raises(ConfigError, match=r"'app.user_\*' and 'app.\*_00'"):
        parse_mappings({"app.user_*": {"keys": ["a:{id}"]}, "app.*_00": {"keys": ["b:{id}"]}})


def test_two_expressions_on_one_table_fail_when_it_is_looked_up():
    mappings = parse_mappings({r"re:app\.user_\d+": {"keys": ["a:{id}"]},
                               r"re:app\.user_0\d": {"keys": ["b:{id}"]}})
    assert mappings.get("app", "user_10").keys[0].text == "a:{id}"
    with pytest.raises(AmbiguousTableError, match=r"app.user_01 matches two"):
        mappings.get("app", "user_01")


def test_exact_names_win_and_templates_take_db_and_table():
    mappings = parse_mappings({"app.user_*": {"keys": ["user:{_table}:{id}"]},
                               "app.user_99": {"keys": ["vip:{id}"]},
                               "tenant_*.orders": {"keys": ["order:{_db}:{id}"]}})
    assert [t.text for t in mappings.get("app", "user_03").keys] == ["user:user_03:{id}"]
    assert mappings.get("app", "user_03").pattern == "app.user_*"
    assert [t.text for t in mappings.get("app", "user_99").keys] == ["vip:{id}"]
    assert [t.text for t in mappings.get("tenant_7", "orders").keys] == ["order:tenant_7:{id}"]
    assert mappings.get("app", "_user_03_gho") is None


@pytest.mark.parametrize("spec, error", [
    ({"keys": ["cfg:{_table}"]}, "names no column besides"),
    ({"keys": ["a:{id}"], "watch_columns": ["x"], "ignore_columns": ["y"]}, "not both"),
    ({"keys": ["a:{id}"], "watch_columns": []}, "non-empty list"),
])
def test_bad_entries(spec, error):
    with pytest.raises(ConfigError, match=error):
        parse_mappings({"app.user_*": spec})
    with pytest.raises(ConfigError, match="glob is written"):
        parse_mappings({"app*": {"keys": ["a:{id}"]}})


def _update(before, after, table="app.user_01"):
    return make_event(table, "update", before, after)


FILTERS = {
    "app.user_*": {"keys": ["user:{id}", "user:email:{email}"],
                   "ignore_columns": ["view_count", "updated_at"]},
}


@pytest.mark.parametrize("before, after, invalidates", [
    ({"id": 1, "email": "a", "name": "x", "view_count": 1},
     {"id": 1, "email": "a", "name": "x", "view_count": 2}, False),      # ignored column only
    ({"id": 1, "email": "a", "name": "x", "view_count": 1},
     {"id": 1, "email": "a", "name": "y", "view_count": 2}, True),       # a watched column too
    ({"id": 1, "email": "a", "view_count": 1},
     {"id": 1, "email": "b", "view_count": 1}, True),                     # a key column
    ({"id": 1, "email": "a", "view_count": 1},
     {"id": 1, "email": "a", "view_count": 2, "name": "y"}, True),      # absent from one image: changed
    ({"id": 1, "email": "a", "view_count": 1},
     {"id": 1, "email": "a"}, False),                     # absent, but ignored
])
def test_ignore_columns(before, after, invalidates):
    plan = plan_batch([_update(before, after)], parse_mappings(FILTERS))
    ep = plan.events[0]
    assert bool(ep.keys) is invalidates and ep.unwatched is (not invalidates)


def test_watch_columns_and_the_metric():
    mappings = parse_mappings({"app.user_*": {"keys": ["user:{id}"], "watch_columns": ["name"]}})
    plans = plan_batch([_update({"id": 1, "name": "x", "bio": "a"}, {"id": 1, "name": "x", "bio": "b"}),
                        _update({"id": 1, "name": "x"}, {"id": 1, "name": "y"})], mappings)
    assert [ep.unwatched for ep in plans.events] == [True, False]
    assert plans.events[1].keys == ("user:1",)
    tally = TableTally()
    tally.observe(plans.events)
    assert tally.snapshot() == {(UNWATCHED, "app.user_01", ""): 1}


def test_update_mode_value_columns_are_always_watched():
    mappings = parse_mappings({"app.t": {"keys": ["t:{id}"], "mode": "update",
                                         "value_columns": ["id", "name"],
                                         "ignore_columns": ["name", "hits"]}})
    m = mappings.get("app", "t")
    assert m.watches({"id": 1, "name": "a", "hits": 1}, {"id": 1, "name": "b", "hits": 1})
    assert not m.watches({"id": 1, "name": "a", "hits": 1}, {"id": 1, "name": "a", "hits": 2})


def test_statements_name_pattern_tables_not_seen_yet():
    mappings = parse_mappings({"app.user_*": {"keys": ["user:{_table}:{id}"]}})
    loose = mappings.is_mapped_loosely
    # gh-ost's swap: the table is named, the shadow tables never are
    swap = "RENAME TABLE app.user_03 TO app._user_03_del, app._user_03_gho TO app.user_03"
    assert [(c.db, c.table) for c in table_changes(swap, None, [], loose)] == [("app", "user_03")]
    assert [c.table for c in table_changes("TRUNCATE User_04", "app", [], loose)] == ["user_04"]
    assert table_changes("TRUNCATE _user_04_new", "app", [], loose) == []


def test_the_settings_schema_accepts_patterns_and_filters():
    import jsonschema
    from cachesync.runtime.config_schema import json_schema
    doc = {"tables": {"app.user_*": {"keys": ["user:{_table}:{id}"], "ignore_columns": ["hits"]},
                      r"re:t_\d+\.orders": {"keys": ["o:{_db}:{id}"], "watch_columns": ["total"]},
                      "app.users": {"keys": ["u:{id}"]}}}
    jsonschema.validate(doc, json_schema())
    parse_mappings(doc["tables"])            # and the loader agrees


def test_resync_scans_shards_with_the_same_keys_once(tmp_path):
    from cachesync.runtime import config
    from cachesync.resync import resync_tables
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"tables": {
        "app.user_*": {"keys": ["user:{id}"]},                 # every shard renders user:*
        "app.order_*": {"keys": ["order:{_table}:{id}"]},      # one scan per shard
        "app.users": {"keys": ["u:{id}"]}}}))
    settings = config.load(path, {})
    mappings = settings.tables
    mappings.known([("app", "user_00"), ("app", "user_01"), ("app", "order_00"),
                    ("app", "order_01"), ("app", "users")])
    chosen = sorted(m.table for m in resync_tables(settings, (), mappings))
    assert chosen == ["app.order_00", "app.order_01", "app.user_*", "app.users"]
    assert [m.table for m in resync_tables(settings, ("app.user_01",), mappings)] == ["app.user_01"]
