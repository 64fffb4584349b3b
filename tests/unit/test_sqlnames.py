"""Identifiers from configuration: checked against the pattern, quoted (schema.sqlnames)."""

import pytest

from cachesync.schema.errors import ConfigError
from cachesync.schema.mapping import parse_mappings
from cachesync.schema.sqlnames import configured, qualified, quote


@pytest.mark.parametrize("name, quoted", [
    ("users", "`users`"), ("we`ird", "`we``ird`"), ("名前", "`名前`"),
])
def test_quote_doubles_backticks(name, quoted):
    assert quote(name) == quoted


@pytest.mark.parametrize("name", ["", "x" * 65, "a\0b", None])
def test_quote_refuses_what_mysql_cannot_name(name):
    with pytest.raises(ValueError):
        quote(name)


@pytest.mark.parametrize("name, quoted", [("t", "`t`"), ("db.t", "`db`.`t`"), ("$a_1", "`$a_1`")])
def test_configured_names(name, quoted):
    assert configured(name) == quoted


@pytest.mark.parametrize("name", ["a`b", "a b", "a.b.c", ".t", "db.", "t;", "x" * 65])
def test_configured_names_outside_the_pattern_are_refused(name):
    with pytest.raises(ValueError, match="is not a table name"):
        configured(name)


def test_qualified():
    assert qualified("a`", "b") == "`a```.`b`"


@pytest.mark.parametrize("table", [f"app.{'t' * 65}", f"{'d' * 65}.t"])
def test_a_mapped_table_name_longer_than_mysql_allows_is_refused(table):
    with pytest.raises(ConfigError, match="not a MySQL identifier"):
        parse_mappings({table: {"keys": ["k:{id}"]}}, "app.yaml")


def test_mapped_table_names_with_backticks_are_quoted_not_refused():
    # a mapped table is the server's own name (MySQL allows backticks in it); it is quoted
    assert parse_mappings({"app.we`ird": {"keys": ["k:{id}"]}}).get("app", "we`ird")
