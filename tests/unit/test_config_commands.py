"""``cachesync config schema`` accepts the shipped configurations and refuses what the loader
refuses; ``cachesync config show`` masks secrets and says where each value came from."""

import json
import os
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from cachesync.cli import cli
from cachesync.runtime.config_schema import json_schema

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_settings_from_the_environment(monkeypatch):
    """Only what a test passes: `make test` exports CACHESYNC_ENV_FILE (the devstack's
    settings), which the command would load."""
    for name in [n for n in os.environ if n.startswith("CACHESYNC_")]:
        monkeypatch.delenv(name)


def _schema() -> dict:
    result = CliRunner().invoke(cli, ["config", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _shipped_configs():
    yield ROOT / "cachesync/examples/demo.yaml"
    configmap = yaml.safe_load((ROOT / "deploy/k8s/configmap.yaml").read_text())
    for text in configmap["data"].values():
        yield text


@pytest.mark.parametrize("config", list(_shipped_configs()), ids=str)
def test_schema_accepts_every_shipped_configuration(config):
    doc = yaml.safe_load(config.read_text() if isinstance(config, Path) else config)
    jsonschema.validate(doc, _schema())


@pytest.mark.parametrize("doc, where", [
    ({"mysql": {"hots": "x"}}, "hots"),
    ({"mysql": {"port": 0}}, "0"),
    ({"consumer": {"dedup_store": "pg"}}, "pg"),
    ({"kafka": {"topic": "a b"}}, "a b"),
    ({"mysqll": {}}, "mysqll"),
    ({"tables": {"shop.users": {"keyz": ["k"]}}}, "keyz"),
])
def test_schema_refuses_what_the_loader_refuses(doc, where):
    doc = {"tables": {"shop.users": {"keys": ["user:{id}"]}}} | doc
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.validate(doc, json_schema())


def test_show_masks_secrets_and_names_origins(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text('redis: {url: "redis://:hunter2@cache:6379/0"}\n'
                    'tables: {shop.users: {keys: ["user:{id}"]}}\n')
    env = {"CACHESYNC_MYSQL_PASSWORD": "s3cret", "CACHESYNC_MYSQL_PORT": "3307"}
    result = CliRunner().invoke(cli, ["config", "show", "--json", "-c", str(path)], env=env)
    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert view["mysql.port"] == {"value": 3307, "from": "environment CACHESYNC_MYSQL_PORT"}
    assert view["mysql.password"] == {"value": "***", "from": "environment CACHESYNC_MYSQL_PASSWORD"}
    assert view["redis.url"] == {"value": "redis://:***@cache:6379/0", "from": str(path)}
    assert view["kafka.topic"] == {"value": "cachesync.changes", "from": "default"}
    assert view["tables"]["value"] == ["shop.users"]
    table = CliRunner().invoke(cli, ["config", "show", "-c", str(path)], env=env).output
    assert "s3cret" not in table and "hunter2" not in table


def test_show_reports_every_problem_and_exits_2(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {port: 0}\ntables: {shop.users: {keys: ['user:{id}']}}\n")
    result = CliRunner().invoke(cli, ["config", "show", "-c", str(path)],
                                env={"CACHESYNC_MYSQL_HOTS": "x"})
    assert result.exit_code == 2
    assert "cachesync: configuration error: 2 problems:" in result.output
