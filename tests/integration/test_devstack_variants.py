"""The devstack's variants (TLS, SASL, Cluster, Sentinel, a replica, a Spark cluster), each
started by name through devstack/stack.sh and proven with a real client. A variant that cannot start fails
its test (stack.sh's error is shown)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid

import pymysql
import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.net.sasl.oauth import AbstractTokenProvider
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from cachesync.client import read_through
from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
from cachesync.consumer.core.writes import CacheWrite, padded
from tests.support import stack_command, wait_for
from tests.support.variants import addresses, redis_cluster_tls_url, secret, start, unsecured_jwt

pytestmark = pytest.mark.integration



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
    wait_for(lambda: _failed_logins(env) > before, 60, what="the broker logging the refused login")


# ---------------------------------------------------------------- kafka-oauth
class _Token(AbstractTokenProvider):
    def __init__(self, token: str):
        super().__init__()
        self._token = token

    def token(self) -> str:
        return self._token


def _kafka_oauth(env: dict[str, str], token: str) -> dict:
    return dict(bootstrap_servers=env["DEVSTACK_KAFKA_OAUTH_BOOTSTRAP_SERVERS"],
                security_protocol=env["DEVSTACK_KAFKA_OAUTH_SECURITY_PROTOCOL"],
                sasl_mechanism=env["DEVSTACK_KAFKA_OAUTH_MECHANISM"],
                sasl_oauth_token_provider=_Token(token))


def test_kafka_oauth_accepts_a_token_with_the_scope_and_refuses_others():
    """kafka-python's own OAUTHBEARER login: a live token with the required scope carries a
    record; an expired one and one without the scope are refused (the broker logs why)."""
    env = start("kafka-oauth")
    scope = env["DEVSTACK_KAFKA_OAUTH_REQUIRED_SCOPE"]
    producer = KafkaProducer(**_kafka_oauth(env, unsecured_jwt(60, scope=scope)))
    producer.send(f"cs.oauth.{uuid.uuid4().hex[:8]}", value=b"x").get(timeout=30)
    producer.close()
    log = pathlib.Path(env["DEVSTACK_DIR"]) / "kafka-oauth" / "server.log"
    for token, why in ((unsecured_jwt(-60, scope=scope), "invalid_token"),
                       (unsecured_jwt(60, scope="other"), "insufficient_scope")):
        before = log.read_text(errors="replace").count(why)
        with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
            KafkaProducer(bootstrap_timeout_ms=3000, **_kafka_oauth(env, token))
        wait_for(lambda: log.read_text(errors="replace").count(why) > before, 60,
                 what=f"the broker logging the refused token ({why})")


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
            assert "REQUIRE SSL" in grants
            assert "SELECT, INSERT, UPDATE, DELETE, CREATE ON `cachesync`.*" in grants

    with pytest.raises(pymysql.err.OperationalError) as refused:
        _mysql_tls(env, ssl_disabled=True)   # PyMySQL would otherwise try TLS unverified
    assert refused.value.args[0] == 1045   # access denied: the account requires TLS


# ---------------------------------------------------------------- redis-tls
def _redis_tls(env: dict[str, str], **kwargs) -> redis.Redis:
    return redis.Redis.from_url(env["DEVSTACK_REDIS_TLS_URL"], ssl_ca_certs=env["DEVSTACK_REDIS_SSL_CA"],
                                ssl_check_hostname=True, socket_timeout=5, **kwargs)


def test_redis_tls_acl_user_can_do_what_the_consumer_and_read_through_do_and_nothing_more():
    env = start("redis-tls")
    client = _redis_tls(env, username=env["DEVSTACK_REDIS_TLS_USER"],
                        password=secret(env, "DEVSTACK_REDIS_TLS_PASSWORD_FILE"))
    key = f"variant:{uuid.uuid4().hex[:8]}"

    assert read_through(client, key, lambda: b"row", ttl_s=60) == b"row"
    assert client.get(key) == b"row"
    cache = RedisCache("", client=client)
    assert cache.delete([key]) == 1
    assert cache.write([CacheWrite(key, "json", padded(2), '{"v": 2}', 60, 0.1),
                        CacheWrite(key, "json", padded(1), '{"v": 1}', 60, 0.1)]).refused == 1
    assert client.get(key) == b'{"v": 2}'
    dedup = RedisDedupStore("", namespace=key, retention_s=60, client=client)
    token, _ = dedup.claim(["m1", "m2"], lease_s=30)
    dedup.confirm(token, ["m1", "m2"])
    wait_for(lambda: dedup.purge(0.001, 10) == 2, 60, what="the purge of two done records")

    for refused in (client.flushall, lambda: client.config_get("maxmemory"), lambda: client.keys("*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused()
    with pytest.raises(redis.exceptions.AuthenticationError):   # the default user is off
        _redis_tls(env).ping()
    plain = redis.Redis(host="127.0.0.1", port=client.connection_pool.connection_kwargs["port"],
                        socket_timeout=2, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.exceptions.ConnectionError):       # TLS only: plain text is dropped
        plain.ping()


# ---------------------------------------------------------------- redis-cluster
def test_redis_cluster_serves_keys_on_each_of_its_three_masters():
    env = start("redis-cluster")
    nodes = [ClusterNode(h, p) for h, p in addresses(env["DEVSTACK_REDIS_CLUSTER_NODES"])]
    cluster = RedisCluster(startup_nodes=nodes, socket_timeout=5)
    assert len(cluster.get_primaries()) == 3
    by_node: dict[str, str] = {}
    for i in range(1000):   # keys until one lands on each master
        key = f"variant:{uuid.uuid4().hex[:8]}:{i}"
        by_node.setdefault(cluster.get_node_from_key(key).name, key)
        if len(by_node) == 3:
            break
    assert len({cluster.keyslot(k) for k in by_node.values()}) == 3
    for node, key in by_node.items():
        assert cluster.set(key, node, px=60000)
        assert cluster.get(key) == node.encode()
    # and a replica each, in sync: a master lost is replaced by its replica
    replicas = [n for n in cluster.get_nodes() if n.server_type == "replica"]
    assert len(replicas) == 3
    for node in cluster.get_primaries():
        # WAITs shorter than the 5 s socket timeout: one cut by it would be re-sent by the
        # client's retry on a connection that wrote nothing, and return at once
        client = cluster.get_redis_connection(node)
        wait_for(lambda c=client: c.execute_command("WAIT", 1, 1000) == 1, 60,
                 what=f"{node.name}'s replica to acknowledge its write")
    cluster.close()


# ---------------------------------------------------------------- redis-cluster-tls
def test_redis_cluster_tls_serves_its_acl_user_over_tls_only():
    env = start("redis-cluster-tls")
    url = redis_cluster_tls_url(env, env["DEVSTACK_REDIS_CLUSTER_TLS_USER"],
                                secret(env, "DEVSTACK_REDIS_CLUSTER_TLS_PASSWORD_FILE"))
    cluster = RedisCluster.from_url(url, socket_timeout=5)
    assert len(cluster.get_primaries()) == 3 and len(cluster.get_nodes()) == 6
    key = f"variant:{uuid.uuid4().hex[:8]}"
    assert cluster.set(key, b"over tls", px=60000) and cluster.get(key) == b"over tls"
    with pytest.raises(redis.exceptions.NoPermissionError):    # least privilege: no FLUSHALL
        cluster.get_redis_connection(cluster.get_node_from_key(key)).flushall()
    cluster.close()
    host, port = addresses(env["DEVSTACK_REDIS_CLUSTER_TLS_NODES"])[0]
    plain = redis.Redis(host=host, port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.exceptions.ConnectionError):       # TLS only: plain text is dropped
        plain.ping()


# ---------------------------------------------------------------- redis-sentinel
def test_redis_sentinel_client_keeps_working_through_a_failover():
    env = start("redis-sentinel")
    name = env["DEVSTACK_REDIS_SENTINEL_MASTER_NAME"]
    sentinels = addresses(env["DEVSTACK_REDIS_SENTINELS"])
    sentinel = Sentinel(sentinels, socket_timeout=2)
    # the application's side: a client that retries a write refused by a demoted master
    master = sentinel.master_for(name, socket_timeout=2,
                                 retry=Retry(ExponentialBackoff(cap=1, base=0.05), 30),
                                 retry_on_error=[redis.exceptions.ReadOnlyError])
    before = sentinel.discover_master(name)
    key = f"variant:{uuid.uuid4().hex[:8]}"
    master.set(key, "written before", px=600000)
    # the replica has it, read there (a WAIT past the 2 s socket timeout would be re-sent by
    # the retry on a connection that wrote nothing, and return at once)
    replica = sentinel.slave_for(name, socket_timeout=2)
    wait_for(lambda: replica.get(key) == b"written before", 60, what="the write on the replica")

    host, port = sentinels[0]
    out = subprocess.run(["redis-cli", "-h", host, "-p", str(port), "SENTINEL", "FAILOVER", name],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    assert out.strip() == "OK"
    after = wait_for(lambda: (a := sentinel.discover_master(name)) != before and a, 60,
                     what="the sentinels to promote the replica")

    master.set(f"{key}:after", "written after", px=600000)
    assert master.get(key) == b"written before"
    assert master.get(f"{key}:after") == b"written after"
    assert master.connection_pool.get_master_address() == after


# ---------------------------------------------------------------- redis-aof
def test_redis_aof_keeps_what_it_acknowledged_through_a_kill_9():
    env = start("redis-aof")
    client = redis.Redis.from_url(env["DEVSTACK_REDIS_AOF_URL"], socket_timeout=5)
    assert client.config_get("appendfsync") == {"appendfsync": "always"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    key = f"variant:{uuid.uuid4().hex[:8]}"
    client.set(key, "acknowledged", px=600000)
    pid = int(client.info("server")["process_id"])
    subprocess.run(["kill", "-9", str(pid)], check=True)
    wait_for(lambda: subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode,
             60, what="the killed redis-aof to be gone")
    start("redis-aof")
    assert client.get(key) == b"acknowledged"
    client.delete(key)
    client.close()


# ---------------------------------------------------------------- mariadb-twin
def test_mariadb_twin_has_the_main_servers_gtid_identity_and_accounts():
    env = start("mariadb-twin")
    for user, password in (("DEVSTACK_MYSQL_ADMIN_USER", "DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"),
                           ("CACHESYNC_MYSQL_USER", "CACHESYNC_MYSQL_PASSWORD_FILE")):
        conn = pymysql.connect(host=env["DEVSTACK_MYSQL_TWIN_HOST"],
                               port=int(env["DEVSTACK_MYSQL_TWIN_PORT"]), user=env[user],
                               password=secret(env, password))
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, @@gtid_domain_id, @@binlog_format, "
                        "@@binlog_row_image, @@binlog_row_metadata, @@port")
            assert cur.fetchone() == (1, 0, "ROW", "FULL", "FULL",
                                      int(env["DEVSTACK_MYSQL_TWIN_PORT"]))
        conn.close()
    assert int(env["DEVSTACK_MYSQL_TWIN_PORT"]) == int(env["CACHESYNC_MYSQL_PORT"]) + 3


# ---------------------------------------------------------------- mariadb-replica
def test_mariadb_replica_follows_the_primary_and_promote_makes_it_writable(stack):
    env = start("mariadb-replica")
    name = f"variant_replica_{uuid.uuid4().hex[:8]}"
    table = f"cachesync.{name}"
    with stack.admin() as primary, primary.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO {table} VALUES (1, 'from primary')")

    def replica_as_cachesync():
        return pymysql.connect(host=env["DEVSTACK_MYSQL_REPLICA_HOST"],
                               port=int(env["DEVSTACK_MYSQL_REPLICA_PORT"]), user="cachesync",
                               password=secret(env, "CACHESYNC_MYSQL_PASSWORD_FILE"), autocommit=True)

    def replicated_row():
        with replica_as_cachesync() as conn, conn.cursor() as cur:
            if not cur.execute("SHOW TABLES FROM cachesync LIKE %s", (name,)):
                return None
            cur.execute(f"SELECT v FROM {table} WHERE id = 1")
            return cur.fetchone()
    assert wait_for(replicated_row, 60, what="the primary's row on the replica") == ("from primary",)

    with replica_as_cachesync() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@read_only, @@log_slave_updates, @@binlog_format, "
                    "@@gtid_strict_mode")
        assert cur.fetchone() == (2, 1, 1, "ROW", 1)
        with pytest.raises(pymysql.err.OperationalError) as refused:
            cur.execute(f"INSERT INTO {table} VALUES (2, 'on the replica')")
        assert refused.value.args[0] == 1290   # read-only

    stack_command("promote", "mariadb-replica")
    with replica_as_cachesync() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES (2, 'after promote')")
        cur.execute("SELECT @@read_only")
        assert cur.fetchone() == (0,)
    with stack.admin() as primary, primary.cursor() as cur:
        cur.execute(f"DROP TABLE {table}")


# ---------------------------------------------------------------- spark
SPARK_PROBE = r'''
import json, os, sys, time
from pyspark.sql import SparkSession

def executor_jvm(_):
    """This Python worker's pid, its interpreter, and the executor JVM it runs under."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
            worker = args[args.index(b"--worker-url") + 1].decode()
            time.sleep(0.3)                    # keep both executors busy
            return os.getpid(), sys.executable, pid, worker
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return os.getpid(), sys.executable, None, None

spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
deadline = time.monotonic() + 90
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.2)                            # the driver and both executors
rows = sc.parallelize(range(8), 8).map(executor_jvm).collect()
print("PROBE " + json.dumps({"driver": os.getpid(), "python": sys.executable, "rows": rows}))
spark.stop()
'''


def test_spark_standalone_runs_executors_in_their_own_jvms_and_pythons(tmp_path):
    env = start("spark")
    master = env["DEVSTACK_SPARK_MASTER_URL"]
    assert master.startswith("spark://127.0.0.1:")
    probe = tmp_path / "probe.py"
    probe.write_text(SPARK_PROBE)
    submit = pathlib.Path(env["DEVSTACK_SPARK_HOME"]) / "bin" / "spark-submit"
    done = subprocess.run(
        [str(submit), "--master", master, "--conf", "spark.executor.memory=512m",
         "--conf", f"spark.pyspark.python={env['DEVSTACK_SPARK_PYTHON']}",
         "--conf", f"spark.pyspark.driver.python={sys.executable}",
         "--conf", "spark.ui.enabled=false",
         str(probe)], capture_output=True, text=True, timeout=240,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.split("PROBE ", 1)[1].splitlines()[0])
    rows = found["rows"]
    workers = {w for _, _, _, w in rows}
    base = int(master.rsplit(":", 1)[1])
    assert workers == {f"spark://Worker@127.0.0.1:{base + 2}", f"spark://Worker@127.0.0.1:{base + 4}"}
    assert len({jvm for _, _, jvm, _ in rows}) == 2           # one executor JVM per worker
    # the executors' Python is the one the variant names, not the driver's venv
    assert {python for _, python, _, _ in rows} == {env["DEVSTACK_SPARK_PYTHON"]}
    assert found["python"] == sys.executable != env["DEVSTACK_SPARK_PYTHON"]
    assert found["driver"] not in {pid for pid, _, _, _ in rows}
