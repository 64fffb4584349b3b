"""The pipeline with every connection secured at once, as production runs it: `tail` reads
the binlog of the mariadb-tls variant over verified TLS as its REQUIRE SSL account and
publishes to the kafka-sasl variant (SCRAM-SHA-512 over TLS); `consume`, another process,
reads it there and invalidates in the redis-tls variant as its least-privilege ACL user.
Every secret comes from a file and none reaches a log."""

from __future__ import annotations

import os
import pathlib

import pytest

from cachesync.runtime import config
from tests.support import spawn, wait_for
from tests.support.variants import use_kafka_sasl, use_mariadb_tls, use_redis_tls

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}


@pytest.fixture
def secured(lab, monkeypatch):
    """(lab, config, environment): MySQL over TLS, Redis over TLS, Kafka over SASL_SSL."""
    cleanup = use_mariadb_tls(lab, monkeypatch)
    use_redis_tls(lab, monkeypatch)
    cfg = lab.write_config(USERS, consumer={"dedup_store": "mysql"})   # records on the TLS MySQL
    yield lab, cfg, use_kafka_sasl(lab, cfg)
    cleanup()


def test_tail_and_consume_over_tls_mysql_sasl_kafka_and_tls_redis(secured):
    lab, cfg, kafka = secured
    environ = {**os.environ, **lab.stack.env, **kafka}
    settings = config.load(cfg, environ)
    assert settings.mysql.user == "cachesync_tls" and settings.mysql.ssl_ca
    assert settings.kafka.security_protocol == "SASL_SSL"
    assert settings.redis.url.startswith("rediss://")
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    before = lab.checkpoint_updated_at()
    tailer = spawn(lab, cfg, "tail", env=kafka)
    wait_for(lambda: lab._alive(tailer) and lab.checkpoint_updated_at() != before, 90,
             what="the tailer's start checkpoint on the TLS server")
    consumer = spawn(lab, cfg, "consume", env=kafka)
    lab.cache("user:1", "user:2")
    lab.sql("INSERT INTO users VALUES (1, 'Ada')")
    wait_for(lambda: lab._alive(consumer) and not lab.cached("user:1"), 120,
             what="invalidation through TLS MySQL, SASL_SSL Kafka and TLS Redis")
    assert lab.cached("user:2") == ["user:2"]
    wait_for(lambda: lab.dedup_rows("done") >= 1, 60, what="the dedup record on the TLS server")
    assert lab.topic_records() == []          # the plain broker's copy of the topic saw nothing
    secrets = [pathlib.Path(environ[key]).read_text().strip()
               for key in ("CACHESYNC_MYSQL_PASSWORD_FILE", "CACHESYNC_KAFKA_SASL_PASSWORD_FILE")]
    secrets.append(settings.redis.url.split("@")[0].rsplit(":", 1)[1])   # the ACL password
    assert all(secrets)
    for proc in (tailer, consumer):
        log = lab.log(proc)
        assert not any(secret in log for secret in secrets)
    lab.redis.delete(lab.prefix + "user:2")
