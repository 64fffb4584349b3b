"""The lag benchmark's load generator and observer on the real MariaDB and Redis:
commits on raw COM_QUERY packets land as autocommit rows, and Redis's key-event
notifications report exactly the keys DEL and UNLINK removed."""

from __future__ import annotations

import time

import pytest

from bench.commits import CommitError, Committer, query_packet
from bench.common import Sandbox, Stack
from bench.lag import DDL, INSERT_SQL, DelEvents

pytestmark = pytest.mark.integration


@pytest.fixture
def box(stack):
    box = Sandbox(Stack(), "benchlag")
    box.create_schema(DDL)
    yield box
    box.cleanup()


def _drain(committer: Committer, expected: int) -> list:
    done, deadline = [], time.monotonic() + 30
    while len(done) < expected and time.monotonic() < deadline:
        done += committer.wait(0.5)
    return done


def test_committer_commits_many_in_flight_and_each_row_is_its_own_transaction(box):
    committer = Committer([box.stack.admin(box.db, autocommit=True) for _ in range(4)])
    try:
        sent = 0
        done = []
        for row_id in range(1, 201):
            while not committer.idle:
                done += committer.wait(1.0)
            committer.send(query_packet(INSERT_SQL % (row_id, row_id % 1000, row_id)), row_id)
            sent += 1
        done += _drain(committer, sent - len(done))
        assert sorted(token for token, _, _ in done) == list(range(1, 201))
        assert all(answered >= sent_at for _, sent_at, answered in done)
        assert committer.in_flight == 0 and committer.idle == 4
        # a duplicate key comes back as the server's error, not as a commit
        committer.send(query_packet(INSERT_SQL % (7, 7, 7)), "dup")
        with pytest.raises(CommitError, match="1062"):
            _drain(committer, 1)
    finally:
        committer.close()
    # visible to another connection at once: committed, not left in an open transaction
    assert box.stack.admin_sql(f"SELECT COUNT(*), MIN(note) FROM {box.db}.lag") == ((200, "row 1"),)


def test_del_events_reports_deleted_keys_under_the_prefix_and_restores_the_setting(box):
    client = box.stack.redis()
    before = client.config_get("notify-keyspace-events")["notify-keyspace-events"]
    events = DelEvents(client, box.prefix)
    try:
        assert {"E", "g"} <= set(client.config_get("notify-keyspace-events")
                                 ["notify-keyspace-events"])
        mine = [f"{box.prefix}k:{i}" for i in range(50)]
        other = f"other-{box.prefix}k:1"
        client.mset({k: b"x" for k in [*mine, other]})
        client.delete(*mine[:25])
        client.unlink(*mine[25:], other)
        client.delete(f"{box.prefix}never-existed")        # removes nothing: no event
        seen, deadline = [], time.monotonic() + 10
        while len(seen) < len(mine) and time.monotonic() < deadline:
            seen += events.read(0.5)
        assert sorted(seen) == sorted(mine)
        assert events.read(0.2) == []
    finally:
        events.close()
    assert client.config_get("notify-keyspace-events")["notify-keyspace-events"] == before
