"""The pipeline against the devstack's mariadb-tls variant as its REQUIRE SSL account
(`cachesync_tls`): pymysql sessions and the binlog stream both over verified TLS
(mysql.ssl_ca, host name checked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.variants import use_mariadb_tls
from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}


@pytest.fixture
def tls_lab(lab, monkeypatch):
    """The lab moved onto the TLS server, connecting as cachesync_tls with mysql.ssl_ca."""
    cleanup = use_mariadb_tls(lab, monkeypatch)
    yield lab
    cleanup()


def test_tail_and_consume_as_a_require_ssl_account(tls_lab):
    lab = tls_lab
    settings = lab.settings(lab.write_config(USERS))
    assert settings.mysql.user == "cachesync_tls" and settings.mysql.ssl_ca
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(USERS, consumer={"dedup_store": "mysql"})
    lab.start_tailer(cfg)              # its checkpoint is on the TLS server's state database
    engine = lab.start_engine(cfg)     # dedup records there too (the MySQL store)
    lab.cache("user:1", "user:2")
    lab.sql("INSERT INTO users VALUES (1, 'Ada')")
    wait_for(lambda: not lab.cached("user:1"), 60, what="invalidation from the TLS server's binlog")
    assert lab.cached("user:2") == ["user:2"]
    sessions = lab.sql("SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'cachesync_tls'")
    assert sessions[0][0] >= 2         # the binlog dump and the state sessions, all REQUIRE SSL
    wait_for(lambda: lab.dedup_rows("done") >= 1, 60, what="the dedup record on the TLS server")
    lab.stop_engine(engine)


def test_a_server_certificate_from_another_ca_stops_the_tailer_with_exit_3(tls_lab, tmp_path):
    """Proves mysql.ssl_ca is applied: PyMySQL alone would encrypt without verifying."""
    lab = tls_lab
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=not the devstack CA", "-keyout", str(tmp_path / "other.key"),
                    "-out", str(other_ca)], check=True, capture_output=True, timeout=60)
    cfg = lab.write_config(USERS)
    out = subprocess.run([sys.executable, "-m", "cachesync", "tail", "--config", cfg],
                         env={**os.environ, **lab.stack.env, "CACHESYNC_MYSQL_SSL_CA": str(other_ca)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr[-3000:]
    assert "cachesync: MySQL's TLS certificate failed verification" in out.stderr


def test_audit_reads_the_table_through_jdbc_over_tls(tls_lab):
    """Issue 15's untested path: audit's JDBC URL carries the TLS settings (sslMode=verify-full,
    serverSslCert); the account REQUIRE SSL refuses any other login. One small Spark run."""
    from cachesync.commands.audit import run_audit
    lab = tls_lab
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    lab.sql("INSERT INTO users VALUES (1, 'Ada'), (2, 'Bob'), (3, 'Cy')")
    settings = lab.settings(lab.write_config(USERS))
    assert settings.mysql.user == "cachesync_tls" and settings.mysql.ssl_ca
    lab.redis.set(f"{lab.prefix}user:1", b'{"id": 1, "name": "Ada"}', ex=600)
    lab.redis.set(f"{lab.prefix}user:2", b'{"id": 2, "name": "Old"}', ex=600)
    report = run_audit(settings, f"{lab.db}.users", partitions=1, spark_master="local[1]")
    assert (report.rows, report.consistent, report.stale, report.missing) == (3, 1, 1, 1)
    assert report.stale_keys == [f"{lab.prefix}user:2"]


def test_mysql_ssl_verifies_against_the_system_trust_store(tls_lab, tmp_path):
    """mysql.ssl without ssl_ca: the system's CAs (SSL_CERT_FILE points OpenSSL at them, as a
    system whose bundle holds the server's CA would) verify the server; another bundle fails."""
    lab = tls_lab
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(USERS)
    devstack_ca = lab.stack.env["CACHESYNC_MYSQL_SSL_CA"]
    env = {**os.environ, **lab.stack.env, "CACHESYNC_MYSQL_SSL_CA": "", "CACHESYNC_MYSQL_SSL": "true",
           "CACHESYNC_CONSUMER_DEDUP_STORE": "mysql"}      # dedup purge then reads MySQL
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=not the devstack CA", "-keyout", str(tmp_path / "other.key"),
                    "-out", str(other_ca)], check=True, capture_output=True, timeout=60)
    refused = subprocess.run([sys.executable, "-m", "cachesync", "dedup", "purge", "--config", cfg],
                             env={**env, "SSL_CERT_FILE": str(other_ca)}, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "cachesync: MySQL's TLS certificate failed verification" in refused.stderr
    trusted = subprocess.run([sys.executable, "-m", "cachesync", "dedup", "purge", "--config", cfg],
                             env={**env, "SSL_CERT_FILE": devstack_ca}, capture_output=True,
                             text=True, timeout=120)
    # cachesync_tls is a REQUIRE SSL account: connecting at all proves TLS was on
    assert trusted.returncode == 0, trusted.stderr[-3000:]
    assert "purged 0 done record(s)" in trusted.stdout
