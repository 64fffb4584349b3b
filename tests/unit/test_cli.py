"""The command line surface: every command documents itself, bad settings exit 2 naming the field."""

from __future__ import annotations

import click
import pytest
import yaml
from click.testing import CliRunner

from cachesync.cli import cli



def _walk(group: click.Group, path: tuple[str, ...] = ()):
    """Every command under ``group`` as (path, command), subcommands of groups included."""
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _walk(command, (*path, name))


ALL = dict(_walk(cli))
COMMANDS = [" ".join(path) for path in ALL]
SETTINGS_COMMANDS = [" ".join(path) for path, c in ALL.items()
                     if any(p.name == "config_path" for p in c.params)]


def test_the_group_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in cli.list_commands(click.Context(cli)):
        assert f"  {name} " in result.output
    assert "Exit codes: 0 ok, 1 runtime failure, 2 usage/config error" in result.output


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(name, flag):
    result = CliRunner().invoke(cli, [*name.split(), flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: cli {name} ")
    assert ALL[tuple(name.split())].help.strip()     # a docstring, not just the options


def test_the_operator_commands_take_settings():
    assert {"tail", "consume", "relay", "run", "explain", "lint"} <= set(SETTINGS_COMMANDS)


def _args_for(name: str) -> list[str]:
    """The command path plus placeholders for required arguments and options, so that the
    config is what fails."""
    command = ALL[tuple(name.split())]
    args = name.split()
    for p in command.params:
        if p.required and isinstance(p, click.Option):
            args += [p.opts[0], "1"]
        elif p.required:
            args.append("x.y")
    return args


# (yaml document, the field the error must name)
BAD_CONFIGS = [
    ({"tables": {"app.users": {"keys": ["user:{id}"], "ttl": -5}}}, "tables.app.users.ttl"),
    ({"consumer": {"batch_size": "many"}, "tables": {"app.users": {"keys": ["u:{id}"]}}},
     "consumer.batch_size"),
    ({"kafka": {"bootstrap": "x"}, "tables": {"app.users": {"keys": ["u:{id}"]}}},
     "kafka: unknown field(s) ['bootstrap']"),
    ({"tables": {"users": {"keys": ["u:{id}"]}}}, "tables.users: table must be written as db.table"),
]


@pytest.mark.parametrize("name", SETTINGS_COMMANDS)
@pytest.mark.parametrize("doc, field", BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_a_bad_config_exits_2_naming_the_field(tmp_path, name, doc, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli, [*_args_for(name), "--config", str(path)], env={})
    assert result.exit_code == 2, result.output
    assert "configuration error" in result.output and field in result.output


@pytest.mark.parametrize("name", SETTINGS_COMMANDS)
def test_a_bad_environment_override_exits_2_naming_the_variable(tmp_path, name):
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({"tables": {"app.users": {"keys": ["u:{id}"]}}}))
    result = CliRunner().invoke(cli, [*_args_for(name), "--config", str(path)],
                                env={"CACHESYNC_TAILER_SERVER_ID": "seven"})
    assert result.exit_code == 2, result.output
    assert "CACHESYNC_TAILER_SERVER_ID" in result.output


def test_an_unknown_command_is_a_usage_error():
    assert CliRunner().invoke(cli, ["nope"]).exit_code == 2
