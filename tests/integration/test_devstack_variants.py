"""The devstack's variants (TLS, SASL, Cluster, Sentinel, a replica), each started by name
through devstack/stack.sh and proven with a real client. A variant that cannot start fails
its test (stack.sh's error is shown)."""

from __future__ import annotations

import pathlib
import subprocess
import uuid

import pymysql
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from cachesync import config
from cachesync.devstack import default_env_file
from tests.support import stack_command, wait_for

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]


def start(variant: str) -> dict[str, str]:
    """Start a variant (idempotent) and return the env file's facts; fails with stack.sh's error."""
    try:
        stack_command("up", variant)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"stack.sh up {variant} failed:\n{e.stderr.decode(errors='replace')}")
    return config.read_env_file(default_env_file(ROOT))


def secret(env: dict[str, str], key: str) -> str:
    """The secret in the file the env key ``<key>`` names."""
    return pathlib.Path(env[key]).read_text(encoding="utf-8").strip()


# ---------------------------------------------------------------- kafka-sasl
def _kafka_sasl(env: dict[str, str], mechanism: str, password: str) -> dict:
    return dict(bootstrap_servers=env["DEVSTACK_KAFKA_SASL_BOOTSTRAP_SERVERS"],
                security_protocol=env["DEVSTACK_KAFKA_SASL_SECURITY_PROTOCOL"],
                ssl_cafile=env["DEVSTACK_KAFKA_SSL_CAFILE"], sasl_mechanism=mechanism,
                sasl_plain_username=env["DEVSTACK_KAFKA_SASL_USERNAME"],
                sasl_plain_password=password)


def _failed_logins(env: dict[str, str]) -> int:
    log = pathlib.Path(env["DEVSTACK_DIR"]) / "kafka-sasl" / "server.log"
    return log.read_text(errors="replace").count("due to invalid credentials")


def test_kafka_sasl_ssl_carries_records_for_every_mechanism_and_refuses_a_wrong_password():
    env = start("kafka-sasl")
    password = secret(env, "DEVSTACK_KAFKA_SASL_PASSWORD_FILE")
    mechanisms = env["DEVSTACK_KAFKA_SASL_MECHANISMS"].split(",")
    assert env["DEVSTACK_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512" and "SCRAM-SHA-256" in mechanisms
    topic = f"cs.sasl.{uuid.uuid4().hex[:8]}"
    for mechanism in mechanisms:
        producer = KafkaProducer(**_kafka_sasl(env, mechanism, password))
        producer.send(topic, value=mechanism.encode()).get(timeout=30)
        producer.close()

    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", group_id=None,
                             **_kafka_sasl(env, "SCRAM-SHA-512", password))
    seen: list[bytes] = []

    def all_read():
        for records in consumer.poll(timeout_ms=500).values():
            seen.extend(r.value for r in records)
        return len(seen) >= len(mechanisms)
    wait_for(all_read, 60, what="the records sent over SASL_SSL")
    consumer.close()
    assert sorted(seen) == sorted(m.encode() for m in mechanisms)

    before = _failed_logins(env)
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_timeout_ms=3000, **_kafka_sasl(env, "SCRAM-SHA-512", "wrong"))
    wait_for(lambda: _failed_logins(env) > before, 10, what="the broker logging the refused login")


# ---------------------------------------------------------------- mariadb-tls
def _mysql_tls(env: dict[str, str], **kwargs) -> pymysql.connections.Connection:
    return pymysql.connect(host=env["DEVSTACK_MYSQL_TLS_HOST"], port=int(env["DEVSTACK_MYSQL_TLS_PORT"]),
                           user=env["DEVSTACK_MYSQL_TLS_USER"],
                           password=secret(env, "DEVSTACK_MYSQL_TLS_PASSWORD_FILE"), **kwargs)


def test_mariadb_tls_user_connects_over_verified_tls_and_is_refused_without():
    env = start("mariadb-tls")
    ca_only = {"ca": env["DEVSTACK_MYSQL_SSL_CA"]}   # pymysql then checks the host name too
    with_cert = {**ca_only, "cert": env["DEVSTACK_MYSQL_SSL_CERT"], "key": env["DEVSTACK_MYSQL_SSL_KEY"]}
    for ssl in (ca_only, with_cert):
        with _mysql_tls(env, ssl=ssl) as conn, conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            assert cur.fetchone()[1].startswith("TLSv1.")
            cur.execute("SHOW GRANTS")
            grants = " ".join(row[0] for row in cur.fetchall())
            assert "REQUIRE SSL" in grants and "SELECT, INSERT, UPDATE, DELETE, CREATE ON `cachesync`.*" in grants

    with pytest.raises(pymysql.err.OperationalError) as refused:
        _mysql_tls(env, ssl_disabled=True)   # PyMySQL would otherwise try TLS unverified
    assert refused.value.args[0] == 1045   # access denied: the account requires TLS
