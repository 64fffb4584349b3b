"""End to end on real MariaDB (binlog), Kafka and Redis: the foundation's promises."""

from __future__ import annotations

import random
import time

import pytest

from cachesync.consumer.adapters.mysql_dedup import rows_sql
from tests.support import UsersWriter, add_config_sections, wait_for

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}
# kafka.session_timeout_ms of the clean-leave test: a replacement's start on a loaded host
# (13 s to its first poll seen in a CI-like run) plus its join must fit well inside it
SESSION_MS = 90_000
USERS_DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")

pytestmark = pytest.mark.integration


@pytest.fixture
def pipeline(lab):
    """Users table, a running tailer (subprocess) and python engine (thread)."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS)
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    return lab, cfg, tailer, engine


def test_insert_update_delete_invalidate_mapped_keys(pipeline):
    lab, *_ = pipeline
    lab.cache("user:1", "user:email:a@x")
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ada')")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x"), what="insert invalidation")

    lab.cache("user:1", "user:email:a@x")
    lab.sql("UPDATE users SET name = 'Ada L' WHERE id = 1")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x"), what="update invalidation")

    lab.cache("user:1", "user:email:a@x", "user:2")
    lab.sql("DELETE FROM users WHERE id = 1")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x"), what="delete invalidation")
    assert lab.cached("user:2") == ["user:2"]  # unrelated keys are left alone


def test_key_column_change_invalidates_old_and_new_key(pipeline):
    lab, *_ = pipeline
    lab.sql("INSERT INTO users VALUES (7, 'old@x', 'Bo')")
    wait_for(lambda: lab.dedup_rows("done") >= 1, what="the insert to be applied")
    lab.cache("user:7", "user:email:old@x", "user:email:new@x")
    lab.sql("UPDATE users SET email = 'new@x' WHERE id = 7")
    wait_for(lambda: not lab.cached("user:7", "user:email:old@x", "user:email:new@x"),
             what="old and new email keys gone")


def test_garbage_on_the_topic_is_dead_lettered_and_later_records_applied(pipeline):
    lab, *_ = pipeline
    lab.produce_raw(b"\x00 definitely not an event")
    lab.cache("user:3")
    lab.sql("INSERT INTO users VALUES (3, 'c@x', 'Cy')")
    wait_for(lambda: not lab.cached("user:3"), what="the good record after the garbage")
    dead = wait_for(lambda: lab.topic_records(lab.dlq), what="a dead letter")
    assert len(dead) == 1
    headers = dict(dead[0].headers)
    assert headers["reason"] == b"invalid_json"
    assert dead[0].value == b"\x00 definitely not an event"
    assert headers["origin"].startswith(lab.topic.encode() + b"/")


@pytest.mark.parametrize("checkpoint_interval_s", [0.2, 3600.0])
def test_tailer_kill_9_mid_stream_loses_nothing_and_duplicates_are_skipped(lab, checkpoint_interval_s):
    """Writers commit transactions while the tailer is killed -9 and restarted.

    With a 3600 s interval the checkpoint never moves after start, so the restart
    re-publishes everything before the kill: duplicates are guaranteed.
    """
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer={"checkpoint_interval_s": checkpoint_interval_s})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    writer = UsersWriter(lab, 3)
    writer.start()
    committed = writer.committed
    wait_for(lambda: len(committed) >= 300, what="writes before the kill")
    wait_for(lambda: len(lab.topic_events()) >= 150, interval=0.5, what="publishing before the kill")
    lab.kill9(tailer)
    wait_for(lambda: len(committed) >= 900, what="writes while the tailer is down")
    tailer = lab.start_tailer(cfg)
    time.sleep(random.uniform(0.0, 0.5))  # vary where the restart meets the write stream
    writer.stop()

    expected = set(committed)
    wait_for(lambda: lab.dedup_rows("done") == len(expected), 90,
             what=f"all {len(expected)} committed rows applied")
    # the restarted tailer re-publishes from its checkpoint: a re-publish to one partition
    # can still be in flight when another's records show everything applied; a stopped
    # tailer (it drains its sends) publishes nothing more
    tailer.terminate()
    assert tailer.wait(60) == 0, lab.log(tailer)
    records = lab.settled_records(engine)   # re-publishes may land after the work looks done
    ids = [dict(r.headers)["id"] for r in records]
    published_pks = {int(r.key.decode().split(":")[1]) for r in records}
    assert published_pks == expected                       # nothing committed was missed
    republished = len(ids) - len(set(ids))
    assert engine.stats.duplicates == republished          # every re-publish was skipped
    assert engine.stats.applied == len(expected)
    if checkpoint_interval_s > 60:
        assert republished > 0


def test_consumer_kill_9_between_claim_and_confirm_reapplies_after_lease(lab):
    """Redis writes are paused so the consumer blocks after claiming; kill -9 it there."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer={"claim_lease_s": 3, "dedup_store": "mysql"})
    lab.start_tailer(cfg)
    lab.cache("user:5", "user:email:e@x")
    pauser = lab.stack.redis()
    # until the UNPAUSE below; long enough for a consumer's start, join and claim on a loaded
    # host (a pause that ended first would let the consumer apply before its kill)
    pauser.execute_command("CLIENT", "PAUSE", 180_000, "WRITE")
    try:
        consumer = lab.spawn("consume", cfg)
        lab.sql("INSERT INTO users VALUES (5, 'e@x', 'Eve')")
        wait_for(lambda: lab.dedup_rows("claimed") == 1, 60, what="the consumer's claim")
        lab.kill9(consumer)
        (lease_end,), = lab.sql(f"SELECT claimed_until FROM {rows_sql('cachesync')} WHERE ns = %s",
                                (f"g-{lab.suffix}",))
        # Reads are allowed during a WRITE pause: the dead consumer applied nothing.
        assert lab.cached("user:5", "user:email:e@x") == ["user:5", "user:email:e@x"]
        assert lab.dedup_rows("done") == 0
    finally:
        pauser.execute_command("CLIENT", "UNPAUSE")

    lab.spawn("consume", cfg)
    wait_for(lambda: not lab.cached("user:5", "user:email:e@x"), 60, what="re-application")
    # the keys go before the claim is confirmed: await the confirmation, not the keys alone
    wait_for(lambda: lab.dedup_rows("done") == 1, 60, what="the re-application's confirmation")
    (status, done_at), = lab.sql(f"SELECT status, done_at FROM {rows_sql('cachesync')} "
                                 "WHERE ns = %s", (f"g-{lab.suffix}",))
    assert status == "done"
    assert done_at >= lease_end   # the dead consumer's claim was honoured until its lease ended


