"""Starting the devstack's secured and clustered variants from tests, and reading their facts."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pathlib
import subprocess
import time
from urllib.parse import quote

import pytest
import redis
from redis.cluster import RedisCluster

from cachesync.runtime import config
from cachesync.runtime.env_file import read_env_file
from cachesync.devstack import default_env_file
from cachesync.runtime.kafka_security import client_security
from tests.support import create_topics, stack_command

ROOT = pathlib.Path(__file__).resolve().parents[2]


def start(variant: str) -> dict[str, str]:
    """Start a variant (idempotent) and return the env file's facts; fails with stack.sh's error."""
    try:
        stack_command("up", variant)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"stack.sh up {variant} failed:\n{e.stderr.decode(errors='replace')}")
    return read_env_file(default_env_file(ROOT))


def secret(env: dict[str, str], key: str) -> str:
    """The secret in the file the env key ``<key>`` names."""
    return pathlib.Path(env[key]).read_text(encoding="utf-8").strip()


def addresses(value: str) -> list[tuple[str, int]]:
    """``h1:p1,h2:p2`` -> ``[(h1, p1), (h2, p2)]``."""
    return [(host, int(port)) for host, port in (a.rsplit(":", 1) for a in value.split(","))]


def redis_cluster() -> RedisCluster:
    """A client of the devstack's 3-master redis-cluster variant (started if it is not)."""
    env = start("redis-cluster")
    return RedisCluster.from_url(env["DEVSTACK_REDIS_CLUSTER_URL"], socket_timeout=5)


def use_redis_cluster(lab, monkeypatch) -> RedisCluster:
    """Point a Lab at the redis-cluster variant: its own client (``lab.redis``) and the
    settings every process it starts loads (``redis.url`` a node, ``redis.cluster``)."""
    env = start("redis-cluster")
    client = RedisCluster.from_url(env["DEVSTACK_REDIS_CLUSTER_URL"], socket_timeout=5)
    monkeypatch.setattr(lab, "redis", client)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(lab.stack, env={
        **lab.stack.env, "CACHESYNC_REDIS_URL": env["DEVSTACK_REDIS_CLUSTER_URL"],
        "CACHESYNC_REDIS_CLUSTER": "true",
        "CACHESYNC_REDIS_CLUSTER_NODES": env["DEVSTACK_REDIS_CLUSTER_NODES"]}))
    return client


def redis_cluster_tls_url(env: dict[str, str], user: str, password: str) -> str:
    """A rediss:// URL of a node of the redis-cluster-tls variant as ``user``, the devstack CA
    checked (the other nodes are discovered, over TLS too)."""
    host = env["DEVSTACK_REDIS_CLUSTER_TLS_URL"].removeprefix("rediss://")
    return (f"rediss://{quote(user, safe='')}:{quote(password, safe='')}@{host}"
            f"?ssl_ca_certs={quote(env['DEVSTACK_REDIS_SSL_CA'])}")


def use_redis_cluster_tls(lab, monkeypatch) -> RedisCluster:
    """Point a Lab at the redis-cluster-tls variant: its admin's cluster client as
    ``lab.redis``, and the least-privilege ACL user's URL with ``redis.cluster`` for every
    process it starts; returns the admin client."""
    env = start("redis-cluster-tls")
    url = redis_cluster_tls_url(env, env["DEVSTACK_REDIS_CLUSTER_TLS_USER"],
                                secret(env, "DEVSTACK_REDIS_CLUSTER_TLS_PASSWORD_FILE"))
    admin = RedisCluster.from_url(redis_cluster_tls_url(
        env, env["DEVSTACK_REDIS_CLUSTER_TLS_ADMIN_USER"],
        secret(env, "DEVSTACK_REDIS_CLUSTER_TLS_ADMIN_PASSWORD_FILE")), socket_timeout=5)
    monkeypatch.setattr(lab, "redis", admin)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(lab.stack, env={
        **lab.stack.env, "CACHESYNC_REDIS_URL": url, "CACHESYNC_REDIS_CLUSTER": "true",
        "CACHESYNC_REDIS_CLUSTER_NODES": env["DEVSTACK_REDIS_CLUSTER_TLS_NODES"]}))
    return admin


def use_redis_aof(lab, monkeypatch) -> redis.Redis:
    """Point a Lab at the redis-aof variant (a durable Redis: AOF fsynced on every write,
    noeviction) for its own client and every process it starts (cache and dedup store)."""
    env = start("redis-aof")
    client = redis.Redis.from_url(env["DEVSTACK_REDIS_AOF_URL"], socket_timeout=5)
    monkeypatch.setattr(lab, "redis", client)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(lab.stack, env={
        **lab.stack.env, "CACHESYNC_REDIS_URL": env["DEVSTACK_REDIS_AOF_URL"]}))
    return client


