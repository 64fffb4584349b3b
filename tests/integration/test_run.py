"""`cachesync run`: tailer and consumer in one process, through Kafka, on real services."""

from __future__ import annotations

import signal

import pytest

from tests.support import endpoints, metrics_showing, spawn, start, wait_for
from tests.support.tables import USERS, USERS_DDL

pytestmark = pytest.mark.integration


def test_run_invalidates_through_kafka_and_stops_on_sigterm(lab):
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS)
    proc = start(lab, cfg, "run")
    lab.cache("user:1", "user:email:a@x")
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'Ada')")
    wait_for(lambda: not lab.cached("user:1", "user:email:a@x"), 60, what="insert invalidation")
    assert len(lab.topic_records()) == 1               # it went through the topic
    wait_for(lambda: lab.dedup_rows("done") == 1, what="the consumer to confirm the id")
    metrics_showing(endpoints(lab, proc, 2), ["cachesync_tailer_rows_published_total 1.0",
                                              "cachesync_events_applied_total 1.0"])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, lab.log(proc)
    out = lab.log(proc)
    assert "consumer: 1 consumed, 1 applied" in out and "tailer: 1 row events" in out
    # a quiet start: the server's binlog settings in one INFO line (each one's meaning at DEBUG)
    assert len([line for line in out.splitlines() if "INFO" in line and "binlog setting" in line]) == 1
    assert "binlog setting " not in out and "group_id is None" not in out


def test_a_fatal_error_in_one_thread_stops_the_process_with_exit_3(lab):
    """Wrong MySQL password: the tailer's preflight is refused; the consumer thread, which
    started fine, is stopped with it and the process exits 3 (server not ready)."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS)
    proc = spawn(lab, cfg, "run", env={"CACHESYNC_MYSQL_PASSWORD": "wrong"})
    assert proc.wait(90) == 3, lab.log(proc)
    assert "MySQL refused" in lab.log(proc)

