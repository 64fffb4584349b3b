"""A tailer restarted on the server its checkpoint was written from connects at the
checkpoint's file and position, which the first transaction read there confirms against the
checkpoint's GTID state; a position that does not follow the state (planted here: an earlier
one, a file the server never had) is left for the GTID state. Either way the gap is
published once and nothing before the checkpoint again. Real MariaDB, both readers."""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS_DDL = "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32) NOT NULL)"
USERS = {"users": {"keys": ["user:{id}"]}}
CONFIRMED = "by file and position: its first transaction"
NOT_CONFIRMED = "by file and position ("


def published(lab) -> list[tuple[int, str]]:
    """(row id, op) of every event on the topic, sorted (partitions are not ordered against
    each other)."""
    return sorted((int(e.key.decode().rsplit(":", 1)[1]), e.event.op) for e in lab.topic_events())


def checkpoint(lab) -> tuple:
    return lab.sql("SELECT gtid, log_file, log_pos FROM cachesync.cachesync_checkpoint "
                   "WHERE name = %s", (f"tailer-{lab.suffix}",))[0]


def stopped_after_one_insert(lab, reader: str):
    """A tailer publishes row 1's insert and stops; rows 2 (insert) and 1 (update) are written
    while none runs. Returns the config and the binlog position before row 1's insert."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer={"reader": reader})
    tailer = lab.start_tailer(cfg)
    before = lab.sql("SHOW MASTER STATUS")[0][:2]
    lab.sql("INSERT INTO users VALUES (1, 'a')")
    wait_for(lambda: published(lab) == [(1, "insert")], 60, what="row 1's insert published")
    tailer.terminate()
    assert tailer.wait(30) == 0, lab.log(tailer)
    assert checkpoint(lab)[1] is not None
    lab.sql("INSERT INTO users VALUES (2, 'b')")
    lab.sql("UPDATE users SET name = 'c' WHERE id = 1")
    return cfg, before


def restarted(lab, cfg) -> str:
    """Start the tailer again; its log once the gap is published."""
    tailer = lab.start_tailer(cfg)
    want = [(1, "insert"), (1, "update"), (2, "insert")]
    wait_for(lambda: published(lab) == want, 60, what="the gap published once, nothing before it")
    log = lab.log(tailer)
    tailer.terminate()
    tailer.wait(30)
    assert published(lab) == want
    return log


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_a_restart_resumes_at_the_checkpoints_file_and_position(lab, reader):
    cfg, _ = stopped_after_one_insert(lab, reader)
    log = restarted(lab, cfg)
    assert CONFIRMED in log and NOT_CONFIRMED not in log, log


@pytest.mark.parametrize("plant", ["earlier position", "unknown file"])
def test_a_position_that_does_not_follow_the_gtid_state_is_left_for_it(lab, plant):
    """The checkpoint's GTID state is after row 1's insert; its position is planted before that
    insert (reading there would publish it again) or in a file the server does not have."""
    cfg, (file, pos) = stopped_after_one_insert(lab, "fast")
    if plant == "unknown file":
        file, pos = "nosuch-bin.000001", 4
    lab.sql("UPDATE cachesync.cachesync_checkpoint SET log_file = %s, log_pos = %s "
            "WHERE name = %s", (file, pos, f"tailer-{lab.suffix}"))
    log = restarted(lab, cfg)
    assert NOT_CONFIRMED in log and CONFIRMED not in log, log
    assert "connecting by GTID" in log
