"""Packed records end to end (tailer.pack_rows > 1) on real MariaDB, Kafka and Redis."""

from __future__ import annotations

import json
import random
import time

import pytest

from cachesync.schema.event import decode_record
from tests.support import cli
from tests.support import UsersWriter, wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}
DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
       "name VARCHAR(100) NOT NULL)",
       "CREATE TABLE orders (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)")


def events_of(records):
    return [e for r in records for e in decode_record(r.value)]


def test_packed_transactions_invalidate_every_row_and_share_records(lab):
    for ddl in DDL[:1]:
        lab.sql(ddl)
    cfg = lab.write_config(USERS, tailer={"pack_rows": 50})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    keys = [k for i in range(300) for k in (f"user:{i}", f"user:email:{i}@x")]
    lab.cache(*keys)
    with lab.stack.admin(lab.db, autocommit=False) as conn, conn.cursor() as cur:
        for t in range(3):          # three 100-row transactions
            cur.executemany("INSERT INTO users VALUES (%s, %s, 'n')",
                            [(i, f"{i}@x") for i in range(t * 100, t * 100 + 100)])
            conn.commit()
    wait_for(lambda: not lab.cached(*keys), 60, what="all 600 keys invalidated")
    records = lab.topic_records()
    events = events_of(records)
    assert sorted(int(e.pk[0][1]) for e in events) == list(range(300))
    assert len({e.id for e in events}) == 300 and engine.stats.applied == 300
    # 3 transactions x 3 partitions, at most 50 rows a record: far fewer records than rows
    assert 6 <= len(records) <= 3 * 3 * 3
    for r in records:               # each record: one partition, its rows' keys hash there
        evs = decode_record(r.value)
        assert len(evs) <= 50 and r.key == f"{lab.db}.users:{evs[0].pk[0][1]}".encode()
        # rows of one transaction, or of consecutive ones (the fast reader's packs span
        # transactions), in commit order
        order = [(int(e.source.position.rsplit("-", 1)[1]), int(e.pk[0][1])) for e in evs]
        assert order == sorted(order)


def test_kill_9_of_a_packing_tailer_loses_nothing_and_skips_duplicates(lab):
    lab.sql(DDL[0])
    cfg = lab.write_config(USERS, tailer={"pack_rows": 7, "checkpoint_interval_s": 3600})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    writer = UsersWriter(lab, 20)
    writer.start()
    committed = writer.committed
    try:
        wait_for(lambda: len(committed) >= 2000, what="writes before the kill")
        wait_for(lambda: len(events_of(lab.topic_records())) >= 1000, interval=0.5,
                 what="publishing before the kill")
        lab.kill9(tailer)
        wait_for(lambda: len(committed) >= 4000, what="writes while the tailer is down")
        tailer = lab.start_tailer(cfg)
        time.sleep(random.uniform(0.0, 0.5))  # vary where the restart meets the write stream
    finally:
        writer.stop()
    expected = set(committed)
    wait_for(lambda: lab.dedup_rows("done") == len(expected), 90,
             what=f"all {len(expected)} committed rows applied")
    # the restarted tailer re-publishes from its checkpoint: a re-publish to one partition
    # can still be in flight when another's records show everything applied; a stopped
    # tailer (it drains its sends) publishes nothing more
    tailer.terminate()
    assert tailer.wait(60) == 0, lab.log(tailer)

    def settled():   # re-publishes may land after the work looks done
        events = events_of(lab.topic_records())
        return events if engine.stats.consumed == len(events) else None
    events = wait_for(settled, 60, interval=0.5, what="the consumer to read every event")
    ids = [e.id for e in events]
    assert {int(e.pk[0][1]) for e in events} == expected     # nothing committed was missed
    republished = len(ids) - len(set(ids))
    assert republished > 0                                   # the checkpoint never moved
    assert engine.stats.duplicates == republished            # every re-publish was skipped
    assert engine.stats.applied == len(expected)


def test_poison_elements_of_a_pack_are_dead_lettered_alone_and_replayed(lab):
    for ddl in DDL:
        lab.sql(ddl)
    both = {**USERS, "orders": {"keys": ["order:{id}"]}}
    tail_cfg = lab.write_config(both, tailer={"pack_rows": 100}, name="tail.yaml")
    consume_cfg = lab.write_config(USERS, name="consume.yaml")   # orders: unknown here
    lab.start_tailer(tail_cfg)
    engine = lab.start_engine(consume_cfg)
    orders = [f"order:{i}" for i in range(1, 31)]
    lab.cache("user:1", *orders)
    with lab.stack.admin(lab.db, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO users VALUES (1, '1@x', 'n')")
        cur.executemany("INSERT INTO orders VALUES (%s, 1)", [(i,) for i in range(1, 31)])
        conn.commit()
    wait_for(lambda: engine.stats.dead_lettered == 30, 60, what="30 dead letters")
    assert lab.cached("user:1", *orders) == orders       # the users row applied, orders not
    dead = lab.topic_records(lab.dlq)
    assert sorted(json.loads(d.value)["pk"][0][1] for d in dead) == list(range(1, 31))
    assert {d.key for d in dead} == {f"{lab.db}.orders:{i}".encode() for i in range(1, 31)}
    by_origin: dict[bytes, list[dict]] = {}
    for d in dead:           # each letter: its own event, key and id, and where it was packed
        headers = dict(d.headers)
        assert headers["reason"] == b"unknown_table"
        assert headers["id"].decode() == json.loads(d.value)["id"]
        by_origin.setdefault(headers["origin"], []).append(headers)
    assert max(len(v) for v in by_origin.values()) > 1     # 30 rows over 3 partitions: packed
    for letters in by_origin.values():
        if len(letters) > 1:  # a pack's elements, each with its index in the pack
            assert sorted(int(h["pack_index"]) for h in letters) == list(range(len(letters)))
        else:                 # a pack of one row goes out as a plain event
            assert "pack_index" not in letters[0]
    listed = cli(lab, "dlq", "list", "--config", consume_cfg, "--json")
    assert len(listed.stdout.splitlines()) == 30

    lab.stop_engine(engine)
    engine = lab.start_engine(tail_cfg)       # the consumer now maps orders too
    replay = cli(lab, "dlq", "replay", "--config", tail_cfg)
    assert replay.returncode == 0 and "replayed 30 dead letter(s)" in replay.stdout, replay.stderr
    wait_for(lambda: not lab.cached(*orders), 60, what="the replayed orders applied")
