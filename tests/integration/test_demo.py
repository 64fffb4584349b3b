"""`cachesync demo` on the devstack, both ways: through Kafka (`tail` + `consume`) and with
`--direct` (one `run --direct` process, no Kafka); every write's keys are invalidated and the
summary line reports the lag."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cachesync.devstack import default_env_file
from cachesync.runtime.mysql import ensure_state_tables
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

SUMMARY = re.compile(r"^8 writes: commit->invalidation lag p50 [0-9.]+ ms", re.M)


@pytest.mark.parametrize("args, started", [((), "starting tailer and consumer"),
                                           (("--direct",), "starting run --direct (no Kafka)")])
def test_demo_invalidates_every_write(stack, args, started):
    done = run_demo(stack, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert started in done.stdout
    assert len(re.findall(r"^lag +[0-9.]+ ms +\S", done.stdout, re.M)) == 8, done.stdout
    assert SUMMARY.search(done.stdout), done.stdout


def test_a_demo_starts_at_the_current_position_whatever_an_earlier_one_left(stack):
    """A checkpoint no server can resume from (here one past the binlog; an earlier demo's,
    into binlogs purged since, is another) does not stop the next demo: its tailer starts at
    the server's current position."""
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS cachesync")
    with stack.admin("cachesync", autocommit=False) as conn:
        ensure_state_tables(conn)
        with conn.cursor() as cur:
            cur.execute("REPLACE INTO cachesync_checkpoint (name, server, gtid, updated_at) "
                        "VALUES ('demo', 'mariadb:1', '0-1-999999999', NOW(6))")    # not in any binlog
        conn.commit()
    done = run_demo(stack)
    assert done.returncode == 0, done.stdout + done.stderr
    assert SUMMARY.search(done.stdout), done.stdout


def run_demo(stack, *args: str) -> subprocess.CompletedProcess:
    """``cachesync demo --writes 8 [args]`` on the devstack, its output captured."""
    return subprocess.run([sys.executable, "-m", "cachesync", "demo", "--writes", "8",
                           "--env-file", str(default_env_file(ROOT)), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, **stack.env})
