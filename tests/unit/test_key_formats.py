"""Framework key forms (pure): the Redis key each framework's cache stores a key under, the
templates a `framework:` section turns into those keys, and `init --framework`'s proposal."""

import pytest
import yaml

from cachesync.runtime import config
from cachesync.scaffold import BOOKKEEPING, propose, render
from cachesync.schema.errors import ConfigError
from cachesync.schema.key_formats import FRAMEWORKS, KeyFormat, spring_key
from cachesync.schema.mapping import parse_mappings

ROW = {"id": 7, "author_id": 3}


@pytest.mark.parametrize("fmt, key, stored", [
    # django.core.cache.backends.base.default_key_func: "%s:%s:%s" % (prefix, version, key)
    (KeyFormat("django"), "author:7", ":1:author:7"),
    (KeyFormat("django", key_prefix="shop", version=3), "author:7", "shop:3:author:7"),
    # Rails: namespace + ":" + key; no namespace, the key itself (cache versioning keeps the
    # version inside the entry, not in the key)
    (KeyFormat("rails"), "authors/7", "authors/7"),
    (KeyFormat("rails", key_prefix="myapp"), "authors/7", "myapp:authors/7"),
    # Laravel: the Redis connection's options.prefix, then the cache prefix, then the key
    (KeyFormat("laravel", key_prefix="laravel_cache_", connection_prefix="laravel_database_"),
     "author:7", "laravel_database_laravel_cache_author:7"),
    # Spring: [key-prefix]cacheName::key
    (KeyFormat("spring"), "authors::7", "authors::7"),
    (KeyFormat("spring", key_prefix="shop:"), "authors::7", "shop:authors::7"),
    (KeyFormat(), "author:7", "author:7"),
])
def test_each_framework_stores_a_key_under_its_own_form(fmt, key, stored):
    assert fmt.full(key) == stored


def test_spring_keys_one_argument_or_a_simple_key_of_several():
    assert spring_key("authors", ["{id}"]) == "authors::{id}"
    assert spring_key("books", ["{author_id}", "{id}"]) == "books::SimpleKey [{author_id},{id}]"
    with pytest.raises(ValueError, match="SimpleKey"):
        spring_key("all", [])


def test_a_prefix_with_a_brace_or_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="cannot hold"):
        KeyFormat("django", key_prefix="a{b")
    with pytest.raises(ValueError, match="expected one of"):
        KeyFormat("flask")


def test_templates_render_the_framework_keys_and_an_entry_may_opt_out():
    fmt = KeyFormat("django", key_prefix="shop", version=2)
    tables = parse_mappings({"shop.author": {"keys": ["author:{id}"]},
                             "shop.book": {"keys": ["book:{id}", "book:by:{author_id}:{id}"]},
                             "shop.raw": {"keys": ["raw:{id}"], "key_format": "plain"}},
                            key_format=fmt)
    assert tables.get("shop", "author").keys[0].render(ROW) == "shop:2:author:7"
    assert [t.render(ROW) for t in tables.get("shop", "book").keys] == [
        "shop:2:book:7", "shop:2:book:by:3:7"]
    assert tables.get("shop", "raw").keys[0].render(ROW) == "raw:7"
    assert tables.get("shop", "author").keys[0].glob == "shop:2:author:*"


def test_an_entry_naming_another_framework_keeps_the_sections_prefixes():
    tables = parse_mappings({"shop.book": {"keys": ["books::SimpleKey [{author_id},{id}]"],
                                           "key_format": "spring"}},
                            key_format=KeyFormat("django", key_prefix="p:"))
    key = tables.get("shop", "book").keys[0]
    assert key.render(ROW) == "p:books::SimpleKey [3,7]"
    assert key.regex.fullmatch("p:books::SimpleKey [3,7]")


def test_an_unknown_entry_format_names_the_field():
    with pytest.raises(ConfigError, match=r"tables.shop.a.key_format: expected one of"):
        parse_mappings({"shop.a": {"keys": ["a:{id}"], "key_format": "flask"}})


def test_the_framework_section_loads_from_the_file_and_the_version_from_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"framework": {"key_format": "django", "key_prefix": "shop"},
                                    "tables": {"shop.author": {"keys": ["author:{id}"]}}}))
    settings = config.load(path, {"CACHESYNC_FRAMEWORK_VERSION": "4"})
    assert settings.framework.version == 4
    assert settings.tables.get("shop", "author").keys[0].text == "shop:4:author:{id}"
    assert config.load(path, {}).tables.get("shop", "author").keys[0].text == "shop:1:author:{id}"


@pytest.mark.parametrize("section, message", [
    ({"key_format": "flask"}, "framework.key_format: expected one of"),
    ({"key_format": "django", "key_prefix": "{x}"}, "framework.key_prefix: expected text without"),
    ({"version": -1}, "framework.version: expected"),
])
def test_a_bad_framework_section_is_refused_at_load(tmp_path, section, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"framework": section,
                                    "tables": {"shop.author": {"keys": ["author:{id}"]}}}))
    with pytest.raises(ConfigError, match=message):
        config.load(path, {})


DJANGO_DB = {("shop", t): [("id", "bigint")] for t in (
    "django_migrations", "django_session", "django_admin_log", "django_content_type",
    "auth_user", "auth_group_permissions", "library_author", "library_book")}


def test_init_for_django_skips_its_tables_and_writes_the_framework_section():
    entries, unmappable = propose(DJANGO_DB, "django")
    assert [(e["name"], e["keys"]) for e in entries] == [
        ("shop.library_author", ["library_author:{id}"]),
        ("shop.library_book", ["library_book:{id}"])]
    assert ("shop.django_session", "django's own table") in unmappable
    assert len(unmappable) == 6
    doc = yaml.safe_load(render(entries, unmappable, ["shop"], "django"))
    assert doc["framework"] == {"key_format": "django", "key_prefix": "", "version": 1}
    fmt = config.FrameworkSettings(**doc["framework"]).keys
    key = parse_mappings(doc["tables"], key_format=fmt).get("shop", "library_author").keys[0]
    assert key.text == ":1:library_author:{id}"


@pytest.mark.parametrize("framework, tables, keys", [
    ("rails", ["schema_migrations", "ar_internal_metadata", "active_storage_blobs", "authors"],
     ["authors/{id}"]),
    ("laravel", ["migrations", "failed_jobs", "jobs", "password_reset_tokens",
                 "personal_access_tokens", "sessions", "authors"], ["authors:{id}"]),
    ("spring", ["flyway_schema_history", "DATABASECHANGELOG", "DATABASECHANGELOGLOCK",
                "authors"], ["authors::{id}"]),
])
def test_init_for_other_frameworks_skips_their_tables_and_uses_their_key_form(
        framework, tables, keys):
    entries, unmappable = propose({("app", t): [("id", "bigint")] for t in tables}, framework)
    assert [(e["name"], e["keys"]) for e in entries] == [("app.authors", keys)]
    assert len(unmappable) == len(tables) - 1
    doc = yaml.safe_load(render(entries, unmappable, ["app"], framework))
    parse_mappings(doc["tables"], key_format=config.FrameworkSettings(**doc["framework"]).keys)    # it loads


def test_a_spring_composite_key_is_a_simple_key():
    entries, _ = propose({("app", "book_tags"): [("book_id", "bigint"), ("tag_id", "int")]},
                         "spring")
    assert entries[0]["keys"] == ["book_tags::SimpleKey [{book_id},{tag_id}]"]


def test_every_framework_has_its_bookkeeping_tables():
    assert tuple(BOOKKEEPING) == FRAMEWORKS
