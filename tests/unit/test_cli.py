"""The command line surface: every command documents itself, bad settings exit 2 naming the field."""

from __future__ import annotations

import click
import pytest
import yaml
from click.testing import CliRunner

from cachesync.cli import cli

COMMANDS = sorted(cli.commands)
SETTINGS_COMMANDS = [n for n in COMMANDS
                     if any(p.name == "config_path" for p in cli.commands[n].params)]


def test_the_group_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output
    assert "Exit codes: 0 ok, 1 runtime failure, 2 usage/config error" in result.output


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(name, flag):
    result = CliRunner().invoke(cli, [name, flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: cli {name} ")
    assert cli.commands[name].help.strip()           # a docstring, not just the options


def test_the_operator_commands_take_settings():
    assert {"tail", "consume", "relay", "run", "explain", "lint"} <= set(SETTINGS_COMMANDS)


def _args_for(name: str) -> list[str]:
    """Placeholders for required arguments, so that the config is what fails."""
    return ["x.y" for p in cli.commands[name].params
            if isinstance(p, click.Argument) and p.required]


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
    result = CliRunner().invoke(cli, [name, *_args_for(name), "--config", str(path)], env={})
    assert result.exit_code == 2, result.output
    assert "configuration error" in result.output and field in result.output


@pytest.mark.parametrize("name", SETTINGS_COMMANDS)
def test_a_bad_environment_override_exits_2_naming_the_variable(tmp_path, name):
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({"tables": {"app.users": {"keys": ["u:{id}"]}}}))
    result = CliRunner().invoke(cli, [name, *_args_for(name), "--config", str(path)],
                                env={"CACHESYNC_TAILER_SERVER_ID": "seven"})
    assert result.exit_code == 2, result.output
    assert "CACHESYNC_TAILER_SERVER_ID" in result.output


def test_an_unknown_command_is_a_usage_error():
    assert CliRunner().invoke(cli, ["nope"]).exit_code == 2
