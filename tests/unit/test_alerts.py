"""The shipped Prometheus alert rules: valid for promtool, each firing on the series that
mean trouble and quiet on a healthy pipeline, every metric they use one cachesync exports,
and loaded by the compose Prometheus."""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "cachesync-alerts.yml"

# promtool unit tests: input series (1 sample a minute) and what must fire when
TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # tailer: checkpoint stuck since t=0 (a timestamp that stops moving)
      - series: 'cachesync_tailer_checkpoint_last_advance_timestamp_seconds{{instance="t1"}}'
        values: '0x20'
      # tailer: healthy, advancing with time
      - series: 'cachesync_tailer_checkpoint_last_advance_timestamp_seconds{{instance="t2"}}'
        values: '0+60x20'
      - series: 'cachesync_info{{role="tail",instance="t2",version="1"}}'
        values: '1x20'
      # tailer t1 stopped writing heartbeats at t=0; t2 writes them
      - series: 'cachesync_tailer_last_heartbeat_timestamp_seconds{{instance="t1"}}'
        values: '0x20'
      - series: 'cachesync_tailer_last_heartbeat_timestamp_seconds{{instance="t2"}}'
        values: '0+60x20'
      # one tailer name with a standby, one without
      - series: 'cachesync_tailer_active{{tailer="a",instance="t2"}}'
        values: '1x20'
      - series: 'cachesync_tailer_active{{tailer="a",instance="t3"}}'
        values: '0x20'
      - series: 'cachesync_tailer_active{{tailer="b",instance="t4"}}'
        values: '1x20'
      # consumer c1: lag growing; c2: lag steady and applying
      - series: 'cachesync_consumer_kafka_lag_messages{{instance="c1",partition="0"}}'
        values: '2000+100x20'
      - series: 'cachesync_consumer_kafka_lag_messages{{instance="c2",partition="0"}}'
        values: '5000x20'
      - series: 'cachesync_consumer_last_apply_timestamp_seconds{{instance="c2"}}'
        values: '0+60x20'
      - series: 'cachesync_consumer_last_apply_timestamp_seconds{{instance="c1"}}'
        values: '0x20'
      - series: 'cachesync_consumer_dead_letters_total{{instance="c1"}}'
        values: '0 0 0 0 0 3x15'
      - series: 'cachesync_consumer_dead_letters_total{{instance="c2"}}'
        values: '0x20'
      - series: 'cachesync_monitor_checks_total{{instance="c1",table="shop.users",result="stale"}}'
        values: '0 0 0 0 0 1x15'
      - series: 'cachesync_monitor_checks_total{{instance="c2",table="shop.users",result="consistent"}}'
        values: '0+10x20'
      - series: 'cachesync_consumer_dedup_purge_failures_total{{instance="c1"}}'
        values: '0+1x20'
      - series: 'cachesync_consumer_dedup_purge_failures_total{{instance="c2"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 10m
        alertname: CachesyncCheckpointNotMoving
        exp_alerts:
          - exp_labels: {{severity: critical, instance: t1}}
      - eval_time: 10m
        alertname: CachesyncHeartbeatsNotWritten
        exp_alerts:
          - exp_labels: {{severity: warning, instance: t1}}
      - eval_time: 10m
        alertname: CachesyncTailerNoStandby
        exp_alerts:
          - exp_labels: {{severity: warning, tailer: b}}
      - eval_time: 15m
        alertname: CachesyncConsumerLagGrowing
        exp_alerts:
          - exp_labels: {{severity: warning, instance: c1}}
      - eval_time: 15m
        alertname: CachesyncConsumerNotApplying
        exp_alerts:
          - exp_labels: {{severity: critical, instance: c1}}
      - eval_time: 8m
        alertname: CachesyncDeadLetters
        exp_alerts:
          - exp_labels: {{severity: warning, instance: c1}}
      - eval_time: 8m
        alertname: CachesyncStaleKeys
        exp_alerts:
          - exp_labels: {{severity: critical, instance: c1, table: shop.users}}
      - eval_time: 15m
        alertname: CachesyncDedupPurgeFailing
        exp_alerts:
          - exp_labels: {{severity: warning, instance: c1}}
      - eval_time: 3m
        alertname: CachesyncTailerDown
        exp_alerts: []
"""


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: apt-get install prometheus (`make test` installs it)")
    return path


def test_rules_pass_promtool_check_and_unit_tests(tmp_path):
    check = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # The unit tests compare labels; promtool would also want every annotation spelled out
    # (their templates are checked by `check rules` above)
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    bare = tmp_path / "rules.yml"
    bare.write_text(yaml.safe_dump(doc))
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(textwrap.dedent(TESTS.format(rules=bare)))
    run = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_promtool_test():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert alerts == set(re.findall(r"alertname: (\w+)", TESTS))


def test_every_metric_the_rules_use_is_exported():
    from cachesync.runtime import metrics
    source = Path(metrics.__file__).read_text()
    used = set(re.findall(r"\bcachesync_[a-z_]+", RULES.read_text()))
    for name in used:
        base = re.sub(r"_total$", "", name)
        assert f'"{base}"' in source or f'"{name}"' in source, name


def test_the_compose_prometheus_loads_the_rules():
    prom = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    mounted = {m.split(":")[1]: m.split(":")[0] for m in mounts}
    for rule_file in prom["rule_files"]:
        assert (ROOT / mounted[rule_file]).resolve() == RULES
