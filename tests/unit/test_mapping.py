import pytest

from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import KeyTemplate, MissingColumnError, parse_mappings


@pytest.mark.parametrize("template, row, expected", [
    ("user:{id}", {"id": 7}, "user:7"),
    ("user:email:{email}", {"email": "a@b.c"}, "user:email:a@b.c"),
    ("t:{tenant}:{id}", {"tenant": "x", "id": 1}, "t:x:1"),
    ("bin:{k}", {"k": b"\x01\xff"}, "bin:0x01ff"),
    ("u:{name}", {"name": "名前"}, "u:名前"),
    ("user:{id}", {"id": None}, None),
])
def test_render(template, row, expected):
    assert KeyTemplate.parse(template).render(row) == expected


def test_render_missing_column_is_poison():
    with pytest.raises(MissingColumnError) as info:
        KeyTemplate.parse("user:{uid}").render({"id": 1})
    assert info.value.reason == "missing_column"


@pytest.mark.parametrize("bad", ["user:", "user:{id", "user:{id}}", "{}"])
def test_bad_templates_are_rejected(bad):
    with pytest.raises(ValueError):
        KeyTemplate.parse(bad)


@pytest.mark.parametrize("raw, message", [
    (None, "'tables' must be a non-empty mapping"),
    ({"users": {"keys": ["u:{id}"]}}, "tables.users: table must be written as db.table"),
    ({"d.t": {"keys": []}}, "tables.d.t.keys: expected a non-empty list"),
    ({"d.t": {"keys": ["u:"]}}, "tables.d.t.keys: key template 'u:' names no {column}"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "upsert"}}, "tables.d.t.mode: expected one of"),
    ({"d.t": {"keys": ["u:{id}"], "ttl": 0}}, "tables.d.t.ttl: expected a positive"),
    ({"d.t": {"keys": ["u:{id}"], "ttl_jitter": 2}}, "tables.d.t.ttl_jitter"),
    ({"d.t": {"keys": ["u:{id}"], "tll": 5}}, "tables.d.t: unknown field(s) ['tll']"),
    ({"d.t": {"keys": ["u:{id}"], "version_column": "v"}},
     "tables.d.t: version_column only apply to mode: update"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "update", "double_delete": 1}},
     "tables.d.t.double_delete: only applies to mode: delete"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "update", "value": "xml"}},
     "tables.d.t.value: expected one of ['json', 'hash']"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "update", "value_columns": "name"}},
     "tables.d.t.value_columns: expected a non-empty list"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "update", "version_column": 3}},
     "tables.d.t.version_column: expected a column name"),
    ({"d.t": {"keys": ["u:{id}"], "mode": "update", "tombstone_ttl": -1}},
     "tables.d.t.tombstone_ttl: expected a positive whole number"),
    ({"d.t": {"keys": ["u:{id}"], "double_delete": 0}}, "tables.d.t.double_delete: expected"),
])
def test_config_errors_name_file_table_and_field(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_mappings(raw, "app.yaml")
    assert str(info.value).startswith("app.yaml: ")
    assert message in str(info.value)


def test_update_mode_settings_and_defaults():
    m = parse_mappings({"shop.users": {"keys": ["u:{id}"], "mode": "update", "value": "hash",
                                       "value_columns": ["id", "name"], "version_column": "v",
                                       "ttl": 600}})
    users = m.get("shop", "users")
    assert users.updates and users.value_format == "hash"
    assert users.value_columns == ("id", "name") and users.version_column == "v"
    assert users.tombstone_s == 600            # defaults to the table's TTL
    deletes = parse_mappings({"a.b": {"keys": ["b:{id}"], "double_delete": 0.5}}).get("a", "b")
    assert not deletes.updates and deletes.double_delete_s == 0.5


def test_defaults_and_schemas():
    m = parse_mappings({"shop.users": {"keys": ["u:{id}"]}, "crm.leads": {"keys": ["l:{id}"]}})
    users = m.get("shop", "users")
    assert (users.mode, users.ttl_s, users.db, users.name) == ("delete", 3600, "shop", "users")
    assert m.schemas == ("crm", "shop") and m.get("shop", "nope") is None
