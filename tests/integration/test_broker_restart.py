"""Changes committed while the Kafka broker was down are applied soon after it serves again.

The tailer's producer and the consumer reconnect with a short backoff (100 ms at most), so
once the restarted broker acknowledges a produce, what waited for it reaches Redis within
about a second. The bound here is wider, for a loaded host; the consistency lab's kill class
(``python -m bench --only consistency_nines``) measures the recovery at size.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from bench.failover import first_produce
from tests.support import REPO, create_topics, stack_command, wait_for

pytestmark = pytest.mark.integration

ROWS = 50
APPLIED_WITHIN_S = 5.0        # from the broker's first acknowledged produce to every key gone


def test_changes_made_while_the_broker_was_down_are_applied_soon_after_it_serves(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    lab.sql("INSERT INTO users VALUES " + ", ".join(f"({i}, 'a')" for i in range(ROWS)))
    probe_topic = f"{lab.topic}.probe"
    create_topics(lab.stack.bootstrap, {probe_topic: 1})
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    lab.start_tailer(cfg)
    lab.spawn("consume", cfg)
    keys = [f"{lab.prefix}user:{i}" for i in range(ROWS)]
    lab.redis.set(keys[0], b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'b' WHERE id = 0")
    wait_for(lambda: not lab.redis.exists(keys[0]), 120, interval=0.05, what="consuming")

    stack_command("down", "kafka")
    for key in keys:
        lab.redis.set(key, b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'c'")                 # committed while the broker is down
    up = subprocess.Popen([os.path.join(REPO, "devstack", "stack.sh"), "up", "kafka"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        served = first_produce(lab.stack.bootstrap, probe_topic, 600, clock=time.monotonic)
        gone = wait_for(lambda: not lab.redis.exists(*keys) and time.monotonic(), 120,
                        interval=0.02, what="every change of the outage applied")
    finally:
        _, err = up.communicate(timeout=600)
    assert up.returncode == 0, err[-2000:]
    took = gone - served
    assert took < APPLIED_WITHIN_S, (
        f"the changes committed during the outage were applied {took:.1f} s after the broker "
        f"served again")
