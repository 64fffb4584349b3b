"""``cachesync init``: propose a config from information_schema, then lint it."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import click

from cachesync.commands.common import handle_errors


@click.command("init")
@click.argument("databases", nargs=-1)
@click.option("--config", "-c", "--output", "-o", "output", type=click.Path(dir_okay=False),
              default="cachesync.yaml", show_default=True,
              help="Where to write the config (refused if it exists): the file the other "
                   "commands then read with --config.")
@click.option("--env-file", type=click.Path(dir_okay=False), envvar="CACHESYNC_ENV_FILE",
              help="KEY=VALUE file loaded into the environment first (e.g. .devstack/env).")
def command(databases, output: str, env_file) -> None:
    """Write a commented config for the tables of DATABASES and lint it (no DATABASES:
    every database the account can see, but the server's own and mysql.state_db).

    One entry per table, or one pattern per family of shards (tables whose names differ
    only in a trailing number, e.g. user_00 ... user_15, in one database or across
    databases numbered the same way). Key templates are placeholders built from the
    primary key; tables without a usable primary key are listed with the reason. MySQL
    is reached with the CACHESYNC_MYSQL_* settings. Exit 4 when lint finds something.
    """
    from cachesync import config
    from cachesync.scaffold import propose, read_schema, render, visible_databases
    from cachesync.wiring import mysql_params
    with handle_errors():
        if env_file:
            for key, value in config.read_env_file(env_file).items():
                os.environ.setdefault(key, value)
        if os.path.exists(output):
            raise click.UsageError(f"{output} exists; choose another --output")
        # only the connection: the config this command writes does not exist yet
        conn = mysql_params(SimpleNamespace(mysql=config.load_section("mysql"))).connect(database=None)
        try:
            databases = databases or visible_databases(conn, config.load_section("mysql").state_db)
            schema = read_schema(conn, list(databases))
        finally:
            conn.close()
        entries, unmappable = propose(schema)
        if not entries:
            raise click.UsageError(f"no mappable table in {', '.join(databases)}")
        with open(output, "w", encoding="utf-8") as f:
            f.write(render(entries, unmappable, list(databases)))
    click.echo(f"wrote {output}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
               f"{len(unmappable)} table(s) not mapped")
    for name, why in unmappable:
        click.echo(f"  not mapped: {name}: {why}")
    click.echo(f"linting {output}:")
    from cachesync.commands import lint
    sys.exit(lint.command.main(["--config", output], standalone_mode=False) or 0)
