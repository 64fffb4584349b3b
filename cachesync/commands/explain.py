"""``cachesync explain``: the Redis operations cachesync would run for one row change."""

from __future__ import annotations

import sys

import click

from cachesync.commands.common import EXIT_CONFIG, handle_errors, settings_options
from cachesync.explain import explain_event, infer_op, make_event, parse_row, table_header
from cachesync.wiring import mappings as all_mappings

EXIT_FINDINGS = 4


@click.command("explain")
@click.argument("table", required=False)
@click.option("--tables", "list_tables", is_flag=True,
              help="List, on the live server, the tables each tables: entry maps, and exit.")
@click.option("--row", "row_json", metavar="JSON",
              help="The row as a JSON object; shows insert, update (unchanged row) and delete.")
@click.option("--before", "before_json", metavar="JSON", help="Before image (update, delete).")
@click.option("--after", "after_json", metavar="JSON", help="After image (insert, update).")
@settings_options
def command(settings, table: str | None, row_json, before_json, after_json,
            list_tables: bool) -> None:
    """Print the keys and Redis operations cachesync would run for a change of TABLE.

    TABLE is db.table (a table a pattern entry matches too). Give --row, or --before and/or
    --after (both: update; only --after: insert; only --before: delete). Values are
    JSON, each column's text as the server returns it (e.g. "2020-01-01 10:00:00.000000"
    for a DATETIME(6): the key text, see "Key text" in the docs' design page); tagged values
    such as {"$dt": "2024-01-02T03:04:05"} or {"$b64": "0CkAAA=="} are decoded as the
    tailer encodes them, and their key text is printed. Uses the consumer's own
    planner, nothing is written and no server is contacted. Exit 4 when the change
    would be dead-lettered (the keys it still invalidates are listed).

    --tables asks the MySQL server instead: each tables: entry and the existing tables
    it maps.
    """
    if list_tables:
        with handle_errors():
            _list_tables(settings)
        return
    if table is None:
        _usage("give TABLE (db.table), or --tables")
    with handle_errors():
        mappings = all_mappings(settings)
        mapping = mappings.get(*table.split(".", 1)) if "." in table else None
        if mapping is None:
            _usage(f"no mapping for table {table!r}; mapped: "
                   f"{', '.join(m.table for m in settings.tables.entries)}")
        try:
            row = parse_row(row_json, "--row")
            before, after = parse_row(before_json, "--before"), parse_row(after_json, "--after")
        except ValueError as e:
            _usage(str(e))
        if (row is None) == (before is None and after is None):
            _usage("give either --row, or --before and/or --after")
        cases = ([("insert", None, row), ("update", row, row), ("delete", row, None)]
                 if row is not None else [(infer_op(before, after), before, after)])
        click.echo(table_header(mapping))
        poison = False
        for op, b, a in cases:
            lines, bad = explain_event(make_event(table, op, b, a), mappings)
            poison |= bad
            click.echo(f"{op}:")
            for line in lines:
                click.echo(f"  {line}")
    if poison:
        sys.exit(EXIT_FINDINGS)


def _usage(message: str) -> None:
    click.echo(f"cachesync explain: {message}", err=True)
    sys.exit(EXIT_CONFIG)


def _list_tables(settings) -> None:
    """Each entry and the live tables it maps (a pattern: every match, exact names win)."""
    from cachesync.runtime.mysql import classify
    from cachesync.table_matching import existing_tables, matches_by_entry
    from cachesync.wiring import mysql_params
    import pymysql
    conn = mysql_params(settings).connect(database=None)
    try:
        matched = matches_by_entry(settings.tables, existing_tables(conn))
    except pymysql.err.MySQLError as e:
        raise classify(e) from e
    finally:
        conn.close()
    for entry, tables in matched.items():
        click.echo(f"{entry}: {len(tables)} table(s)" + (": " + ", ".join(tables) if tables
                                                         else " (none exists yet)"))
