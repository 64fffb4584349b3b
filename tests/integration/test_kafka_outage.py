"""While the Kafka broker is down, the tailer invalidates directly (``tailer.on_kafka_outage:
invalidate``, the default): changes committed during the outage leave Redis while the broker
is still down; once it serves, the tailer publishes the range again from its checkpoint and
the consumer skips those events as done (the keys refilled meanwhile stay); once the consumer
group committed that range, changes go through Kafka and the consumer alone again."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from bench.failover import first_produce
from tests.support import (REPO, create_topics, endpoints, metrics_showing, stack_command,
                           wait_for)

pytestmark = pytest.mark.integration

ROWS = 40


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def running(lab):
    """The users table, its config, `tail` and `consume` running, one change consumed;
    (config, tail, consume, the keys)."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    lab.sql("INSERT INTO users VALUES " + ", ".join(f"({i}, 'a')" for i in range(ROWS)))
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    tail, consume = lab.start_tailer(cfg), lab.spawn("consume", cfg)
    keys = [f"{lab.prefix}user:{i}" for i in range(ROWS)]
    lab.redis.set(keys[0], b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'b' WHERE id = 0")
    wait_for(lambda: not lab.redis.exists(keys[0]), 120, interval=0.05, what="consuming")
    return cfg, tail, consume, keys


def broker_back(lab) -> None:
    """Start the broker again and wait until it acknowledges a fresh client's record."""
    probe_topic = f"{lab.topic}.probe"
    up = subprocess.Popen([os.path.join(REPO, "devstack", "stack.sh"), "up", "kafka"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first_produce(lab.stack.bootstrap, probe_topic, 600, clock=time.monotonic)
    finally:
        _, err = up.communicate(timeout=600)
    assert up.returncode == 0, err[-2000:]


def test_changes_of_an_outage_leave_redis_before_the_broker_is_back_and_are_published_after(lab):
    create_topics(lab.stack.bootstrap, {f"{lab.topic}.probe": 1})
    cfg, tail, consume, keys = running(lab)
    [tail_url], [consume_url] = endpoints(lab, tail, 1), endpoints(lab, consume, 1)
    applied = metric(metrics_showing([consume_url], ["cachesync_consumer_events_applied_total 1.0"]),
                     "cachesync_consumer_events_applied_total")

    stack_command("down", "kafka")
    for key in keys:
        lab.redis.set(key, b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'c'")                 # committed while the broker is down
    wait_for(lambda: not lab.redis.exists(*keys), 60, interval=0.05,
             what="the outage's changes applied while the broker is still down")
    assert "applying changes to Redis directly from the checkpoint" in lab.log(tail)
    metrics_showing([tail_url], ["cachesync_tailer_kafka_outages_total 1.0",
                                 f"cachesync_tailer_outage_events_applied_total {ROWS}.0"])
    for key in keys:                    # the application fills them again (the new rows)
        lab.redis.set(key, b"c", ex=600)

    broker_back(lab)
    wait_for(lambda: "Kafka serves the topic again" in lab.log(tail), 60,
             what="the tailer publishing again")
    # the range is published again and the consumer finds every event of it done
    metrics_showing([consume_url], [f"cachesync_consumer_duplicates_skipped_total {ROWS}.0"],
                    timeout_s=120)
    assert all(lab.redis.get(key) == b"c" for key in keys), "a refilled key was deleted again"
    # the tailer applies directly until the consumer group committed what was published again
    wait_for(lambda: "the tailer stopped applying changes directly" in lab.log(tail), 120,
             what="the handover to the consumer")
    lab.redis.set(keys[1], b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'd' WHERE id = 1")      # and the pipeline goes on
    wait_for(lambda: not lab.redis.exists(keys[1]), 60, interval=0.05,
             what="a change after the outage through Kafka")
    text = metrics_showing([consume_url], [f"cachesync_consumer_events_applied_total "
                                           f"{applied + 1:.1f}"])
    assert metric(text, "cachesync_consumer_duplicates_skipped_total") == ROWS
    assert tail.poll() is None and consume.poll() is None, lab.log(tail) + lab.log(consume)


def test_a_tailer_killed_during_the_outage_applies_directly_again_from_the_unchanged_checkpoint(
        lab):
    """kill -9 while it applies directly: the stored checkpoint did not move, so the new
    process (started while the broker is still away) applies directly from there, skipping
    what was done, as soon as its first change finds Kafka away, and publishes it all once
    the broker is back."""
    create_topics(lab.stack.bootstrap, {f"{lab.topic}.probe": 1})
    cfg, tail, consume, keys = running(lab)
    [consume_url] = endpoints(lab, consume, 1)
    half = ROWS // 2
    stack_command("down", "kafka")
    for key in keys:
        lab.redis.set(key, b"cached", ex=600)
    lab.sql(f"UPDATE users SET name = 'c' WHERE id < {half}")
    wait_for(lambda: not lab.redis.exists(*keys[:half]), 60, interval=0.05,
             what="the first changes applied directly")
    tail.kill()
    tail.wait(30)
    restarted = lab.start_tailer(cfg)
    lab.sql(f"UPDATE users SET name = 'c' WHERE id >= {half}")
    wait_for(lambda: not lab.redis.exists(*keys), 120, interval=0.05,
             what="the restarted tailer applying directly while the broker is away")
    for key in keys:
        lab.redis.set(key, b"c", ex=600)
    broker_back(lab)
    metrics_showing([consume_url], [f"cachesync_consumer_duplicates_skipped_total {ROWS}.0"],
                    timeout_s=120)
    assert all(lab.redis.get(key) == b"c" for key in keys), "a refilled key was deleted again"
    assert "applying changes to Redis directly" in lab.log(restarted)
    # it did not wait for its publisher's start to give up on Kafka (a 10 s bootstrap): the
    # first change's request for the topic, bounded by the outage limit, found it not started
    assert "the Kafka publisher has not started within" in lab.log(restarted)
    assert restarted.poll() is None and consume.poll() is None
