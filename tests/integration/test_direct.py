"""`cachesync run --direct` on real MariaDB and Redis: binlog -> Redis in one process, no Kafka."""

from __future__ import annotations

import signal
import threading
import urllib.error
import urllib.request

import pytest

from cachesync.consumer.adapters.mysql_dedup import rows_sql
from cachesync.schema.event import decode_record
from cachesync.schema.gtid import GtidState, parse_gtid
from tests.support import (endpoints, http_get, metrics_showing, spawn, stack_command, start,
                           wait_for)
from tests.support.tables import USERS, USERS_DDL

pytestmark = pytest.mark.integration

ROWS = 150


def _ready(url: str) -> bool:
    try:
        return http_get(url + "/readyz") == "ready\n"
    except urllib.error.HTTPError:          # 503 until the first probe succeeded
        return False


MYSQL_DEDUP = {"dedup_store": "mysql"}     # done_ids reads the MySQL store's records


def done_ids(lab) -> int:
    return lab.sql(f"SELECT COUNT(*) FROM {rows_sql('cachesync')} WHERE ns = %s AND "
                   "status = 'done'", (f"direct-tailer-{lab.suffix}",))[0][0]


def keys_of(i: int) -> list[str]:
    return [f"user:{i}", f"user:email:u{i}@x", f"user:email:u{i}.new@x"]


def test_direct_mode_invalidates_without_kafka(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=MYSQL_DEDUP)
    start(lab, cfg, "run", "--direct")
    lab.cache("user:1", "user:email:a@x", "user:email:b@x", "user:2")
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ada')")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x"), what="insert invalidation")
    lab.cache("user:1", "user:email:a@x")
    lab.sql("UPDATE users SET email = 'b@x' WHERE id = 1")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x", "user:email:b@x"),
             what="old and new email keys gone")
    assert lab.cached("user:2") == ["user:2"]
    assert lab.topic_records() == []          # nothing went through Kafka


def test_direct_mode_kill9_mid_stream_loses_nothing(lab):
    """Every committed change is in Redis after a kill -9 and a restart.

    All keys any write will touch are cached first; a writer commits ROWS inserts and
    ROWS email-changing updates while the sidecar runs; it is killed once part of the
    work is applied and restarted after the writer finished. Every key must be gone,
    and the dedup table must hold exactly one done id per row change.
    """
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=MYSQL_DEDUP)
    lab.cache(*(k for i in range(ROWS) for k in keys_of(i)))
    proc = start(lab, cfg, "run", "--direct")

    def writer():
        for i in range(ROWS):
            lab.sql("INSERT INTO users VALUES (%s, %s, 'n')", (i, f"u{i}@x"))
        for i in range(ROWS):
            lab.sql("UPDATE users SET email = %s WHERE id = %s", (f"u{i}.new@x", i))
    thread = threading.Thread(target=writer)
    thread.start()
    wait_for(lambda: done_ids(lab) >= ROWS // 2, 60, what="part of the stream to be applied")
    lab.kill9(proc)
    applied_at_kill = done_ids(lab)
    thread.join(120)
    assert not thread.is_alive()
    assert applied_at_kill < 2 * ROWS, "the kill came after the end of the stream"

    start(lab, cfg, "run", "--direct")
    left = lambda: [k for i in range(ROWS) for k in lab.cached(*keys_of(i))]  # noqa: E731
    wait_for(lambda: not left(), 60, interval=0.2, what="every written row's keys to be gone")
    wait_for(lambda: done_ids(lab) == 2 * ROWS, 60, what="one done id per row change")


def stored_gtid(lab) -> GtidState:
    return GtidState.parse(lab.sql("SELECT gtid FROM cachesync.cachesync_checkpoint WHERE "
                                   "name = %s", (f"tailer-{lab.suffix}",))[0][0])


def insert_returning_gtid(lab, statement: str):
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        cur.execute(statement)
        cur.execute("SELECT @@last_gtid")
        return parse_gtid(cur.fetchone()[0])


def test_direct_mode_holds_the_checkpoint_while_redis_is_down(lab):
    """The checkpoint must not pass a transaction whose invalidation has not reached Redis."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=MYSQL_DEDUP)
    proc = start(lab, cfg, "run", "--direct")
    stack_command("down", "redis")
    try:
        gtid = insert_returning_gtid(lab, "INSERT INTO users VALUES (9, 'i@x', 'Ida')")
        wait_for(lambda: "redis delete failed (attempt 3)" in lab.log(proc), 60,
                 what="the engine to retry the delete")
        assert gtid not in stored_gtid(lab)
        assert done_ids(lab) == 0
    finally:
        stack_command("up", "redis")
    wait_for(lambda: done_ids(lab) == 1, 60, what="the delete to be applied once Redis is back")
    wait_for(lambda: gtid in stored_gtid(lab), 60, what="the checkpoint to pass the insert")
    assert proc.poll() is None, lab.log(proc)


def test_sigterm_stops_direct_mode_cleanly_and_checkpoints(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=MYSQL_DEDUP)
    proc = start(lab, cfg, "run", "--direct")
    insert_gtid = insert_returning_gtid(lab, "INSERT INTO users VALUES (5, 'e@x', 'Eve')")
    wait_for(lambda: done_ids(lab) == 1, what="the insert to be applied")
    [url] = endpoints(lab, proc, 1)
    metrics_showing([url], ["cachesync_tailer_rows_published_total 1.0",
                            "cachesync_events_applied_total 1.0",
                            'cachesync_consumer_commit_to_apply_seconds_count{kind="binlog"} 1.0'])
    wait_for(lambda: _ready(url), 60, what="/readyz to answer 200 (MySQL, Redis, lag)")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, lab.log(proc)
    assert insert_gtid in stored_gtid(lab)
    assert "tailer: 1 row events" in lab.log(proc)


def test_moving_from_direct_mode_to_kafka_keeps_the_checkpoint(lab):
    """The documented switch: stop `run --direct`, start the Kafka pipeline with the same
    config. A change committed while nothing ran is applied through Kafka, and what direct
    mode had applied is not published again (the tailer resumes from the same checkpoint)."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, consumer=MYSQL_DEDUP)
    proc = start(lab, cfg, "run", "--direct")
    lab.cache("user:1")
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ada')")
    wait_for(lambda: not lab.cached("user:1"), what="direct mode to apply the insert")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, lab.log(proc)

    lab.cache("user:2", "user:email:b@x")
    lab.sql("INSERT INTO users VALUES (2, 'b@x', 'Bob')")      # while nothing runs
    kafka = spawn(lab, cfg, "run")
    wait_for(lambda: not lab.cached("user:2", "user:email:b@x"), 60,
             what="the Kafka pipeline to apply the change made between the two")
    published = [int(e.pk[0][1]) for r in lab.topic_records() for e in decode_record(r.value)]
    assert published == [2], published
    assert kafka.poll() is None, lab.log(kafka)
