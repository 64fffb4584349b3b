"""`cachesync doctor` finds each problem it claims to find, each broken for real on the
devstack, and `cachesync topics create` creates the topics it checks."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from cachesync.doctor import FAIL, NOTE, PASS, WARN, skew_check
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.topics import admin_client, describe_topics
from cachesync.wiring import mysql_params
from tests.support import spawn, wait_for
from tests.support.variants import start as start_variant

pytestmark = pytest.mark.integration

TABLES = {"users": {"keys": ["user:{id}"]}}


def doctor(lab, cfg, env=None, *args) -> tuple[int, dict[str, list[dict]]]:
    """Exit code, and the checks by name."""
    out = subprocess.run([sys.executable, "-m", "cachesync", "doctor", "--json", "-c", cfg, *args],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, **lab.stack.env, **(env or {})})
    report = json.loads(out.stdout)
    by_name: dict[str, list[dict]] = {}
    for check in report["checks"]:
        by_name.setdefault(check["name"], []).append(check)
    return out.returncode, by_name


@pytest.fixture
def cfg(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY)")
    return lab.write_config(TABLES)


def _global(lab, name: str, value: str) -> str:
    with lab.stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        old = str(cur.fetchone()[0])
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    return old


def test_healthy_devstack_has_no_failure(lab, cfg):
    code, checks = doctor(lab, cfg)
    assert all(c["level"] != FAIL for cs in checks.values() for c in cs), checks
    assert checks["binlog-settings"][0]["level"] == PASS
    assert checks["grants-state"][0]["level"] == PASS
    assert checks["grants-tables"][0]["level"] == PASS
    assert all(c["level"] in (PASS, NOTE) for cs in checks.values() for c in cs), checks
    assert code == 0


def test_a_new_pipeline_is_ready_to_run(lab, cfg):
    """A new pipeline on a broker without topic auto-creation: topics that
    kafka.create_topics makes at start, and a group that has never consumed, are NOTEs; the
    exit is 0, so `cachesync doctor && cachesync run` works on a first start."""
    bootstrap = start_variant("kafka-noauto")["DEVSTACK_KAFKA_NOAUTO_BOOTSTRAP_SERVERS"]
    topic, dlq = f"cs.{lab.suffix}.new", f"cs.{lab.suffix}.new-dlq"
    env = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CACHESYNC_KAFKA_TOPIC": topic,
           "CACHESYNC_KAFKA_DEAD_LETTER_TOPIC": dlq, "CACHESYNC_KAFKA_CREATE_TOPICS": "true",
           "CACHESYNC_KAFKA_GROUP_ID": f"new-{lab.suffix}"}
    code, checks = doctor(lab, cfg, env)
    assert [c["level"] for c in checks["topic"]] == [NOTE, NOTE], checks["topic"]
    assert "kafka.create_topics" in checks["topic"][0]["detail"]
    [group] = checks["consumer-group"]
    assert group["level"] in (NOTE, PASS), group
    assert all(c["level"] in (PASS, NOTE) for cs in checks.values() for c in cs), checks
    assert code == 0
    # the plain text says so too, and the shell rule holds
    text = subprocess.run(f"{sys.executable} -m cachesync doctor -c {cfg} && echo READY",
                          shell=True, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env, **env})
    assert text.stdout.rstrip().endswith("READY"), text.stdout + text.stderr
    assert f"NOTE topic              {topic} does not exist yet" in text.stdout


def test_binlog_row_image_not_full_fails(lab, cfg):
    old = _global(lab, "binlog_row_image", "MINIMAL")
    try:
        code, checks = doctor(lab, cfg)
    finally:
        _global(lab, "binlog_row_image", old)
    [check] = checks["binlog-settings"]
    assert check["level"] == FAIL and "binlog_row_image=MINIMAL" in check["detail"]
    assert code == 6


def test_missing_replication_grants_fail(lab, cfg):
    user, password = f"nogrant{lab.suffix}", uuid.uuid4().hex
    with lab.stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
    try:
        code, checks = doctor(lab, cfg, {"CACHESYNC_MYSQL_USER": user,
                                         "CACHESYNC_MYSQL_PASSWORD": password,
                                         "CACHESYNC_MYSQL_PASSWORD_FILE": ""}, "--role", "tail")
    finally:
        with lab.stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'127.0.0.1'")
    [check] = checks["grants"]
    assert check["level"] == FAIL and "REPLICATION SLAVE" in check["detail"]
    assert "GRANT" in check["fix"] and code == 6
    [state] = checks["grants-state"]
    assert state["level"] == FAIL and "INSERT" in state["detail"]
    [tables] = checks["grants-tables"]
    assert tables["level"] == WARN and f"GRANT SELECT ON `{lab.db}`.*" in tables["fix"]


def test_gtid_strict_mode_off_warns(lab, cfg):
    old = _global(lab, "gtid_strict_mode", "OFF")
    try:
        _, checks = doctor(lab, cfg, None, "--role", "tail")
    finally:
        _global(lab, "gtid_strict_mode", "ON" if old in ("1", "ON") else old)
    assert checks["gtid"][0]["level"] == WARN
    [strict] = [c for c in checks["binlog-shaping"] if c["detail"].startswith("gtid_strict_mode=")]
    assert strict["level"] == WARN and "gtid_strict_mode" in strict["fix"]


def test_purged_checkpoint_binlog_fails(lab, cfg):
    settings = lab.settings(cfg)
    store = MySQLCheckpointStore(mysql_params(settings).connect, settings.tailer.name)
    try:
        store.save(Checkpoint("s", None, "purged-bin.000001", 4))
    finally:
        store.close()
    code, checks = doctor(lab, cfg, None, "--role", "tail")
    [check] = checks["binlog-retention"]
    assert check["level"] == FAIL and "purged-bin.000001" in check["detail"]
    assert "resync" in check["fix"] and code == 6


def test_topics_create_on_a_broker_without_auto_creation(lab, cfg):
    """On the kafka-noauto variant (auto.create.topics.enable=false): a missing topic is a
    doctor FAIL and a producer error, until `topics create` makes it."""
    bootstrap = start_variant("kafka-noauto")["DEVSTACK_KAFKA_NOAUTO_BOOTSTRAP_SERVERS"]
    topic, dlq = f"cs.{lab.suffix}.noauto", f"cs.{lab.suffix}.noauto-dlq"
    env = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CACHESYNC_KAFKA_TOPIC": topic,
           "CACHESYNC_KAFKA_DEAD_LETTER_TOPIC": dlq, "CACHESYNC_KAFKA_TOPIC_PARTITIONS": "4",
           "CACHESYNC_KAFKA_TOPIC_RETENTION_S": "86400"}
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=3000)
    with pytest.raises(KafkaError):           # the broker does not create it on first use
        producer.send(topic, b"x").get(10)
    producer.close()
    code, checks = doctor(lab, cfg, env)
    missing = [c for c in checks["topic"] if topic in c["detail"]]
    assert missing[0]["level"] == FAIL and "topics create" in missing[0]["fix"] and code == 6
    made = subprocess.run([sys.executable, "-m", "cachesync", "topics", "create", "-c", cfg],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env, **env})
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == [f"{topic}: created, 4 partition(s), retention 1 d",
                                        f"{dlq}: created, 4 partition(s), retention 1 d"]
    # a producer's default wait for the topic's metadata (the 3 s above, meant to fail fast,
    # is short for a loaded host)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, b"x").get(30)
    producer.close()
    _, checks = doctor(lab, cfg, env)
    assert [c["level"] for c in checks["topic"]] == [PASS, PASS]


def test_create_topics_setting_makes_consume_create_them(lab, cfg):
    bootstrap = start_variant("kafka-noauto")["DEVSTACK_KAFKA_NOAUTO_BOOTSTRAP_SERVERS"]
    topic, dlq = f"cs.{lab.suffix}.auto", f"cs.{lab.suffix}.auto-dlq"
    env = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CACHESYNC_KAFKA_TOPIC": topic,
           "CACHESYNC_KAFKA_DEAD_LETTER_TOPIC": dlq, "CACHESYNC_KAFKA_CREATE_TOPICS": "true"}
    spawn(lab, cfg, "consume", env=env)
    settings = lab.settings(cfg)
    admin = admin_client(dataclasses.replace(
        settings, kafka=dataclasses.replace(settings.kafka, bootstrap_servers=bootstrap)))
    try:
        wait_for(lambda: all(t.exists for t in describe_topics(admin, [topic, dlq])), 60,
                 what="consume to create both topics")
    finally:
        admin.close()


def test_topic_retention_over_dedup_retention_warns(lab, cfg):
    env = {"CACHESYNC_CONSUMER_DEDUP_RETENTION_S": "3600"}
    _, checks = doctor(lab, cfg, env)
    assert {c["level"] for c in checks["topic"]} == {WARN}
    assert "dedup_retention_s" in checks["topic"][0]["detail"]


def test_group_with_lag_and_no_member_warns(lab, cfg):
    _, checks = doctor(lab, cfg, None, "--role", "consume")
    [check] = checks["consumer-group"]
    assert check["level"] == PASS and "has not consumed" in check["detail"]
    # the group committed offset 0 and left; one record waits behind it
    tp = TopicPartition(lab.topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=lab.stack.bootstrap, group_id=f"g-{lab.suffix}",
                             enable_auto_commit=False)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(0, "", -1)})
    consumer.close()
    producer = KafkaProducer(bootstrap_servers=lab.stack.bootstrap)
    producer.send(lab.topic, b"x", key=b"k", partition=0).get(30)
    producer.close()
    _, checks = doctor(lab, cfg, None, "--role", "consume")
    [check] = checks["consumer-group"]
    assert check["level"] == WARN and "1 record(s)" in check["detail"], check
    # reading the end offsets logs nothing of kafka-python's (a group-less reader that
    # commits nothing: no "group_id is None: disabling auto-commit")
    text = subprocess.run([sys.executable, "-m", "cachesync", "doctor", "--role", "consume",
                           "-c", cfg], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **lab.stack.env})
    assert "1 record(s)" in text.stdout and text.stderr == "", text.stderr


def test_unreachable_redis_fails(lab, cfg):
    code, checks = doctor(lab, cfg, {"CACHESYNC_REDIS_URL": "redis://127.0.0.1:1/0"},
                          "--role", "consume")
    assert checks["redis"][0]["level"] == FAIL and code == 6


def test_clock_skew_over_a_second_warns():
    # clocks cannot be moved on a shared host; the threshold is what is tested here, the
    # readings are taken from MySQL and Redis in the other doctor tests (PASS)
    assert skew_check("mysql", 100.0, 98.5).level == WARN
    assert skew_check("mysql", 100.0, 99.5).level == PASS


def test_acl_denying_the_tailer_write_warns(lab, cfg):
    """On kafka-noauto (StandardAuthorizer): a DENY WRITE ACL for the configured SASL user
    is found; without an authorizer (the plain broker) the check passes saying so."""
    from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern, ResourceType)
    _, plain = doctor(lab, cfg, None, "--role", "tail")
    assert plain["kafka-acls"][0]["level"] == PASS
    bootstrap = start_variant("kafka-noauto")["DEVSTACK_KAFKA_NOAUTO_BOOTSTRAP_SERVERS"]
    user, topic = f"u{lab.suffix}", f"cs.{lab.suffix}.acl"
    env = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CACHESYNC_KAFKA_TOPIC": topic,
           "CACHESYNC_KAFKA_SASL_USERNAME": user}
    _, before = doctor(lab, cfg, env, "--role", "tail")
    assert before["kafka-acls"][0]["level"] == PASS
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_acls([ACL(f"User:{user}", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                               ResourcePattern(ResourceType.TOPIC, topic,
                                               ACLResourcePatternType.LITERAL))])
        _, after = wait_for(lambda: _denied(lab, cfg, env), 60, what="the ACL to be visible")
    finally:
        admin.close()
    [check] = after["kafka-acls"]
    assert check["level"] == WARN and f"{topic}: WRITE denied" in check["detail"]


def _denied(lab, cfg, env):
    result = doctor(lab, cfg, env, "--role", "tail")
    return result if result[1]["kafka-acls"][0]["level"] == WARN else None


def test_direct_role_checks_mysql_and_redis_and_never_kafka(lab, cfg):
    """`run --direct` needs no Kafka: with no broker at the configured address, `doctor`
    fails on Kafka, and `doctor --role direct` checks the server, the grants and Redis only."""
    no_kafka = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}   # nothing listens there
    code, everything = doctor(lab, cfg, no_kafka)
    assert code == 6 and any(c["level"] == FAIL for c in everything["kafka"]), everything
    code, checks = doctor(lab, cfg, no_kafka, "--role", "direct")
    assert not {"kafka", "topic", "kafka-acls", "consumer-group"} & set(checks), checks
    assert checks["binlog-settings"][0]["level"] == PASS
    assert checks["redis"][0]["level"] == PASS and "first-start" in checks
    assert all(c["level"] != FAIL for cs in checks.values() for c in cs), checks
    assert code in (0, 5)
