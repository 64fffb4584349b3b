"""The local devstack seen from Python: its env file, the admin account, waiting on conditions.

Used by `cachesync demo`, the tests and the benchmarks; the services themselves are
started by ``devstack/stack.sh``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql
import redis
from kafka import KafkaAdminClient
from kafka.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                          NotCoordinatorError)

from cachesync.runtime.env_file import read_env_file

_COORDINATOR_NOT_READY = (CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
                          NotCoordinatorError)


def default_env_file(root: Path | str = ".") -> Path:
    """``$CACHESYNC_ENV_FILE``, else ``$CACHESYNC_DEVSTACK_DIR/env``, else ``<root>/.devstack/env``."""
    if os.environ.get("CACHESYNC_ENV_FILE"):
        return Path(os.environ["CACHESYNC_ENV_FILE"])
    return Path(os.environ.get("CACHESYNC_DEVSTACK_DIR") or Path(root) / ".devstack") / "env"


@dataclass
class DevStack:
    """Connection settings from the devstack env file, plus its admin account."""

    env: dict[str, str]

    @classmethod
    def from_env_file(cls, path: Path | str) -> "DevStack":
        """Raises ConfigError when the file is unreadable."""
        return cls(read_env_file(path))

    @property
    def bootstrap(self) -> str:
        return self.env["CACHESYNC_KAFKA_BOOTSTRAP_SERVERS"]

    def admin(self, database=None, autocommit=True) -> pymysql.connections.Connection:
        """A connection as the devstack's admin user (never the least-privilege one)."""
        with open(self.env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
        return pymysql.connect(host=self.env["CACHESYNC_MYSQL_HOST"],
                               port=int(self.env["CACHESYNC_MYSQL_PORT"]),
                               user=self.env["DEVSTACK_MYSQL_ADMIN_USER"], password=password,
                               database=database, autocommit=autocommit, charset="utf8mb4")

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.env["CACHESYNC_REDIS_URL"])

    def group_assignment(self, group: str) -> dict[str, list[int]]:
        """``{group_instance_id or member_id: partitions}`` of a consumer group while it is
        Stable; ``{}`` while it rebalances, has no members or no coordinator yet."""
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            described = admin.describe_groups([group])[group]
        except _COORDINATOR_NOT_READY:     # a new broker creates __consumer_offsets first
            return {}
        finally:
            admin.close()
        if described["group_state"] != "Stable":
            return {}
        out = {}
        for member in described["members"]:
            owned = [p for a in member["member_assignment"]["assigned_partitions"]
                     for p in a["partitions"]]
            out[member["group_instance_id"] or member["member_id"]] = sorted(owned)
        return out

    def check(self) -> None:
        """Raises ConnectionError naming the first service that does not answer."""
        try:
            self.admin().close()
            self.redis().ping()
            KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000).close()
        except Exception as e:  # any failure here means the stack is not usable
            raise ConnectionError(f"devstack service not reachable: {type(e).__name__}: {e}. "
                                  "Start it with `devstack/stack.sh up`.") from e


def wait_for(condition, timeout: float = 30.0, what: str = "condition", interval: float = 0.02):
    """Poll ``condition`` until truthy and return its value; raises TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
