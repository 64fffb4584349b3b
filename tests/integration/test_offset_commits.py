"""Offset commits on the real broker, in both modes of ``consumer.offset_commit``.

``async`` (the default) sends a batch's commit without waiting for the reply: the commit
must still reach the group while the consumer keeps running (nothing holds it back until
close), and a consumer closed right after its last batch must leave every applied record
committed, so that a clean restart delivers nothing again. (kafka-python hands a reply to
the source only in a later poll or commit, so a close right after the last batch commits that
batch again synchronously; the unit tests of ``_CommitTracker`` pin down close's other path.)
"""

from __future__ import annotations

import threading

import pytest

from cachesync.wiring import build_engine
from tests.support import group_lag, wait_for

pytestmark = pytest.mark.integration

ROWS = 60


def applied_rows(lab, mode: str):
    """The python engine (``consumer.offset_commit: mode``) running, with ROWS single-row
    transactions applied."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}}, consumer={"offset_commit": mode})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    for i in range(ROWS):
        lab.sql("INSERT INTO users VALUES (%s, 'n')", (i,))
    wait_for(lambda: engine.stats.applied == ROWS, 60, what=f"{ROWS} rows applied")
    return cfg, engine


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_offsets_reach_the_group_while_the_consumer_runs(lab, mode):
    _, engine = applied_rows(lab, mode)
    wait_for(lambda: group_lag(lab) == 0, 60, interval=0.2,
             what="the group's offsets at the topic's end, the consumer still running")
    assert engine.stats.applied == ROWS and engine.stats.duplicates == 0


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_consumer_closed_after_its_last_batch_leaves_nothing_to_deliver_again(lab, mode):
    """The engine stops inside its last batch's callback, so close() follows that batch's
    commit at once, before any poll could hand its reply to the source."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}}, consumer={"offset_commit": mode})
    lab.start_tailer(cfg)
    engine = build_engine(lab.settings(cfg),
                          on_batch=lambda _: engine.stats.applied == ROWS and engine.stop())
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    for i in range(ROWS):
        lab.sql("INSERT INTO users VALUES (%s, 'n')", (i,))
    runner.join(60)
    assert not runner.is_alive() and engine.stats.applied == ROWS
    engine.close()
    assert group_lag(lab) == 0         # read once: close() committed what was unconfirmed
    again = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (%s, 'n')", (ROWS,))
    # a batch counts its applied events before its consumed records: await both
    wait_for(lambda: again.stats.applied == 1 and again.stats.consumed >= 1, 60,
             what="the restarted consumer's first row")
    assert again.stats.consumed == 1 and again.stats.duplicates == 0
