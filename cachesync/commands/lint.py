"""``cachesync lint``: find mapping templates that could leave keys behind in Redis."""

from __future__ import annotations

import sys

import click
import pymysql

from cachesync.commands.common import handle_errors, settings_options
from cachesync.explain import Finding, keys_without_ttl, lint
from cachesync.fk_report import RULES_GRANT, cascading_keys, what_cachesync_does
from cachesync.lint_keys import live_column_types
from cachesync.lint_unlogged import period_findings, unlogged_findings
from cachesync.table_matching import existing_tables, lint_view, matches_by_entry
from cachesync.wiring import build_cache_reader, mysql_params
from cachesync.runtime.mysql import classify

EXIT_FINDINGS = 4


@click.command("lint")
@click.option("--offline", is_flag=True,
              help="Only the checks that need no server (the delete path).")
@click.option("--sample", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Keys per template to examine for a missing TTL (SCAN, never KEYS).")
@settings_options
def command(settings, offline: bool, sample: int) -> None:
    """Warn about key templates in the mapping that could leave keys behind.

    \b
    delete-path     a delete or key-column change that does not touch the old key
                    (the template is rendered only from the after image)
    missing-column  a template, version or value column the live table does not
                    have (information_schema; every event would be dead-lettered)
    missing-table   a mapped table that does not exist or is not visible
    no-ttl          live Redis keys matching a template that have no TTL
    ambiguous-key   two fields separated by a literal their values may contain
                    ({a}:{b} with text columns): two rows render the same key
    overlapping-keys  a key of one template can be a key of another (user:{id}
                    with a text id and user:email:{email}), or two tables share one
    ci-collation    a key column under a _ci collation: MySQL treats 'abc' and
                    'ABC ' as equal, keys are byte-exact
    key-text-changed  a key column whose key text changed in this version (INET4/
                    INET6/UUID: server text, formerly 0x-hex; TIME: negative values
                    with a fraction): flush keys cached before the upgrade once
    reserved-key    a template that can render a key under cachesync: ({name}
                    with a text column): the consumer dead-letters such rows
    shard-keys      a pattern entry's template without {_db} or {_table}: two
                    matched tables' rows with equal key columns share a key
    no-match        a pattern entry that matches no existing table
    column-filter   an ignore_columns entry that is always watched (key, value,
                    version columns), or a filter update mode makes useless
    unlogged-changes  a server binlog filter (binlog_do_db, binlog_ignore_db) that
                    excludes a mapped schema; accounts that may SET sql_log_bin=0
                    (their changes never reach the binlog; nothing shows if they did)
    period-key      update mode on a table whose WITHOUT OVERLAPS key has an
                    application-time period, with a template that leaves out the
                    period's start or end column (several rows share the key)

    Then, as notes (fk-cascade), each foreign key whose ON DELETE/ON UPDATE CASCADE or
    SET NULL changes rows of a mapped table without logging them, and how cachesync
    invalidates them.

    A pattern entry is checked on the first table it matches (offline: on db.table).
    Column types come from information_schema; --offline assumes integer key
    columns, so it reports only the collisions every column type has.

    Exit 0 when clean, 4 when it found something; 1/3 when MySQL or Redis is
    unreachable or refuses (use --offline to check without servers).
    """
    with handle_errors():
        columns = no_ttl = types = matched = None
        server: list = []
        if not offline:
            types, matched, server = _types(settings)
            columns = {table: set(cols) for table, cols in types.items()}
            no_ttl = _no_ttl(settings, lint_view(settings.tables, matched), sample)
        findings = lint(settings.tables, columns, no_ttl, types=types, matched=matched) + server
    for finding in findings:
        click.echo(f"warning: {finding}")
    if not offline:
        _foreign_keys(settings)
    checked = "delete-path" if offline else "delete-path, columns, TTLs"
    click.echo(f"{_tables(settings.tables, matched)}, {len(findings)} warning(s) ({checked})")
    if findings:
        sys.exit(EXIT_FINDINGS)


def _types(settings) -> tuple[dict[str, dict[str, tuple]], dict[str, list[str]], list]:
    """(live column types of the checked tables, tables: entry -> the tables it matches, the
    findings read from the server: unlogged changes, period keys)."""
    conn = mysql_params(settings).connect(database=None)
    try:
        matched = matches_by_entry(settings.tables, existing_tables(conn))
        view = lint_view(settings.tables, matched)
        server = unlogged_findings(conn, view, Finding) + period_findings(conn, view, Finding)
        return live_column_types(conn, view.tables), matched, server
    except pymysql.err.MySQLError as e:
        raise classify(e) from e
    finally:
        conn.close()


def _foreign_keys(settings) -> None:
    """``fk-cascade``: each foreign key that cascades into a mapped table, and what cachesync
    does about it (a note, not a finding: those keys are kept fresh)."""
    conn = mysql_params(settings).connect(database=None)
    try:
        found, logged = cascading_keys(conn, settings.tables)
    except pymysql.err.MySQLError as e:
        raise classify(e) from e
    finally:
        conn.close()
    for fk, tables in found:
        click.echo(f"fk-cascade: {what_cachesync_does(fk, tables, logged, settings.tables)}")
        if not fk.rules_known:
            click.echo(f"fk-cascade: fix: {RULES_GRANT}")


def _no_ttl(settings, view, sample: int) -> dict[str, list[str]]:
    cache = build_cache_reader(settings, 5)
    try:
        return {t.text: keys_without_ttl(cache, t, sample)
                for m in view.tables.values() for t in m.keys}
    finally:
        cache.close()


def _tables(mappings, matched) -> str:
    """``N table(s)``: exact entries plus the live tables patterns match (offline: entries)."""
    if not mappings.patterns:
        return f"{len(mappings.tables)} table(s)"
    count = len(mappings.tables) + sum(len((matched or {}).get(p.text, ())) for p, _ in mappings.patterns)
    shown = count if matched is not None else len(mappings.entries)
    return f"{shown} table(s) ({len(mappings.patterns)} pattern entr" \
           f"{'y' if len(mappings.patterns) == 1 else 'ies'})"
