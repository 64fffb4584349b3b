import pytest

from schema.errors import ConfigError
from schema.mapping import KeyTemplate, MissingColumnError, parse_mappings


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
    ({"d.t": {"keys": ["u:{id}"], "mode": "update"}}, "update mode (mode, version_column"),
])
def test_config_errors_name_file_table_and_field(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_mappings(raw, "app.yaml")
    assert str(info.value).startswith("app.yaml: ")
    assert message in str(info.value)


def test_defaults_and_schemas():
    m = parse_mappings({"shop.users": {"keys": ["u:{id}"]}, "crm.leads": {"keys": ["l:{id}"]}})
    users = m.get("shop", "users")
    assert (users.mode, users.ttl_s, users.db, users.name) == ("delete", 3600, "shop", "users")
    assert m.schemas == ("crm", "shop") and m.get("shop", "nope") is None
