"""The outbox read from the binlog (tailer.outbox_tables) on real MariaDB, Kafka and Redis."""

from __future__ import annotations

import random
import time

import pytest

from cachesync.producer_outbox.outbox import emit
from cachesync.schema.event import decode
from tests.support import add_config_sections, prepare_outbox, wait_for
from tests.support.outbox import (Writers, assert_first_deliveries_in_aggregate_order,
                                  emit_one_commit_one_rollback, purge_only,
                                  seven_events_five_old)

pytestmark = pytest.mark.integration

# The consumer needs one mapped table; outbox events here carry explicit keys only, each
# aggregate type allowing its own (explicit keys outside an allow-list are dead-lettered).
TABLES = {"unused": {"keys": ["unused:{id}"]},
          "leaderboard": {"explicit_keys": ["leaderboard:{board}", "page:*", "x"]},
          "board": {"explicit_keys": ["board:{id}"]}}


@pytest.fixture
def outbox(lab):
    """The outbox table, a business table, and a config tailing the outbox from the binlog."""
    prepare_outbox(lab)
    lab.sql("CREATE TABLE scores (id BIGINT PRIMARY KEY, points INT NOT NULL)")
    cfg = lab.write_config(TABLES, tailer={"outbox_tables": f"{lab.db}.cachesync_outbox"})
    return lab, cfg


def record_ids(records) -> list[str]:
    return [dict(r.headers)["id"].decode() for r in records]


def test_inserted_rows_go_out_as_their_events_and_purges_are_ignored(outbox):
    lab, cfg = outbox
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    event_id = emit_one_commit_one_rollback(lab, {"board": 1})
    lab.sql("DELETE FROM cachesync_outbox")   # the purge: no event
    lab.sql("INSERT INTO scores VALUES (2, 0)")
    with lab.stack.admin(lab.db, autocommit=False) as conn:   # a marker after the purge
        marker = emit(conn, "leaderboard", 2, "score_changed", {}, keys=[lab.prefix + "x"])
        conn.commit()
    # the two events' keys may sit on two partitions: await both, not the later one only
    wait_for(lambda: {event_id, marker} <= set(record_ids(lab.topic_events())), 60,
             what="the event and the marker after the purge")
    records = lab.topic_events()
    assert sorted(record_ids(records)) == sorted([event_id, marker])   # nothing for the purge
    first = next(r for r in records if dict(r.headers)["id"].decode() == event_id)
    assert first.key.decode() == f"{lab.db}.leaderboard:1"
    event = decode(first.value)
    assert (event.source.kind, event.table, event.after) == ("outbox", "leaderboard", {"board": 1})
    assert lab.cached("page:other") == ["page:other"]
    wait_for(lambda: engine.stats.applied == 2, 60, what="both events applied")
    assert engine.stats.dead_lettered == 0


def test_ids_are_the_relays_so_switching_modes_applies_each_event_once(outbox):
    """The relay and the binlog publish the same rows: one id per event, the dedup store
    skips the second copy (a cut-over with both running double-publishes, never double-applies)."""
    lab, cfg = outbox
    cfg = add_config_sections(cfg, relay={"outbox_db": lab.db, "poll_interval_s": 0.05})
    engine = lab.start_engine(cfg)
    lab.start_tailer(cfg)
    emitted = []
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        for i in range(20):
            emitted.append(emit(conn, "board", i % 3, "bumped", {"i": i},
                                keys=[f"{lab.prefix}board:{i % 3}"]))
            if i % 5 == 4:
                conn.commit()
    wait_for(lambda: len(lab.topic_events()) == 20, 60, what="the tailer's 20 events")
    lab.spawn("relay", cfg)                   # then the relay publishes the same rows
    wait_for(lambda: len(lab.topic_events()) == 40, 60, what="the relay's 20 events")
    records = lab.settled_records(engine)
    by_source: dict[str, list] = {}
    for r in records:
        by_source.setdefault(decode(r.value).source.server, []).append(r)
    assert len(by_source) == 2, by_source.keys()      # the tailer's and the relay's
    copies = [{dict(r.headers)["id"].decode(): (r.key, _payload(r)) for r in rs}
              for rs in by_source.values()]
    assert copies[0] == copies[1]                     # same ids, keys and payloads
    assert sorted(copies[0]) == sorted(emitted)
    assert engine.stats.applied == 20 and engine.stats.duplicates == 20
    assert engine.stats.dead_lettered == 0


