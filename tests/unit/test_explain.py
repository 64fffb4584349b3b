"""cachesync explain / lint without servers: known rows, each lint check, exit codes."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from cachesync.cli import cli
from cachesync.explain import (check_columns, check_delete_path, explain_event,
                               lint, make_event)
from cachesync.consumer.core.plan import Plan, plan_batch
from cachesync.schema.keys import lease_key
from cachesync.schema.mapping import KeyTemplate, parse_mappings

TABLES = {"app.users": {"keys": ["user:{id}", "user:email:{email}"], "ttl": 600}}
MAPPINGS = parse_mappings(TABLES)
USERS = MAPPINGS.tables["app.users"]


def unlink(key: str) -> str:
    """What explain prints for a key's invalidation: the key and its lease (in its slot)."""
    return f"UNLINK {key} {lease_key(key)}"


def explain(op, before, after):
    lines, poison = explain_event(make_event("app.users", op, before, after), MAPPINGS)
    return lines, poison


@pytest.mark.parametrize("op, before, after, expected", [
    ("insert", None, {"id": 1, "email": "a@x"},
     [unlink("user:1"),
      unlink("user:email:a@x")]),
    ("update", {"id": 1, "email": "a@x"}, {"id": 1, "email": "b@x"},
     [unlink("user:1"),
      unlink("user:email:a@x"),
      unlink("user:email:b@x")]),
    ("delete", {"id": 1, "email": "a@x"}, None,
     [unlink("user:1"),
      unlink("user:email:a@x")]),
    ("insert", None, {"id": 2, "email": None},
     [unlink("user:2"),
      "skipped 1 template rendering(s): a key column is NULL"]),
    ("insert", None, {"id": {"$dec": "7.50"}, "email": "c@x"},          # tagged JSON values
     ["key text: id = '7.50'",                                   # the canonical text, shown
      unlink("user:7.50"),
      unlink("user:email:c@x")]),
])
def test_explain_known_rows(op, before, after, expected):
    assert explain(op, before, after) == (expected, False)


def test_explain_shows_a_dead_letter():
    lines, poison = explain("delete", {"id": 1}, None)
    assert poison and lines[0].startswith("dead letter (missing_column)")


# -- lint --------------------------------------------------------------------------------
def after_only_planner(events, mappings):
    """A planner with the bug the delete-path check exists for: it ignores before images."""
    events = list(events)
    plan = plan_batch([_after_only(e) for e in events], mappings)
    return plan


def _after_only(event):
    from dataclasses import replace
    return replace(event, before=None)


def test_delete_path_is_clean_with_the_real_planner():
    assert check_delete_path(USERS, MAPPINGS) == []


def test_delete_path_flags_a_planner_that_renders_only_the_after_image():
    found = check_delete_path(USERS, MAPPINGS, after_only_planner)
    assert [(f.check, f.message.split(" path")[0]) for f in found] == [
        ("delete-path", "the delete"), ("delete-path", "the delete"),
        ("delete-path", "the key-column change"), ("delete-path", "the key-column change")]
    assert "'user:email:{email}'" in found[1].message


def test_delete_path_reports_a_planner_that_cannot_plan():
    def poisoned(events, mappings):
        plan = Plan()
        plan.poison = [(e, _Poison()) for e in events]
        return plan
    found = check_delete_path(USERS, MAPPINGS, poisoned)
    assert [f.check for f in found] == ["delete-path", "delete-path"]


class _Poison(Exception):
    reason = "bad"


@pytest.mark.parametrize("live, expected", [
    ({"id", "email", "name"}, []),
    ({"ID", "Email"}, []),                                       # MySQL column names are case-insensitive
    ({"id", "name"}, [("missing-column", "column 'email' (named by 'user:email:{email}')")]),
    (None, [("missing-table", "the table does not exist")]),
])
def test_columns_check(live, expected):
    found = check_columns(USERS, live)
    assert [(f.check, f.message[:len(e)]) for f, (_, e) in zip(found, expected)] == expected
    assert len(found) == len(expected)


def test_lint_combines_all_three_checks():
    found = lint(MAPPINGS, columns={"app.users": {"id"}},
                 no_ttl={"user:{id}": ["user:1", "user:2"], "user:email:{email}": []},
                 planner=after_only_planner)
    assert sorted({f.check for f in found}) == ["delete-path", "missing-column", "no-ttl"]
    no_ttl = [f for f in found if f.check == "no-ttl"]
    assert len(no_ttl) == 1 and "2 sampled key(s) matching 'user:{id}'" in no_ttl[0].message