def test_a_cleanly_stopped_consumer_leaves_the_group_at_once(lab):
    """SIGTERM -> the consumer leaves its group; the replacement gets the partitions well
    before the 90 s session timeout a silently vanished member would hold them for."""
    lab.sql(USERS_DDL)
    # a session timeout far above what a replacement needs to start, join and apply, so
    # that only a member that left the group can explain a quick handover
    cfg = add_config_sections(lab.write_config(USERS), kafka={"session_timeout_ms": SESSION_MS})
    lab.start_tailer(cfg)
    first = lab.spawn("consume", cfg)
    lab.cache("user:1")
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'A')")
    wait_for(lambda: not lab.cached("user:1"), 60, what="the first consumer to work")
    stopped = time.monotonic()          # the vanished member's session would run from here
    first.terminate()
    assert first.wait(30) == 0, lab.log(first)
    lab.spawn("consume", cfg)
    lab.cache("user:2")
    lab.sql("INSERT INTO users VALUES (2, 'b@x', 'B')")
    left = SESSION_MS / 1000 - 5 - (time.monotonic() - stopped)
    assert left > 10, "the first consumer took too long to stop for the bound to mean anything"
    wait_for(lambda: not lab.cached("user:2"), left,
             what=f"the replacement consumer, before the {SESSION_MS / 1000:.0f} s session timeout")


def test_a_dropped_binlog_connection_resumes_without_replaying_history(pipeline):
    lab, _cfg, _tailer, engine = pipeline
    lab.sql("INSERT INTO users SELECT seq, CONCAT(seq, '@x'), 'n' FROM seq_1_to_200")
    wait_for(lambda: engine.stats.applied == 200, 60, what="200 rows applied")
    dumps = [row[0] for row in lab.sql("SELECT id FROM information_schema.processlist "
                                       "WHERE command LIKE 'Binlog Dump%%' AND user = 'cachesync'")]
    assert dumps, "no binlog dump connection found"
    for thread_id in dumps:
        lab.sql(f"KILL {int(thread_id)}")
    lab.cache("user:201")
    lab.sql("INSERT INTO users VALUES (201, '201@x', 'n')")
    wait_for(lambda: not lab.cached("user:201"), 60, what="invalidation after the reconnect")
    assert len(lab.topic_events()) == 201       # nothing before the drop was published again
