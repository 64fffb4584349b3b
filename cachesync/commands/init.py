"""``cachesync init``: propose a config from information_schema, then lint it."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import click

from cachesync.commands.common import handle_errors
from cachesync.schema.key_formats import FRAMEWORKS


@click.command("init")
@click.argument("databases", nargs=-1)
@click.option("--config", "-c", "--output", "-o", "output", type=click.Path(dir_okay=False),
              default="cachesync.yaml", show_default=True,
              help="Where to write the config (refused if it exists): the file the other "
                   "commands then read with --config.")
@click.option("--env-file", type=click.Path(dir_okay=False), envvar="CACHESYNC_ENV_FILE",
              help="KEY=VALUE file loaded into the environment first (e.g. .devstack/env).")
@click.option("--framework", type=click.Choice(FRAMEWORKS),
              help="The application's framework: leave out its own tables (migrations, "
                   "sessions, auth, queues) and propose keys in its form, with a "
                   "`framework:` section for its key prefixes and version.")
@click.option("--strict", is_flag=True,
              help="Exit 4 when lint warns about the proposed config (default: print the "
                   "warnings and exit 0).")
def command(databases, output: str, env_file, framework, strict: bool) -> None:
    """Write a commented config for the tables of DATABASES and lint it (no DATABASES:
    every database the account can see, but the server's own and mysql.state_db).

    One entry per table, or one pattern per family of shards (tables whose names differ
    only in a trailing number, e.g. user_00 ... user_15, in one database or across
    databases numbered the same way). Key templates are placeholders built from the
    primary key; tables without a usable primary key are listed with the reason. MySQL
    is reached with the CACHESYNC_MYSQL_* settings. A database without a table to read
    names the grant it lacks. Lint's warnings are printed; exit 4 on them with --strict.
    """
    from cachesync.runtime import config
    from cachesync.runtime.env_file import with_env_file
    from cachesync.scaffold import propose, read_schema, render, unreadable, visible_databases
    from cachesync.wiring import mysql_params
    with handle_errors():
        with_env_file(os.environ, env_file)
        if os.path.exists(output):
            raise click.UsageError(f"{output} exists; choose another --output")
        # only the connection: the config this command writes does not exist yet
        conn = mysql_params(SimpleNamespace(mysql=config.load_section("mysql"))).connect(database=None)
        try:
            databases = databases or visible_databases(conn, config.load_section("mysql").state_db)
            schema = read_schema(conn, list(databases))
            problems = unreadable(conn, list(databases), schema)
        finally:
            conn.close()
        for problem in problems:
            click.echo(f"warning: {problem}", err=True)
        entries, unmappable = propose(schema, framework)
        if not entries:
            raise click.UsageError(f"no mappable table in {', '.join(databases)}"
                                   + (f": {'; '.join(problems)}" if problems else ""))
        with open(output, "w", encoding="utf-8") as f:
            f.write(render(entries, unmappable, list(databases), framework))
    click.echo(f"wrote {output}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
               f"{len(unmappable)} table(s) not mapped")
    for name, why in unmappable:
        click.echo(f"  not mapped: {name}: {why}")
    click.echo(f"linting {output}:")
    sys.exit(_lint(output, strict))


def _lint(output: str, strict: bool) -> int:
    """Lint's exit code, its warnings (EXIT_FINDINGS) counted as success unless ``strict``."""
    from cachesync.commands import lint
    try:
        code = lint.command.main(["--config", output], standalone_mode=False) or 0
    except SystemExit as e:
        code = e.code or 0
    if code == lint.EXIT_FINDINGS and not strict:
        click.echo("review the warnings above (--strict makes them fatal)")
        return 0
    return code