def test_lint_without_live_data_checks_only_the_delete_path():
    assert lint(MAPPINGS) == []


@pytest.mark.parametrize("template, pattern", [
    ("user:{id}", "user:*"),
    ("user:email:{email}", "user:email:*"),
    ("a*b?[x]:{id}:{k}", r"a\*b\?\[x\]:*:*"),
])
def test_template_glob_escapes_the_literal_text(template, pattern):
    assert KeyTemplate.parse(template).glob == pattern


def test_template_regex_matches_its_own_keys_only():
    regex = KeyTemplate.parse("p:user:{id}").regex
    assert regex.fullmatch("p:user:42") and not regex.fullmatch("p:user:email:a@x")
    assert KeyTemplate.parse("a*b:{x}").regex.fullmatch("a*b:1")


# -- commands ------------------------------------------------------------------------------
@pytest.fixture
def config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"tables": TABLES}))
    return str(path)


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_explain_command_prints_every_op_for_a_row(config):
    result = run("explain", "app.users", "--row", '{"id": 1, "email": "a@x"}', "-c", config)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == ("app.users: mode delete, TTL 600s ±10%, "
                                             "keys user:{id}, user:email:{email}")
    assert [l for l in result.output.splitlines() if l.endswith(":")] == ["insert:", "update:",
                                                                          "delete:"]


def test_explain_command_infers_the_op(config):
    result = run("explain", "app.users", "--before", '{"id": 1, "email": "a@x"}', "-c", config)
    assert result.exit_code == 0 and "delete:" in result.output


@pytest.mark.parametrize("args, code, message", [
    (["app.nope", "--row", "{}"], 2, "no mapping for table 'app.nope'; mapped: app.users"),
    (["app.users"], 2, "give either --row, or --before and/or --after"),
    (["app.users", "--row", "{}", "--after", "{}"], 2, "give either --row"),
    (["app.users", "--row", "[1]"], 2, "--row must be a JSON object"),
    (["app.users", "--after", "{bad"], 2, "--after is not valid JSON"),
    (["app.users", "--after", '{"id": 1}'], 4, "dead letter (missing_column)"),
])
def test_explain_command_exit_codes(config, args, code, message):
    result = CliRunner().invoke(cli, ["explain", *args, "-c", config])
    assert result.exit_code == code
    assert message in result.output


def test_lint_offline_is_clean_for_a_good_mapping(config):
    result = run("lint", "--offline", "-c", config)
    assert result.exit_code == 0
    assert result.output.strip() == "1 table(s), 0 warning(s) (delete-path)"


def test_explain_renders_update_mode_writes():
    mappings = parse_mappings({"app.users": {"keys": ["user:{id}", "user:email:{email}"],
                                             "mode": "update", "version_column": "v",
                                             "value_columns": ["id", "email"]}})
    event = make_event("app.users", "update", {"id": 1, "email": "a@x", "v": 5},
                       {"id": 1, "email": "b@x", "v": 6})
    lines, poison = explain_event(event, mappings)
    assert not poison
    assert [line.split(" unless stored version > ")[0] for line in lines] == [
        "fenced SET user:1", "fenced SET user:email:b@x", "fenced DEL user:email:a@x"]
    assert lines[0].endswith(': {"id":1,"email":"b@x"}  (TTL 3600s ±10%)')
    assert lines[2].endswith("; tombstone for 3600s")
    assert check_delete_path(mappings.tables["app.users"], mappings) == []


# -- issue 13: key text, salvaged keys, collisions, collations -----------------------------
def test_explain_shows_the_canonical_key_text_of_typed_values():
    m = parse_mappings({"app.ev": {"keys": ["ev:{at}", "ev:blob:{b}"]}})
    lines, _ = explain_event(make_event("app.ev", "insert", None, {
        "at": {"$dt": "2020-01-01T10:00:00.000001"}, "b": {"$b64": "0CkAAA=="}}), m)
    assert lines == ["key text: at = '2020-01-01 10:00:00.000001'", "key text: b = '0xd0290000'",
                     unlink("ev:2020-01-01 10:00:00.000001"),
                     unlink("ev:blob:0xd0290000")]


def test_explain_shows_a_dead_letter_and_the_keys_still_invalidated():
    lines, poison = explain("delete", {"id": 1}, None)
    assert poison and lines == [
        lines[0], unlink("user:1") + "  (the row's other keys)"]


