"""The transactional outbox on real MariaDB, Kafka and Redis: emit() -> relay -> consumer."""

from __future__ import annotations

import json
import random
import time

import pytest

from cachesync.producer_outbox.outbox import OutboxError, emit
from cachesync.runtime.config import RelaySettings
from tests.support import add_config_sections, prepare_outbox, stack_command, wait_for
from tests.support.outbox import (Writers, assert_first_deliveries_in_aggregate_order,
                                  emit_one_commit_one_rollback, purge_only,
                                  seven_events_five_old)

pytestmark = pytest.mark.integration

# Outbox events here carry explicit keys only; each aggregate type allows its own
# (issue 15: explicit keys outside an allow-list are dead-lettered).
TABLES = {"unused": {"keys": ["unused:{id}"]},
          "leaderboard": {"explicit_keys": ["leaderboard:{board}", "page:*"]},
          "board": {"explicit_keys": ["board:{id}"]}}
FAST_RELAY = {"poll_interval_s": 0.05, "redeliver_interval_s": 2.0, "burst_limit": 50}


@pytest.fixture
def outbox(lab):
    """The outbox table in the lab's database, a business table, and a relay config."""
    prepare_outbox(lab)
    lab.sql("CREATE TABLE scores (id BIGINT PRIMARY KEY, points INT NOT NULL)")
    cfg = add_config_sections(lab.write_config(TABLES),
                              relay={"outbox_db": lab.db, **FAST_RELAY})
    return lab, cfg


def unpublished(lab) -> int:
    return lab.sql("SELECT COUNT(*) FROM cachesync_outbox WHERE published_at IS NULL")[0][0]


def published(lab) -> int:
    return lab.sql("SELECT COUNT(*) FROM cachesync_outbox WHERE published_at IS NOT NULL")[0][0]


def published_ids(lab) -> list[str]:
    return [dict(r.headers)["id"].decode() for r in lab.topic_records()]


def test_emit_with_explicit_keys_invalidates_them_end_to_end(outbox):
    lab, cfg = outbox
    lab.spawn("relay", cfg)
    engine = lab.start_engine(cfg)
    emit_one_commit_one_rollback(lab, {"board": 1, "points": 10})
    wait_for(lambda: unpublished(lab) == 0, what="the row marked published")
    assert lab.cached("page:other") == ["page:other"]
    records = lab.topic_records()
    assert len(records) == 1
    assert records[0].key.decode() == f"{lab.db}.leaderboard:1"
    # the keys are deleted before the batch is confirmed and counted: await the count
    wait_for(lambda: engine.stats.consumed >= 1, what="the record counted as consumed")
    assert engine.stats.applied == 1 and engine.stats.dead_lettered == 0


def test_row_committing_after_a_higher_published_id_is_still_published(outbox):
    """Two transactions commit in reverse seq order; an id watermark would skip the first."""
    lab, cfg = outbox
    lab.spawn("relay", cfg)
    early = lab.stack.admin(lab.db, autocommit=False)
    late = lab.stack.admin(lab.db, autocommit=False)
    try:
        first = emit(early, "order", "a", "created", {"n": 1})      # lower seq, stays open
        second = emit(late, "order", "b", "created", {"n": 2})
        late.commit()
        wait_for(lambda: second in published_ids(lab), 60, interval=0.2,
                 what="the higher seq published first")
        with early.cursor() as cur:                  # its own uncommitted row is visible to it
            cur.execute("SELECT seq FROM cachesync_outbox WHERE event_id = %s", (first,))
            (low,), = cur.fetchall()
        (high,), = lab.sql("SELECT seq FROM cachesync_outbox WHERE event_id = %s", (second,))
        assert low < high and first not in published_ids(lab)
        early.commit()
        wait_for(lambda: first in published_ids(lab), 60, interval=0.2,
                 what="the late-committing lower seq to be published")
    finally:
        early.close()
        late.close()
    # a record is on the topic before its producer hears the ack and marks the row
    wait_for(lambda: unpublished(lab) == 0, 60, interval=0.2, what="both rows marked published")