def use_kafka_sasl(lab, config_path: str) -> dict[str, str]:
    """The environment that points processes of ``lab`` at the kafka-sasl variant (SCRAM-SHA-512
    over TLS, the CA checked), with the lab's topics created there.

    Environment variables, because they must win over the plain broker's
    CACHESYNC_KAFKA_BOOTSTRAP_SERVERS in the devstack's env file.
    """
    env = start("kafka-sasl")
    overrides = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": env["DEVSTACK_KAFKA_SASL_BOOTSTRAP_SERVERS"],
                 "CACHESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                 "CACHESYNC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                 "CACHESYNC_KAFKA_SASL_USERNAME": env["DEVSTACK_KAFKA_SASL_USERNAME"],
                 "CACHESYNC_KAFKA_SASL_PASSWORD_FILE": env["DEVSTACK_KAFKA_SASL_PASSWORD_FILE"],
                 "CACHESYNC_KAFKA_SSL_CAFILE": env["DEVSTACK_KAFKA_SSL_CAFILE"]}
    k = config.load(config_path, {**os.environ, **lab.stack.env, **overrides}).kafka
    create_topics(k.bootstrap_servers, {k.topic: 3, k.dead_letter_topic: 1}, **client_security(k))
    return overrides


def unsecured_jwt(lifetime_s: float, scope: str = "cachesync", sub: str = "cachesync") -> str:
    """An unsigned JWT (``"alg":"none"``) as the kafka-oauth variant's unsecured validator
    accepts it: ``sub``, ``scope``, ``iat`` now, ``exp`` after ``lifetime_s``."""
    def part(claims: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    now = int(time.time())
    return (part({"alg": "none"}) + "." +
            part({"sub": sub, "scope": scope, "iat": now, "exp": now + int(lifetime_s)}) + ".")


def use_kafka_oauth(lab, config_path: str, **token: str) -> dict[str, str]:
    """The environment that points processes of ``lab`` at the kafka-oauth variant
    (SASL_PLAINTEXT, OAUTHBEARER) with ``token`` (``CACHESYNC_KAFKA_SASL_OAUTH_TOKEN_FILE``
    or ``..._COMMAND``), the lab's topics created there as the broker's admin."""
    env = start("kafka-oauth")
    overrides = {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": env["DEVSTACK_KAFKA_OAUTH_BOOTSTRAP_SERVERS"],
                 "CACHESYNC_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                 "CACHESYNC_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
                 **{f"CACHESYNC_KAFKA_SASL_OAUTH_TOKEN_{k.upper()}": v for k, v in token.items()}}
    k = config.load(config_path, {**os.environ, **lab.stack.env, **overrides}).kafka
    admin = dataclasses.replace(k, sasl_oauth_token_file="", sasl_oauth_token_command=(
        f"echo {unsecured_jwt(600, sub='admin')}"))
    create_topics(k.bootstrap_servers, {k.topic: 3, k.dead_letter_topic: 1},
                  **client_security(admin))
    return overrides


def use_mariadb_tls(lab, monkeypatch):
    """Move ``lab`` onto the mariadb-tls variant as its REQUIRE SSL account with mysql.ssl_ca;
    returns the cleanup to call at the end (drops the lab's database there)."""
    env = start("mariadb-tls")
    plain = lab.stack
    tls = dataclasses.replace(plain, env={
        **plain.env, "CACHESYNC_MYSQL_PORT": env["DEVSTACK_MYSQL_TLS_PORT"],
        "CACHESYNC_MYSQL_USER": env["DEVSTACK_MYSQL_TLS_USER"],
        "CACHESYNC_MYSQL_PASSWORD_FILE": env["DEVSTACK_MYSQL_TLS_PASSWORD_FILE"],
        "CACHESYNC_MYSQL_SSL_CA": env["DEVSTACK_MYSQL_SSL_CA"]})
    with tls.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {lab.db}")
        for account in ("cachesync_tls", "cachesync"):   # lab.close() revokes cachesync's
            cur.execute(f"GRANT SELECT ON {lab.db}.* TO {account}@'127.0.0.1'")
    monkeypatch.setattr(lab, "stack", tls)

    def cleanup() -> None:
        with plain.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {lab.db}")
    return cleanup


def redis_tls_url(env: dict[str, str], user: str, password: str) -> str:
    """A rediss:// URL of the redis-tls variant as ``user``, the devstack CA checked."""
    host = env["DEVSTACK_REDIS_TLS_URL"].removeprefix("rediss://")
    return (f"rediss://{quote(user, safe='')}:{quote(password, safe='')}@{host}"
            f"?ssl_ca_certs={quote(env['DEVSTACK_REDIS_SSL_CA'])}")


def use_redis_tls(lab, monkeypatch) -> str:
    """Point ``lab`` at the redis-tls variant: its admin client as ``lab.redis`` and the
    least-privilege ACL user's URL for every process it starts; returns that URL."""
    env = start("redis-tls")
    url = redis_tls_url(env, env["DEVSTACK_REDIS_TLS_USER"],
                        secret(env, "DEVSTACK_REDIS_TLS_PASSWORD_FILE"))
    admin = redis.Redis.from_url(redis_tls_url(
        env, env["DEVSTACK_REDIS_TLS_ADMIN_USER"], secret(env, "DEVSTACK_REDIS_TLS_ADMIN_PASSWORD_FILE")))
    monkeypatch.setattr(lab, "redis", admin)     # lab.cache / lab.cached on the TLS Redis
    monkeypatch.setattr(lab, "stack", dataclasses.replace(
        lab.stack, env={**lab.stack.env, "CACHESYNC_REDIS_URL": url}))
    return url
