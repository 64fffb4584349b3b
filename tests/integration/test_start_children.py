"""`cachesync tail` starts its publisher process with the command line, before its own imports,
and publishes through that very process (no second one)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support import spawn, wait_for

pytestmark = pytest.mark.integration


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def started_ticks(pid: int) -> int:
    """When the process was created, in clock ticks since boot."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat.rsplit(b")", 1)[1].split()[19])


def test_tail_publishes_through_the_process_it_started_with_its_command_line(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    # the launcher reads the placement from the environment (tailer.publisher: auto publishes
    # from a thread on librdkafka)
    before = lab.checkpoint_updated_at()
    tail = spawn(lab, cfg, "tail", env={"CACHESYNC_TAILER_PUBLISHER": "process"})
    wait_for(lambda: tail.poll() is None and lab.checkpoint_updated_at() != before, 60,
             what="the tailer's start checkpoint")
    key = f"{lab.prefix}user:1"
    lab.start_engine(cfg)
    lab.redis.set(key, b"cached", ex=600)
    lab.sql("INSERT INTO users VALUES (1, 'x')")
    wait_for(lambda: not lab.redis.exists(key), 60, what="the row published and applied")
    line = wait_for(lambda: re.search(r"start: first binlog read after .* \(command ([\d.]+),",
                                      lab.log(tail)), 60, what="the start line")
    [child] = children(tail.pid)        # the publisher, and no other
    cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
    assert b"cachesync.producer_outbox.publish.process_publisher" in cmdline
    since_launch_s = (started_ticks(child) - started_ticks(tail.pid)) / os.sysconf("SC_CLK_TCK")
    # started before the command's imports were done: by the launcher, not by the tailer
    assert since_launch_s < float(line.group(1)), (since_launch_s, line.group(0))
