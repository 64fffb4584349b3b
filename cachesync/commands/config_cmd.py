"""``cachesync config``: the settings' JSON Schema and the effective settings."""

from __future__ import annotations

import json

import click

from cachesync.commands.common import handle_errors, load_options


@click.group("config")
def command() -> None:
    """Show the settings schema or the effective settings."""


@command.command("schema")
def schema() -> None:
    """Print the JSON Schema of the settings file (for editors: yaml-language-server)."""
    from cachesync.runtime.config_schema import json_schema
    click.echo(json.dumps(json_schema(), indent=2))


@command.command("show")
@load_options
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of a table.")
def show(load, as_json) -> None:
    """Print the effective settings, secrets masked, and where each value came from
    (default, the file, or the environment variable that set it)."""
    from cachesync.runtime.config_schema import effective
    with handle_errors():
        settings, origins = load()
    view = effective(settings, origins)
    if as_json:
        click.echo(json.dumps(view, indent=2, default=str))
        return
    width = max(len(k) for k in view)
    for key, item in view.items():
        click.echo(f"{key:<{width}}  {json.dumps(item['value'], default=str):<40}  # {item['from']}")