def _payload(record):
    event = decode(record.value)
    return event.after, event.keys, event.version, event.extra


def test_concurrent_writers_with_late_commits_keep_aggregate_order(outbox):
    lab, cfg = outbox
    lab.start_tailer(cfg)
    with Writers(lab, 4, aggregates=8, shared=True, late=0.3) as writers:
        wait_for(lambda: len(writers.committed) >= 300, 120, what="300 committed events")
    committed = dict(writers.committed)
    wait_for(lambda: set(committed) <= set(record_ids(lab.topic_events())), 60,
             interval=0.5, what="every committed event on Kafka")
    records = lab.topic_events()
    ids = record_ids(records)
    assert sorted(ids) == sorted(committed)            # no loss, no duplicate, no rollback
    assert_first_deliveries_in_aggregate_order(records, committed)
    per_aggregate: dict[str, int] = {}
    for agg, _ in committed.values():
        per_aggregate[agg] = per_aggregate.get(agg, 0) + 1
    for r in records:                                  # each event carries its own count
        agg, n = committed[dict(r.headers)["id"].decode()]
        assert decode(r.value).after == {"n": n} and n < per_aggregate[agg]
    assert _seq_order_left(records), "no commit left seq order: the late commits did not happen"


def _seq_order_left(records) -> bool:
    """Whether some partition carries a lower seq (version) after a higher one."""
    last: dict[int, int] = {}
    left = False
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        seq = decode(r.value).version
        left |= seq < last.get(r.partition, 0)
        last[r.partition] = max(seq, last.get(r.partition, 0))
    return left


def test_tailer_killed_9_at_random_loses_nothing(outbox):
    lab, cfg = outbox
    engine = lab.start_engine(cfg)
    tailer = lab.start_tailer(cfg)
    rng = random.Random()
    with Writers(lab, 4, aggregates=4, late=0.2) as writers:
        for _ in range(3):
            before = len(lab.topic_events())
            wait_for(lambda: len(lab.topic_events()) > before + 20, 60,
                     what="progress before a kill")
            time.sleep(rng.uniform(0.0, 0.5))
            lab.kill9(tailer)
            time.sleep(rng.uniform(0.0, 0.5))
            tailer = lab.spawn("tail", cfg)
        wait_for(lambda: len(writers.committed) >= 200, 60, what="200 committed events")
    committed = dict(writers.committed)
    missing = lambda: set(committed) - set(record_ids(lab.topic_events()))   # noqa: E731
    try:
        wait_for(lambda: not missing(), 90, interval=0.5, what="every committed event on Kafka")
    except TimeoutError:
        raise AssertionError(f"{len(missing())} of {len(committed)} committed events not on "
                             f"Kafka; the last tailer's log:\n{lab.log(tailer)}") from None
    # the restarted tailer re-publishes from its checkpoint: a re-publish to one partition
    # can still be in flight when another's records show everything applied; a stopped
    # tailer (it drains its sends) publishes nothing more
    tailer.terminate()
    assert tailer.wait(60) == 0, lab.log(tailer)
    records = lab.settled_records(engine)
    ids = record_ids(records)
    assert set(ids) == set(committed)                  # nothing lost, no rolled-back row
    assert_first_deliveries_in_aggregate_order(records, committed)
    duplicates = len(ids) - len(set(ids))
    wait_for(lambda: engine.stats.applied == len(committed), 60, what="every event applied")
    assert engine.stats.duplicates == duplicates       # every re-publish was skipped
    assert engine.stats.dead_lettered == 0
    print(f"{len(committed)} committed, {len(writers.rolled_back)} rolled back, "
          f"{duplicates} re-published after the kills")


def test_purge_only_deletes_rows_created_before_the_retention(outbox):
    """Binlog mode marks nothing published: the purge goes by created_at, in batches."""
    lab, cfg = outbox
    add_config_sections(cfg, relay={"outbox_db": lab.db, "retention_s": 3600, "purge_batch": 2})
    seven_events_five_old(lab, "created_at")
    assert "purged 5 outbox rows created more than 3600s ago" in purge_only(lab, cfg)
    assert lab.sql("SELECT COUNT(*), COUNT(published_at) FROM cachesync_outbox") == ((2, 0),)
