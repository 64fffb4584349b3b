"""Starting the devstack's secured and clustered variants from tests, and reading their facts."""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess

import pytest
from redis.cluster import RedisCluster

from cachesync import config
from cachesync.devstack import default_env_file
from tests.support import stack_command

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
        "CACHESYNC_REDIS_CLUSTER": "true"}))
    return client