def test_relays_killed_9_at_random_lose_nothing_keep_aggregate_order(outbox):
    lab, cfg = outbox
    engine = lab.start_engine(cfg)
    relays = [lab.spawn("relay", cfg), lab.spawn("relay", cfg)]
    rng = random.Random()
    with Writers(lab, 4) as writers:
        # at least 4 kills; more (up to 16) until one landed between a publish and its mark,
        # which is when a relay re-sends: where a random kill lands is luck
        for kill in range(16):
            if kill >= 4 and engine.stats.duplicates > 0:
                break
            before = published(lab)      # kill a relay that is doing work, at a random point
            wait_for(lambda: published(lab) > before + 20, 60, what="progress before a kill")
            time.sleep(rng.uniform(0.0, 0.5))
            victim = rng.randrange(len(relays))
            lab.kill9(relays[victim])
            time.sleep(rng.uniform(0.0, 0.5))
            relays[victim] = lab.spawn("relay", cfg)
        wait_for(lambda: len(writers.committed) >= 200, 60, what="200 committed events")
    committed = dict(writers.committed)
    wait_for(lambda: unpublished(lab) == 0, 90, interval=0.2, what="every row published")
    # a row whose lease ended while its send was slow is leased and sent by the other relay
    # too; that copy can still be in flight when the first ack marked the row: stopped
    # relays (they drain their sends) publish nothing more
    for relay in relays:
        relay.terminate()
    for relay in relays:
        relay.wait(60)

    records = lab.settled_records(engine)   # re-publishes may land after the work looks done
    ids = [dict(r.headers)["id"].decode() for r in records]
    assert set(committed) <= set(ids)                      # every committed row reached Kafka
    assert not set(ids) & writers.rolled_back              # rolled-back rows never appear
    assert set(ids) == set(committed)
    assert_first_deliveries_in_aggregate_order(records, committed)
    for record in records:                                 # a duplicate is the same event
        event = json.loads(record.value)
        assert event["id"] == dict(record.headers)["id"].decode()
        assert committed[event["id"]][1] == event["a"]["n"]
    duplicates = len(ids) - len(set(ids))
    assert engine.stats.applied == len(committed)
    assert engine.stats.duplicates == duplicates           # every re-publish was skipped
    assert engine.stats.dead_lettered == 0
    assert duplicates > 0            # kills during publishing re-send leased rows
    print(f"{len(committed)} committed, {len(writers.rolled_back)} rolled back, "
          f"{duplicates} duplicates")


def test_kafka_down_30s_during_writes_everything_arrives_after(outbox):
    lab, cfg = outbox
    # a producer that settles nothing after the restart (kafka-python has been seen to) is
    # replaced once its sends are older than the delivery timeout plus a margin: a shorter
    # delivery timeout keeps that recovery inside the wait below. The default burst: the
    # outage's backlog (some 12,000 rows) drains in about 10 s, not the minute FAST_RELAY's
    # 50 rows per lease round take
    add_config_sections(cfg, relay={"redeliver_interval_s": 3.0,
                                    "burst_limit": RelaySettings().burst_limit},
                        kafka={"producer_properties": {"delivery_timeout_ms": 40_000}})
    relay = lab.spawn("relay", cfg)
    with Writers(lab, 2) as writers:
        wait_for(lambda: len(writers.committed) >= 20, 60, what="writes before the outage")
        # Kafka acknowledged something, so the outage hits a connected relay (comparing
        # unpublished with committed raced the writers and could stop Kafka before that)
        wait_for(lambda: published(lab) > 0, 60, what="first publishes")
        stack_command("down", "kafka")
        try:
            time.sleep(30)
        finally:
            stack_command("up", "kafka")
    committed = dict(writers.committed)
    wait_for(lambda: unpublished(lab) == 0, 120, interval=0.5, what="every row published")
    assert set(committed) <= set(published_ids(lab))
    assert relay.poll() is None, lab.log(relay)             # it waited, it did not exit
    with open(relay.log_path) as f:
        log = f.read()                                       # whole: Lab.log keeps only the tail
    assert "waiting for Kafka" in log


def test_bad_payloads_fail_at_emit_and_leave_the_transaction_usable(outbox):
    lab, _ = outbox
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO scores VALUES (5, 1)")
        with pytest.raises(OutboxError, match="not JSON-serialisable"):
            emit(conn, "board", 5, "bumped", {"when": object()})
        with pytest.raises(OutboxError, match=r"limit is 900,000 bytes"):
            emit(conn, "board", 5, "bumped", {"blob": "x" * 1_000_000})
        with pytest.raises(OutboxError, match="JSON object"):
            emit(conn, "board", 5, "bumped", ["not", "a", "dict"])
        emit(conn, "board", 5, "bumped", {"ok": True})
        conn.commit()
    assert lab.sql("SELECT points FROM scores WHERE id = 5") == ((1,),)
    assert lab.sql("SELECT payload FROM cachesync_outbox") == (('{"ok":true}',),)
    with lab.stack.admin(lab.db, autocommit=True) as conn:
        with pytest.raises(OutboxError, match="autocommit"):
            emit(conn, "board", 5, "bumped", {})


def test_purge_only_deletes_old_published_rows_in_batches(outbox):
    lab, cfg = outbox
    add_config_sections(cfg, relay={"retention_s": 3600, "purge_batch": 2})
    seven_events_five_old(lab, "published_at")
    lab.sql("UPDATE cachesync_outbox SET published_at = NOW(6) WHERE published_at IS NULL "
            "ORDER BY seq LIMIT 1")                                               # 1 recent
    assert "purged 5 outbox rows" in purge_only(lab, cfg)
    assert lab.sql("SELECT COUNT(*), COUNT(published_at) FROM cachesync_outbox") == ((2, 1),)
