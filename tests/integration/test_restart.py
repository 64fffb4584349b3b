"""A `cachesync consume` killed -9 and started again under its static id applies again long
before its session would have ended: the restart costs the process's start, not a rebalance.

How long the start takes is the failover and start benchmarks' to measure; here the bound is
the session timeout, which a consumer that lost its partitions would have had to wait out.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.support import add_config_sections, wait_for

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 60_000     # far above any start, even on a loaded host: applying sooner proves the rejoin


def cached_row_gone(lab, row_id: int, timeout_s: float) -> float:
    """Cache the row's key, commit a change of the row, and wait until the key is gone; the
    monotonic time it went."""
    key = f"{lab.prefix}user:{row_id}"
    lab.redis.set(key, b"cached", ex=600)
    lab.sql("INSERT INTO users VALUES (%s, 'x') ON DUPLICATE KEY UPDATE name = 'y'", (row_id,))
    return wait_for(lambda: not lab.redis.exists(key) and time.monotonic(), timeout_s,
                    interval=0.02, what=f"{key} invalidated")


def test_a_static_consumer_killed_and_restarted_applies_again_within_its_session(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    add_config_sections(cfg, kafka={"group_instance_id": f"static-{lab.suffix}",
                                    "session_timeout_ms": SESSION_TIMEOUT_MS,
                                    "heartbeat_interval_ms": 3000})
    lab.start_tailer(cfg)
    consumer = lab.spawn("consume", cfg)
    cached_row_gone(lab, 1, 60)                 # consuming before the kill
    lab.kill9(consumer)
    restarted_at = time.monotonic()
    consumer = lab.spawn("consume", cfg)        # the same group.instance.id
    gone_at = cached_row_gone(lab, 2, SESSION_TIMEOUT_MS / 1000 + 30)
    took = gone_at - restarted_at
    assert took < SESSION_TIMEOUT_MS / 1000, (
        f"the restarted static member applied {took:.1f} s after its restart: it waited for "
        f"its old session to end instead of taking its partitions back\n{lab.log(consumer)}")
    # the process says what its start cost, step by step
    line = re.search(r"start: first poll after [\d.]+ s, [\d.]+ s CPU, [\d.]+ s waiting for a "
                     r"CPU \(command [\d.]+, settings [\d.]+, topics [\d.]+, metrics [\d.]+, "
                     r"engine [\d.]+\)",
                     lab.log(consumer))
    assert line, lab.log(consumer)
