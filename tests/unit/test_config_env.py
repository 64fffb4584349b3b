"""Every problem of a settings file and the environment at once; which CACHESYNC_ variables
are settings, which are the project's others, and which are Kubernetes service links."""

import re
import subprocess
from pathlib import Path

import pytest

from cachesync.runtime.config import load, load_with_origins, section_fields
from cachesync.runtime.config_env import OTHER_VARIABLES, service_links
from cachesync.schema.errors import ConfigError

TABLES = "tables: {shop.users: {keys: ['user:{id}']}}\n"


def _load_problems(path, env) -> str:
    with pytest.raises(ConfigError) as info:
        load(path, env)
    return str(info.value)


def test_four_mistakes_of_a_file_and_the_environment_in_one_message(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {port: 0, hots: x}\nconsumer: {batch_size: many}\n"
                    "tables: {shop.users: {keys: ['user:{id}'], mode: nope}, bad: {keys: [k]}}\n")
    message = _load_problems(path, {"CACHESYNC_KAFKA_TOPIC": "a b", "CACHESYNC_MYSQL_HOTS": "y"})
    lines = message.splitlines()
    mysql = sorted(section_fields()["mysql"])
    assert lines[0] == "7 problems:"
    assert sorted(lines[1:]) == sorted([
        f"  - {path}: mysql: unknown field(s) ['hots']; expected some of {mysql}",
        f"  - {path}: mysql.port: expected a number from 1 to 65,535, got 0",
        f"  - {path}: consumer.batch_size: expected an integer, got 'many'",
        "  - environment CACHESYNC_KAFKA_TOPIC: expected a Kafka topic name ([A-Za-z0-9._-], "
        "1 to 249), got 'a b'",
        f"  - environment CACHESYNC_MYSQL_HOTS: no setting mysql.hots (did you mean host?); "
        f"mysql has {mysql}",
        f"  - {path}: tables.shop.users.mode: expected one of ['delete', 'update'], got 'nope'",
        f"  - {path}: tables.bad: table must be written as db.table",
    ])


def test_one_problem_reads_as_before(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(TABLES)
    assert _load_problems(path, {"CACHESYNC_MYSQL_PORT": "abc"}) == \
        "environment CACHESYNC_MYSQL_PORT: expected an integer, got 'abc'"


def test_cross_field_checks_still_run_per_section(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {ssl_cert: a.pem}\nredis: {sentinels: 'h:1'}\n" + TABLES)
    message = _load_problems(path, {})
    assert "mysql.ssl_cert and mysql.ssl_key: set both or neither" in message
    assert "redis.master_name: required with redis.sentinels" in message


@pytest.mark.parametrize("name", [
    "CACHESYNC_MYSQL_PASSWORD_FILE",       # a field's _FILE form
    "CACHESYNC_CONFIG", "CACHESYNC_ENV_FILE", "CACHESYNC_SPARK_MASTER",
    "CACHESYNC_SOMETHING_ELSE",            # not a section: not the settings' form
    "OTHER_MYSQL_HOTS",                    # not ours
])
def test_variables_that_are_not_refused(tmp_path, name):
    path = tmp_path / "c.yaml"
    path.write_text(TABLES)
    secret = tmp_path / "pw"
    secret.write_text("pw")
    load(path, {name: str(secret)})


def test_unknown_file_variable_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(TABLES)
    assert "no setting redis.urll_file (did you mean url?)" in \
        _load_problems(path, {"CACHESYNC_REDIS_URLL_FILE": "/x"})


# What Kubernetes injects for Services named cachesync-mysql and cachesync-redis-0 in the
# namespace (enableServiceLinks defaults to true)
K8S = {
    "CACHESYNC_MYSQL_SERVICE_HOST": "10.0.0.7", "CACHESYNC_MYSQL_SERVICE_PORT": "3306",
    "CACHESYNC_MYSQL_SERVICE_PORT_MYSQL": "3306",
    "CACHESYNC_MYSQL_PORT": "tcp://10.0.0.7:3306",
    "CACHESYNC_MYSQL_PORT_3306_TCP": "tcp://10.0.0.7:3306",
    "CACHESYNC_MYSQL_PORT_3306_TCP_PROTO": "tcp", "CACHESYNC_MYSQL_PORT_3306_TCP_PORT": "3306",
    "CACHESYNC_MYSQL_PORT_3306_TCP_ADDR": "10.0.0.7",
    "CACHESYNC_REDIS_0_SERVICE_HOST": "10.0.0.8", "CACHESYNC_REDIS_0_PORT": "tcp://10.0.0.8:6379",
}


def test_kubernetes_service_links_are_never_settings(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {port: 3307}\n" + TABLES)
    assert service_links(K8S) == set(K8S)
    settings, origins = load_with_origins(path, K8S)
    assert settings.mysql.port == 3307 and origins["mysql.port"] == str(path)


def test_a_setting_beside_service_links_is_still_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(TABLES)
    env = {**K8S, "CACHESYNC_MYSQL_PORT": "3308"}       # the pod's own env wins over the link
    assert load(path, env).mysql.port == 3308
    # without the Service's _SERVICE_HOST, a tcp:// value is a bad port, not a link
    assert "expected an integer, got 'tcp://10.0.0.7:3306'" in \
        _load_problems(path, {"CACHESYNC_MYSQL_PORT": "tcp://10.0.0.7:3306"})


def test_origins_name_default_file_and_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("mysql: {host: db}\n" + TABLES)
    secret = tmp_path / "pw"
    secret.write_text("pw")
    _, origins = load_with_origins(path, {"CACHESYNC_MYSQL_PORT": "1",
                                          "CACHESYNC_MYSQL_PASSWORD_FILE": str(secret)})
    assert origins["mysql.host"] == str(path)
    assert origins["mysql.port"] == "environment CACHESYNC_MYSQL_PORT"
    assert origins["mysql.password"] == "environment CACHESYNC_MYSQL_PASSWORD_FILE"
    assert origins["kafka.topic"] == "default"


def test_every_cachesync_variable_the_project_reads_is_a_setting_or_listed():
    """A variable a script or module reads that is neither a setting nor in OTHER_VARIABLES
    would be refused (if of a section's form) or undocumented."""
    root = Path(__file__).resolve().parents[2]
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "Makefile", "*.yml"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
    used = set()
    for name in tracked:
        if name.startswith("tests/"):
            continue
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        used |= set(re.findall(r"\bCACHESYNC_[A-Z][A-Z0-9_]*[A-Z0-9]\b", text))
    setting_names = {f"CACHESYNC_{section}_{name}".upper()
                     for section, names in section_fields().items() for name in names}
    allowed = setting_names | {f"{n}_FILE" for n in setting_names} | set(OTHER_VARIABLES)
    # names in code that are not environment variables (constants spelled like them)
    constants = {"CACHESYNC_DOUBLE_DELETE_S"}
    assert sorted(used - allowed - constants) == []
