import pytest

from cachesync.runtime.config import load, mask_url
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


@pytest.mark.parametrize("url, masked", [
    ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("redis://:p@ss@word@h:1/0", "redis://:***@h:1/0"),
    ("rediss://u:a:b@h", "rediss://u:***@h"),
    ("redis://h:1/0?password=s3cret&db=2", "redis://h:1/0?password=***&db=2"),
    ("redis://u@h:1/0?db=2&password=s3cret", "redis://u@h:1/0?db=2&password=***"),
    ("jdbc:mysql://h:1/db?permitMysqlScheme&trustStorePassword=s3cret",
     "jdbc:mysql://h:1/db?permitMysqlScheme&trustStorePassword=***"),
    ("redis://h/0?PASSWORD=s3cret", "redis://h/0?PASSWORD=***"),
    ("not a url", "not a url"),
])
def test_mask_url(url, masked):
    assert mask_url(url) == masked


@pytest.mark.parametrize("env, message", [
    ({"CACHESYNC_CONSUMER_BATCH_SIZE": "-5"},
     "environment CACHESYNC_CONSUMER_BATCH_SIZE: expected a number from 1 to 1,000,000, got -5"),
    ({"CACHESYNC_CONSUMER_CLAIM_LEASE_S": "nan"},
     "environment CACHESYNC_CONSUMER_CLAIM_LEASE_S: expected a finite number, got nan"),
    ({"CACHESYNC_MYSQL_PORT": "99999"},
     "environment CACHESYNC_MYSQL_PORT: expected a number from 1 to 65,535, got 99999"),
    ({"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": " "},
     "environment CACHESYNC_KAFKA_BOOTSTRAP_SERVERS: expected a comma-separated list of host:port"),
    ({"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": "a:9092,b"},
     "expected host:port with a port from 1 to 65535, got 'b'"),
    ({"CACHESYNC_CONSUMER_DEDUP_STORE": "pg"}, "expected one of ['mysql', 'redis'], got 'pg'"),
    ({"CACHESYNC_RELAY_OUTBOX_TABLE": "o`; DROP TABLE x"}, "expected a MySQL identifier"),
    ({"CACHESYNC_METRICS_LISTEN": "9464"}, "expected auto, off or host:port"),
    ({"CACHESYNC_TAILER_PACK_ROWS": "2.5"},
     "environment CACHESYNC_TAILER_PACK_ROWS: expected an integer, got '2.5'"),
    ({"CACHESYNC_REDIS_URL": "http://u:hunter2@h"}, "got 'http://u:***@h'"),
])
def test_out_of_range_values_are_refused_at_load_naming_the_field(cfg, env, message):
    with pytest.raises(ConfigError) as info:
        load(cfg, env)
    assert message in str(info.value)
    assert "hunter2" not in str(info.value)


def test_file_values_are_checked_too_and_name_the_file_and_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("consumer: {batch_size: 0, poll_timeout_s: .inf}\n"
                    "tables: {a.b: {keys: ['k:{id}']}}\n")
    with pytest.raises(ConfigError, match=r"c.yaml: consumer.batch_size: expected a number from 1"):
        load(path, {})


def test_sections_built_in_code_are_checked_too():
    from cachesync.runtime.config import ConsumerSettings, TailerSettings
    with pytest.raises(ConfigError, match=r"consumer.poll_timeout_s: expected a finite number"):
        ConsumerSettings(poll_timeout_s=float("inf"))
    with pytest.raises(ConfigError, match=r"tailer.pack_bytes: expected a number from 1,024"):
        TailerSettings(pack_bytes=10)
