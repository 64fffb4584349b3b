"""Issue 12, lost positions on a real MariaDB: a purged checkpoint stops the tailer with
exit 3 naming it, `cachesync resync` recovers, `tail --from-gtid` re-tails a range."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}


def cli(lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cachesync", *args],
                          env={**os.environ, **lab.stack.env}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def checkpoint_gtid(lab) -> str:
    return lab.sql("SELECT gtid FROM cachesync.cachesync_checkpoint WHERE name = %s",
                   (f"tailer-{lab.suffix}",))[0][0]


def purge_all_but_a_new_binlog(lab) -> None:
    """Rotate, then purge every older file. MariaDB keeps a file until its binlog checkpoint
    is written (asynchronously, after the rotation) and while a dump thread reads it, so the
    purge is repeated until only the new file is left."""
    lab.sql("FLUSH BINARY LOGS")
    current = lab.sql("SHOW MASTER STATUS")[0][0]

    def purged():
        lab.sql(f"PURGE BINARY LOGS TO '{current}'")
        return [row[0] for row in lab.sql("SHOW BINARY LOGS")] == [current]
    wait_for(purged, 60, interval=0.2, what="the older binlogs purged")


def records_of(lab, pk: int) -> int:
    key = f"{lab.db}.users:{pk}".encode()
    return sum(1 for e in lab.topic_events() if e.key == key)


GAP_KEYS = ("user:1", "user:email:a@x", "user:email:b@x")


def lose_the_position(lab, tailer_settings: dict):
    """A tailer stores a checkpoint and stops; a change is made in the gap (its keys
    cached) and the binlog holding both is purged. Returns (config, engine, lost GTID)."""
    lab.sql(USERS_DDL)
    cfg = lab.write_config(USERS, tailer=tailer_settings, consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (1, 'a@x', 'a')")
    wait_for(lambda: engine.stats.applied >= 1, what="the first insert applied")
    tailer.terminate()
    tailer.wait(30)
    lab.cache(*GAP_KEYS)
    lab.sql("UPDATE users SET email = 'b@x' WHERE id = 1")
    purge_all_but_a_new_binlog(lab)
    return cfg, engine, checkpoint_gtid(lab)


def test_purged_checkpoint_then_resync_then_retail_a_range(lab):
    cfg, engine, lost = lose_the_position(lab, {})

    stopped = cli(lab, "tail", "--config", cfg)
    assert stopped.returncode == 3, stopped.stderr
    assert f"gtid={lost}" in stopped.stderr and "cachesync resync" in stopped.stderr
    assert "Traceback" not in stopped.stderr

    done = cli(lab, "resync", "--config", cfg)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["removed"] == {f"{lab.db}.users": 3} and report["checkpoint_stored"]
    assert not lab.cached(*GAP_KEYS)
    resynced = checkpoint_gtid(lab)
    assert f"gtid={resynced}" == report["position"]

    # tailing goes on from the stored position; then re-tail the range after it
    tailer = lab.start_tailer(cfg)
    lab.sql("INSERT INTO users VALUES (2, 'c@x', 'c')")
    lab.sql("INSERT INTO users VALUES (3, 'd@x', 'd')")
    wait_for(lambda: records_of(lab, 2) == 1 and records_of(lab, 3) == 1, what="both published")
    wait_for(lambda: engine.stats.applied >= 3, what="both applied")
    tailer.terminate()
    tailer.wait(30)
    duplicates = engine.stats.duplicates
    again = subprocess.Popen([sys.executable, "-m", "cachesync", "tail", "--config", cfg,
                              "--from-gtid", resynced], env={**os.environ, **lab.stack.env},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: records_of(lab, 2) == 2 and records_of(lab, 3) == 2, 60,
                 what="the range published again")
        wait_for(lambda: engine.stats.duplicates == duplicates + 2, what="dedup skipped both")
    finally:
        again.terminate()
        again.wait(30)
    assert records_of(lab, 1) == 1          # nothing before the position was re-published


@pytest.mark.parametrize("command", ["tail", "run"])     # issue 14: `run` honours it too
def test_on_lost_position_resync_recovers_and_keeps_tailing(lab, command):
    cfg, *_ = lose_the_position(lab, {"on_lost_position": "resync"})
    tailer = lab.spawn(command, cfg)
    wait_for(lambda: not lab.cached(*GAP_KEYS),
             what="every users key removed by the automatic resync")
    lab.cache("user:2")
    lab.sql("INSERT INTO users VALUES (2, 'c@x', 'c')")
    wait_for(lambda: not lab.cached("user:2"), what="tailing goes on after the resync")
    assert tailer.poll() is None
    assert "tailer.on_lost_position is resync" in lab.log(tailer)
