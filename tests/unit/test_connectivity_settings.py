"""Connectivity settings (issue 15): kafka.security_protocol, kafka.sasl_* and kafka.ssl_* (the
options every python and Spark Kafka client is given), mysql.ssl_*, redis.sentinels."""

import pytest

from cachesync.runtime.config import KafkaSettings, Secret, load
from cachesync.runtime.kafka_security import client_security, spark_kafka_options
from cachesync.schema.errors import ConfigError

YAML = """
kafka:
  bootstrap_servers: "b-1.msk:9096,b-2.msk:9096"
  security_protocol: SASL_SSL
  sasl_mechanism: SCRAM-SHA-512
  sasl_username: cachesync
  ssl_cafile: /etc/ca.pem
tables:
  shop.users: {keys: ["user:{id}"]}
"""


def _sasl(**overrides) -> KafkaSettings:
    values = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                  sasl_username="u", sasl_password=Secret('p"w\\x'), ssl_cafile="/ca.pem")
    return KafkaSettings(**{**values, **overrides})


def test_password_from_file_reaches_the_client_and_never_the_repr(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(YAML)
    secret = tmp_path / "pw"
    secret.write_text("s3cr3t-kafka\n")
    s = load(cfg, {"CACHESYNC_KAFKA_SASL_PASSWORD_FILE": str(secret),
                   "CACHESYNC_KAFKA_SSL_CHECK_HOSTNAME": "false"})
    assert "s3cr3t-kafka" not in repr(s) and "s3cr3t-kafka" not in repr(s.kafka)
    assert client_security(s.kafka) == {
        "security_protocol": "SASL_SSL", "ssl_check_hostname": False, "ssl_cafile": "/etc/ca.pem",
        "ssl_certfile": None, "ssl_keyfile": None, "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "cachesync", "sasl_plain_password": "s3cr3t-kafka"}


def test_plaintext_passes_nothing_but_the_protocol():
    assert client_security(KafkaSettings()) == {"security_protocol": "PLAINTEXT"}
    assert spark_kafka_options(KafkaSettings()) == {"kafka.security.protocol": "PLAINTEXT"}


def test_ssl_without_sasl_passes_the_certificates_and_no_login():
    k = KafkaSettings(security_protocol="SSL", ssl_cafile="/ca", ssl_certfile="/c", ssl_keyfile="/k")
    assert client_security(k) == {"security_protocol": "SSL", "ssl_check_hostname": True,
                                  "ssl_cafile": "/ca", "ssl_certfile": "/c", "ssl_keyfile": "/k"}


def test_spark_gets_a_pem_truststore_and_an_escaped_jaas_line():
    assert spark_kafka_options(_sasl(ssl_check_hostname=False)) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                  'required username="u" password="p\\"w\\\\x";'}
    plain = spark_kafka_options(_sasl(sasl_mechanism="PLAIN", security_protocol="SASL_PLAINTEXT"))
    assert plain["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required")
    assert "kafka.ssl.truststore.location" not in plain


def test_spark_refuses_a_client_certificate_it_cannot_use():
    with pytest.raises(ConfigError, match="kafka.ssl_certfile: client certificates"):
        spark_kafka_options(_sasl(ssl_certfile="/c", ssl_keyfile="/k"))


@pytest.mark.parametrize("values, message", [
    ({"security_protocol": "SASL_SSL"}, "kafka.sasl_username and kafka.sasl_password: required"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u"}, "required with"),
    ({"security_protocol": "SSL", "ssl_certfile": "/c"}, "kafka.ssl_certfile and kafka.ssl_keyfile"),
    ({"security_protocol": "TLS"}, "kafka.security_protocol: expected one of"),
    ({"sasl_mechanism": "GSSAPI"}, "kafka.sasl_mechanism: expected one of"),
])
def test_incomplete_or_unknown_security_settings_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        KafkaSettings(**values)


def test_a_boolean_setting_refuses_what_is_not_one(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tables: {}\n")
    with pytest.raises(ConfigError, match="CACHESYNC_KAFKA_SSL_CHECK_HOSTNAME: expected true or false"):
        load(cfg, {"CACHESYNC_KAFKA_SSL_CHECK_HOSTNAME": "maybe"})


# ---------------------------------------------------------------- mysql.ssl_*
def test_mysql_tls_reaches_pymysql_the_binlog_stream_and_jdbc():
    from cachesync.commands.audit import jdbc_tls
    from cachesync.runtime.config import MySQLSettings
    plain = MySQLSettings()
    assert _params(plain).tls == () and jdbc_tls(plain) == ""
    assert "ssl_ca" not in _params(plain).client_options()
    m = MySQLSettings(ssl_ca="/ca.pem", ssl_cert="/c.pem", ssl_key="/k.pem", ssl_verify_identity=False)
    options = _params(m).client_options()     # what the tailer gives the binlog stream too
    assert {k: options[k] for k in ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert",
                                    "ssl_verify_identity")} == {
        "ssl_ca": "/ca.pem", "ssl_cert": "/c.pem", "ssl_key": "/k.pem", "ssl_verify_cert": True,
        "ssl_verify_identity": False}
    assert jdbc_tls(m) == "&sslMode=verify-ca&serverSslCert=/ca.pem"
    assert jdbc_tls(MySQLSettings(ssl_ca="/ca.pem")) == "&sslMode=verify-full&serverSslCert=/ca.pem"


def _params(m):
    from cachesync.runtime.mysql import MySQLParams
    from cachesync.wiring import tls_options
    return MySQLParams(m.host, m.port, m.user, "pw", tls=tls_options(m))


@pytest.mark.parametrize("values, message", [
    ({"ssl_ca": "/ca", "ssl_cert": "/c"}, "mysql.ssl_cert and mysql.ssl_key: set both"),
    ({"ssl_cert": "/c", "ssl_key": "/k"}, "mysql.ssl_ca: required with mysql.ssl_cert"),
])
def test_incomplete_mysql_tls_settings_are_refused(values, message):
    from cachesync.runtime.config import MySQLSettings
    with pytest.raises(ConfigError, match=message):
        MySQLSettings(**values)


# ---------------------------------------------------------------- redis.sentinels
@pytest.mark.parametrize("values, message", [
    ({"sentinels": "s1:26379"}, "redis.master_name: required with redis.sentinels"),
    ({"sentinels": "s1", "master_name": "m"}, "redis.sentinels: expected host:port"),
])
def test_incomplete_sentinel_settings_are_refused(values, message):
    from cachesync.runtime.config import RedisSettings
    with pytest.raises(ConfigError, match=message):
        RedisSettings(**values)


def test_sentinel_settings_show_in_the_repr_without_the_password():
    from cachesync.runtime.config import RedisSettings
    r = RedisSettings(url=Secret("redis://app:hunter2@x/0"), sentinels="s1:26379,s2:26379",
                      master_name="cachesync")
    assert "hunter2" not in repr(r) and "s2:26379" in repr(r) and "'cachesync'" in repr(r)


def test_kafka_admin_configuration_dump_never_shows_the_sasl_password(caplog):
    import logging

    import cachesync.runtime.kafka_login  # noqa: F401  (installs the filter, as wiring does)
    with caplog.at_level(logging.DEBUG, logger="kafka.admin.client"):
        logging.getLogger("kafka.admin.client").debug(
            "Starting KafkaAdminClient with configuration: %s", {"sasl_plain_password": "s3cr3t"})
    assert "s3cr3t" not in caplog.text and "Starting KafkaAdminClient" in caplog.text
