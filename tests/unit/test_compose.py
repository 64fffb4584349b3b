"""No Docker engine runs here, so docker-compose.yml is checked against the code instead."""

import pathlib
import re

import yaml

from cachesync import config

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_every_cachesync_variable_is_a_real_setting():
    env = SERVICES["cachesync-tail"]["environment"]
    fields = {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
              for section, cls in config._SECTIONS.items() for f in config.dataclasses.fields(cls)}
    unknown = {k for k in env if k.startswith("CACHESYNC_") and k not in fields | {"CACHESYNC_CONFIG"}}
    assert unknown == set()


def test_the_settings_load_with_the_compose_environment():
    env = dict(SERVICES["cachesync-consume"]["environment"])
    path = ROOT / env.pop("CACHESYNC_CONFIG").removeprefix("/app/")
    s = config.load(path, env)
    assert (s.mysql.host, s.kafka.bootstrap_servers, s.redis.url) == ("mariadb", "kafka:9092",
                                                                      "redis://redis:6379/0")


def test_mariadb_has_the_binlog_settings_the_tailer_checks():
    flags = " ".join(SERVICES["mariadb"]["command"])
    for flag in ("--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL",
                 "--log-bin", "--server-id="):
        assert flag in flags
    devstack = (ROOT / "devstack" / "stack.sh").read_text()
    for flag in ("--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL"):
        assert flag in devstack, f"devstack and compose disagree on {flag}"


def test_grants_match_the_devstack():
    init = (ROOT / "docker" / "mariadb-init.sql").read_text()
    devstack = (ROOT / "devstack" / "stack.sh").read_text()
    for grant in ("REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "SELECT ON demo.*",
                  "SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.*"):
        assert grant in init and grant in devstack, grant


def test_topics_match_the_config_defaults_and_devstack():
    init = " ".join(SERVICES["kafka-init"]["command"])
    defaults = config.KafkaSettings()
    for topic in (defaults.topic, defaults.dead_letter_topic):
        assert f"--topic {topic}" in init
    assert re.search(r"cachesync\.changes.*6", (ROOT / "devstack" / "stack.sh").read_text())


def test_ports_bind_to_loopback_and_dependencies_exist():
    for name, svc in SERVICES.items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for dep in svc.get("depends_on", {}):
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