def test_explain_shows_an_ambiguous_key_invalidated_instead_of_written():
    m = parse_mappings({"app.bk": {"keys": ["bk:{a}:{b}"], "mode": "update"}})
    lines, _ = explain_event(make_event("app.bk", "insert", None, {"a": "x:y", "b": "z"}), m)
    assert lines[0].startswith("fenced DEL bk:x:y:z unless stored version > ")
    assert lines[1] == ("note: bk:x:y:z is invalidated, not written: a value of {a} or {b} "
                        "contains the separator ':' of 'bk:{a}:{b}'")


def types_of(table, **columns):
    return {table: {c: (t, coll) for c, (t, coll) in columns.items()}}


@pytest.mark.parametrize("tables, types, expected", [
    # adjacent fields whose separator a text value may contain
    ({"d.b": {"keys": ["bk:{a}:{b}"]}},
     types_of("d.b", a=("varchar", None), b=("varchar", None)),
     [("ambiguous-key", "d.b", "'bk:{a}:{b}': a value of {a} or {b} may contain the "
                                "separator ':'")]),
    # ... not with integer columns
    ({"d.b": {"keys": ["bk:{a}:{b}"]}}, types_of("d.b", a=("int", None), b=("bigint", None)), []),
    # no separator at all: ambiguous whatever the types, also offline
    ({"d.b": {"keys": ["bk:{a}{b}"]}}, None,
     [("ambiguous-key", "d.b", "'bk:{a}{b}': nothing separates {a} from {b}")]),
    # a literal prefix that is a possible value of another template's field
    ({"d.u": {"keys": ["user:{id}", "user:email:{email}"]}},
     types_of("d.u", id=("varchar", None), email=("varbinary", None)),
     [("overlapping-keys", "d.u", "keys of 'user:email:{email}' (e.g. 'user:email:0x00') can "
                                  "also be keys of 'user:{id}' (d.u)")]),
    ({"d.u": {"keys": ["user:{id}", "user:email:{email}"]}},
     types_of("d.u", id=("bigint", None), email=("varbinary", None)), []),
    # two tables sharing a template collide whatever the types (reported from both sides)
    ({"d.a": {"keys": ["obj:{id}"]}, "d.b": {"keys": ["obj:{id}"]}}, None,
     [("overlapping-keys", "d.a", "keys of 'obj:{id}' (e.g. 'obj:0') can also be keys of "
                                  "'obj:{id}' (d.b)"),
      ("overlapping-keys", "d.b", "keys of 'obj:{id}' (e.g. 'obj:0') can also be keys of "
                                  "'obj:{id}' (d.a)")]),
    # case-insensitive collations: keys are byte-exact
    ({"d.u": {"keys": ["user:email:{email}"]}},
     types_of("d.u", email=("varchar", "utf8mb4_general_ci")),
     [("ci-collation", "d.u", "column 'email' uses the collation utf8mb4_general_ci: MySQL "
                              "treats 'abc' and 'ABC ' as the same value, but keys are "
                              "byte-exact")]),
    ({"d.u": {"keys": ["user:email:{email}"]}},
     types_of("d.u", email=("varchar", "utf8mb4_bin")), []),
])
def test_lint_reports_each_collision_class(tables, types, expected):
    found = lint(parse_mappings(tables), types=types)
    assert [(f.check, f.table, f.message[:len(e)]) for f, (_, _, e) in zip(found, expected)] \
        == expected
    assert len(found) == len(expected)


def test_lint_warns_of_key_text_changed_by_the_upgrade():
    """INET4/INET6/UUID keys are the server's text now (0x-hex before), TIME keys of negative
    fractional values too: keys cached before the upgrade need one flush."""
    found = lint(parse_mappings({"d.h": {"keys": ["host:{ip}", "host:name:{name}", "t:{at}"]}}),
                 types=types_of("d.h", ip=("inet6", None), name=("varchar", "utf8mb4_bin"),
                                at=("time", None)))
    assert [(f.check, f.message[:30]) for f in found] == [
        ("key-text-changed", "column 'ip' is INET6: its key "),
        ("key-text-changed", "column 'at' is TIME: a negativ")]


def test_lint_warns_of_key_text_changed_for_mysql_json_keys():
    """MySQL JSON keys are the server's text now (a rendering of the library's dict before)."""
    found = lint(parse_mappings({"d.j": {"keys": ["doc:{doc}"]}}),
                 types=types_of("d.j", doc=("json", None)))
    assert [(f.check, f.message[:29]) for f in found] == [
        ("key-text-changed", "column 'doc' is JSON: its key")]
