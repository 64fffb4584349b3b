import pytest

from cachesync.config import load, mask_url
from cachesync.schema.errors import ConfigError

YAML = """
mysql: {host: db.internal, port: 3307}
redis: {url: "redis://:hunter2@cache:6379/0"}
tables:
  shop.users: {keys: ["user:{id}"]}
"""


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "cachesync.yaml"
    path.write_text(YAML)
    return path


def test_env_overrides_win_and_are_typed(cfg):
    s = load(cfg, {"CACHESYNC_MYSQL_PORT": "4406", "CACHESYNC_KAFKA_TOPIC": "t"})
    assert (s.mysql.host, s.mysql.port, s.kafka.topic) == ("db.internal", 4406, "t")


def test_secret_from_file_is_masked(cfg, tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("s3cr3t-value\n")
    s = load(cfg, {"CACHESYNC_MYSQL_PASSWORD_FILE": str(secret)})
    assert s.mysql.password == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(s) and "hunter2" not in repr(s)


@pytest.mark.parametrize("env, message", [
    ({"CACHESYNC_MYSQL_PORT": "abc"}, "environment CACHESYNC_MYSQL_PORT: expected an integer, got 'abc'"),
    ({"CACHESYNC_MYSQL_PASSWORD_FILE": "/nonexistent/pw"}, "CACHESYNC_MYSQL_PASSWORD_FILE: cannot read"),
])
def test_bad_values_name_the_field(cfg, env, message):
    with pytest.raises(ConfigError) as info:
        load(cfg, env)
    assert message in str(info.value)


def test_unknown_fields_are_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {hots: x}\ntables: {a.b: {keys: ['k:{id}']}}\n")
    with pytest.raises(ConfigError, match=r"c.yaml: mysql: unknown field\(s\) \['hots'\]"):
        load(path, {})


def test_mask_url():
    assert mask_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert mask_url("redis://h:1/0") == "redis://h:1/0"
