"""Update mode on real services: fenced writes end at the newest version, whatever the order."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from kafka import KafkaProducer

from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.consumer.core.plan import plan_batch
from cachesync.schema.keys import version_key
from tests.histories import all_keys, decode_values, deliveries, expected_state, mappings
from tests.support import add_config_sections, create_topics, stack_command, wait_for

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"], "mode": "update"}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delivery=deliveries())
def test_fenced_script_on_real_redis_ends_at_the_newest_version(redis_server, delivery):
    history, batches = delivery
    prefix = f"prop-{uuid.uuid4().hex[:8]}:"
    client = redis_server           # a single server, then a 3-master cluster
    cache, m = RedisCache("", client=client), mappings(prefix)
    try:
        for batch in batches:
            cache.write(plan_batch(batch, m).writes)
        keys = all_keys(prefix)
        values = dict(zip(keys, (client.get(k) for k in keys)))
        assert decode_values(values) == expected_state(history, prefix)
        for key in expected_state(history, prefix):
            assert 0 < client.pttl(key) <= 3600 * 1000          # every written key has a TTL
    finally:
        for key in all_keys(prefix):          # one by one: a cluster refuses cross-slot DELs
            client.delete(key, version_key(key))


def db_state(lab, prefix: str | None = None) -> dict[str, dict]:
    """What Redis must hold: each row under both of its keys, as update mode renders it."""
    prefix = lab.prefix if prefix is None else prefix
    out = {}
    for id_, email, name in lab.sql("SELECT id, email, name FROM users"):
        row = {"id": id_, "email": email, "name": name}
        out[f"{prefix}user:{id_}"] = out[f"{prefix}user:email:{email}"] = row
    return out


def redis_state(lab) -> dict[str, dict]:
    keys = sorted(k.decode() for k in lab.redis.scan_iter(match=f"{lab.prefix}user:*", count=1000))
    return {k: json.loads(v) for k, v in zip(keys, lab.redis.mget(keys)) if v is not None}


def churn(lab, rounds: int, rng: random.Random) -> None:
    """Inserts, updates that move the email key, deletes and re-inserts over 8 rows."""
    for i in range(rounds):
        row = rng.randrange(8)
        choice = rng.random()
        if choice < 0.15:
            lab.sql("DELETE FROM users WHERE id = %s", (row,))
        else:
            lab.sql("INSERT INTO users VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE "
                    "email = VALUES(email), name = VALUES(name)",
                    (row, f"e{rng.randrange(4)}-{row}@x", f"name-{i}"))


def test_update_mode_end_to_end_then_a_shuffled_duplicated_replay_changes_nothing(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    churn(lab, 300, random.Random(1))
    records = lab.settled_records(engine)
    assert redis_state(lab) == db_state(lab, lab.prefix)
    assert engine.stats.keys_written > 0 and engine.stats.dead_lettered == 0

    # The same events again, shuffled across partitions with duplicates, to a fresh
    # topic and consumer group (a fresh dedup namespace: nothing is skipped as a
    # duplicate, so only the fencing stands between the replay and stale values).
    replay_topic = f"cs.{lab.suffix}.replay"
    create_topics(lab.stack.bootstrap, {replay_topic: 3})     # and waits until it shows
    rng = random.Random(2)
    shuffled = records + rng.sample(records, len(records) // 3)
    rng.shuffle(shuffled)
    producer = KafkaProducer(bootstrap_servers=lab.stack.bootstrap, acks="all")
    for r in shuffled:
        producer.send(replay_topic, key=str(rng.random()).encode(), value=r.value,
                      headers=list(r.headers))
    producer.flush()
    producer.close()
    # Small batches, so older versions reach Redis after newer ones (within one batch
    # the engine already keeps only the newest write per key).
    replay_cfg = add_config_sections(lab.write_config(USERS, consumer={"batch_size": 7},
                                                      name="replay.yaml"),
                                     kafka={"topic": replay_topic, "group_id": f"r-{lab.suffix}"})
    replayer = lab.start_engine(replay_cfg)
    wait_for(lambda: replayer.stats.consumed == len(shuffled), 60, interval=0.1,
             what="the replay consumed")
    assert redis_state(lab) == db_state(lab, lab.prefix)
    assert replayer.stats.fenced > 0                   # older versions were refused


def test_redis_down_20s_under_load_retries_then_applies_everything(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS)
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    stop, rng = threading.Event(), random.Random(3)
    writes = {"n": 0}

    def writer():
        while not stop.is_set():
            churn(lab, 1, rng)
            writes["n"] += 1
            time.sleep(0.005)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: engine.stats.keys_written >= 20, 60, what="writes before the outage")
        stack_command("down", "redis")
        try:
            during = writes["n"]
            time.sleep(20)                          # the outage under test
            assert writes["n"] > during             # the database kept changing meanwhile
        finally:
            stack_command("up", "redis")
        wait_for(lambda: writes["n"] > during + 100, 60, what="writes after the outage")
    finally:
        stop.set()
        thread.join(30)
    lab.settled_records(engine, 120)
    # Redis restarted empty: the newest value of every row is there only because the
    # batches that failed during the outage were retried, not skipped.
    assert redis_state(lab) == db_state(lab, lab.prefix)
    assert engine.stats.retries > 0 and engine.stats.dead_lettered == 0
    assert lab.dedup_rows("done") == lab.dedup_rows()
