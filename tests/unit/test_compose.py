"""No Docker engine runs here, so docker-compose.yml is checked against the code instead."""

import pathlib
import re

import yaml

from cachesync.runtime import config

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_every_cachesync_variable_is_a_real_setting():
    env = SERVICES["cachesync-tail"]["environment"]
    fields = {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
              for section, cls in config.SECTIONS.items() for f in config.dataclasses.fields(cls)}
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


CACHESYNC_SERVICES = [n for n, s in SERVICES.items() if s.get("build")]


def _setting_names() -> set[str]:
    return {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            for section, cls in config.SECTIONS.items() for f in config.dataclasses.fields(cls)}


def test_every_cachesync_service_loads_its_settings_and_serves_metrics_where_published():
    from cachesync.http import parse_listen
    assert set(CACHESYNC_SERVICES) >= {"cachesync-tail", "cachesync-consume", "cachesync-tail-mysql"}
    for name in CACHESYNC_SERVICES:
        env = dict(SERVICES[name]["environment"])
        assert {k for k in env if k.startswith("CACHESYNC_")} <= _setting_names() | {"CACHESYNC_CONFIG"}
        s = config.load(ROOT / env.pop("CACHESYNC_CONFIG").removeprefix("/app/"), env)
        role = SERVICES[name]["command"][0]
        host, port = parse_listen(s.metrics.listen, role)
        assert host == "0.0.0.0", f"{name}: Prometheus scrapes it from another container"
        assert any(p.endswith(f":{port}") for p in SERVICES[name]["ports"]), name
        assert f":{port}/readyz" in " ".join(SERVICES[name]["healthcheck"]["test"]), name


def test_prometheus_scrapes_every_cachesync_service_on_its_metrics_port():
    prom = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = {f"{n}:{SERVICES[n]['environment']['CACHESYNC_METRICS_LISTEN'].rsplit(':', 1)[1]}"
                for n in CACHESYNC_SERVICES}
    assert targets == expected


def test_healthy_conditions_point_at_services_with_a_healthcheck_and_profiles_hold():
    for name, svc in SERVICES.items():
        for dep, cond in svc.get("depends_on", {}).items():
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep}'s health"
            # a default service must not depend on a profile-only one
            if not svc.get("profiles"):
                assert not SERVICES[dep].get("profiles"), f"{name} -> {dep}"


def test_mysql_profile_has_the_same_binlog_settings_plus_gtid():
    flags = SERVICES["mysql"]["command"]
    assert SERVICES["mysql"]["image"].startswith("mysql:8.4")
    for flag in SERVICES["mariadb"]["command"]:
        if flag.startswith(("--binlog-", "--log-bin")):
            assert flag in flags, flag
    assert {"--gtid-mode=ON", "--enforce-gtid-consistency=ON"} <= set(flags)
    init = (ROOT / "docker" / "mysql-init.sql").read_text()
    for grant in ("REPLICATION SLAVE, REPLICATION CLIENT ON *.*", "SELECT ON demo.*",
                  "SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.*"):
        assert grant in init, grant


def test_every_bind_mount_exists_in_the_repository():
    for name, svc in SERVICES.items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"


def test_the_dashboard_queries_only_metrics_cachesync_exports():
    import json

    from cachesync.runtime import metrics
    dash = json.loads((ROOT / "docker" / "grafana" / "dashboards" / "cachesync.json").read_text())
    exported = {f"{n}_total" for n in (*metrics.CONSUMER_COUNTERS, *metrics.TAILER_COUNTERS,
                                       *metrics.RELAY_COUNTERS)} | set(metrics.MONITOR_METRICS)
    gauges = {"cachesync_consumer_commit_to_apply_seconds", "cachesync_consumer_last_commit_to_apply_seconds",
              "cachesync_tailer_checkpoint_age_seconds", "cachesync_consumer_kafka_lag_messages"}
    src = (ROOT / "cachesync" / "runtime" / "metrics.py").read_text()
    assert all(f'"{g}"' in src for g in gauges)
    exported |= gauges | {"cachesync_consumer_commit_to_apply_seconds_bucket"}
    used = {m for p in dash["panels"] for t in p["targets"]
            for m in re.findall(r"cachesync_[a-z_]+", t["expr"])}
    assert used and used <= exported, used - exported


def test_the_dashboard_shows_consistency_nines_from_the_monitors_checks():
    import json

    from cachesync.runtime.metrics import MonitorCollector
    dash = json.loads((ROOT / "docker" / "grafana" / "dashboards" / "cachesync.json").read_text())
    nines = [t["expr"] for p in dash["panels"] if "nines" in p["title"].lower()
             for t in p["targets"]]
    assert len(nines) == 1
    # stale over consistent + stale, from the counter the monitor exports with these labels
    assert 'cachesync_monitor_checks_total{result="stale"}' in nines[0]
    assert 'cachesync_monitor_checks_total{result=~"consistent|stale"}' in nines[0]
    assert "sum by (table)" in nines[0] and "-log10(" in nines[0]

    class Idle:
        pending = 0

        def snapshot(self):
            return {("app.t", "stale"): 1, ("app.t", "consistent"): 9}, {}, 0, 0
    family = next(iter(MonitorCollector(Idle()).collect()))
    assert [(s.name, s.labels) for s in family.samples][0] == (
        "cachesync_monitor_checks_total", {"table": "app.t", "result": "consistent"})


def test_the_writer_script_speaks_to_both_servers():
    text = (ROOT / "docker" / "writer.sh").read_text()
    assert "${DB_CLIENT:-mariadb}" in text and "${DB_HOST:-mariadb}" in text
    for name in ("writer", "writer-mysql"):
        env = SERVICES[name]["environment"]
        assert env["DB_HOST"] in SERVICES and env["DB_CLIENT"] in ("mariadb", "mysql")
