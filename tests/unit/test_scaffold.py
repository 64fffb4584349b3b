"""`cachesync init`'s proposal from a schema (pure), and lint's pattern and filter checks."""

import yaml

from cachesync.explain import lint
from cachesync.scaffold import propose, render
from cachesync.schema.mapping import parse_mappings

BIGINT = [("id", "bigint")]


def test_families_of_shards_become_one_pattern_and_the_rest_one_entry_each():
    schema = {("shop_0", f"user_{i:02d}"): BIGINT for i in range(8)}
    schema |= {("shop_1", f"user_{i:02d}"): BIGINT for i in range(8, 16)}
    schema |= {("shop_0", "settings"): [("k", "varchar")], ("shop_0", "log"): [],
               ("shop_0", "geo"): [("pos", "point")], ("shop_0", "_user_00_gho"): BIGINT,
               ("shop_0", "log2024"): BIGINT}
    entries, unmappable = propose(schema)
    assert [(e["name"], e["keys"]) for e in entries] == [
        ("shop_0.log2024", ["log2024:{id}"]),
        ("shop_0.settings", ["settings:{k}"]),
        ("shop_[0-9].user_[0-9][0-9]", ["user:{_db}:{_table}:{id}"])]
    assert [name for name, _ in unmappable] == ["shop_0.geo", "shop_0.log"]
    text = render(entries, unmappable, ["shop_0", "shop_1"])
    mappings = parse_mappings(yaml.safe_load(text)["tables"])     # it loads
    assert mappings.get("shop_1", "user_12").keys[0].text == "user:shop_1:user_12:{id}"
    assert "#   shop_0.log: no primary key" in text


def test_uneven_numbers_give_a_regular_expression():
    entries, _ = propose({("app", "t_1"): BIGINT, ("app", "t_22"): BIGINT})
    assert entries[0]["name"] == r"re:app\.t_\d+"


def _checks(tables):
    return sorted((f.check, f.table) for f in lint(parse_mappings(tables)))


def test_lint_flags_pattern_keys_that_cannot_tell_shards_apart():
    assert _checks({"app.user_*": {"keys": ["user:{id}"]}}) == [("shard-keys", "app.user_*")]
    assert _checks({"app.user_*": {"keys": ["user:{_table}:{id}"]}}) == []


def test_lint_says_key_columns_are_always_watched():
    assert _checks({"app.t": {"keys": ["t:{id}"], "ignore_columns": ["id", "hits"]}}) == [
        ("column-filter", "app.t")]
    assert _checks({"app.t": {"keys": ["t:{id}"], "mode": "update",
                              "watch_columns": ["name"]}}) == [("column-filter", "app.t")]
    assert _checks({"app.t": {"keys": ["t:{id}"], "ignore_columns": ["hits"]}}) == []


def test_grants_per_database_and_table():
    from cachesync.runtime.grants import missing, privileges_on
    grants = ["GRANT REPLICATION SLAVE ON *.* TO `c`@`%`",
              "GRANT SELECT, INSERT ON `cachesync`.* TO `c`@`%`",
              "GRANT SELECT ON `shop\\_%`.* TO `c`@`%`",
              "GRANT SELECT ON `app`.`users` TO `c`@`%`"]
    assert missing(grants, "cachesync", ["SELECT", "INSERT", "DELETE"]) == ["DELETE"]
    assert privileges_on(grants, "shop_7") == {"REPLICATION SLAVE", "SELECT"}
    assert missing(grants, "shopX7", ["SELECT"]) == ["SELECT"]      # \_ is a literal _
    assert missing(grants, "app", ["SELECT"]) == ["SELECT"]
    assert missing(grants, "app", ["SELECT"], "users") == []
    assert missing(["GRANT ALL PRIVILEGES ON *.* TO `r`@`%`"], "x", ["CREATE"]) == []
