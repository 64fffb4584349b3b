"""One MySQL connection per thread in `cachesync consume`: the prober probing every 10 ms next
to the engine recording heartbeat lag (both on the state database), on the real services."""

from __future__ import annotations

import time

import pytest

from tests.support import UsersWriter, add_config_sections, address, scrape, status_of, wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}

PROBE_EVERY_S = 0.01
WATCH_S = 10.0
# what two threads interleaving packets on one pymysql connection leave in the log
SHARED_CONNECTION_SIGNS = ("Packet sequence number wrong", "Command Out of Sync",
                           "could not record", "Traceback")


def test_a_fast_prober_beside_the_engine_keeps_readyz_green_and_the_log_clean(lab):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(64), name VARCHAR(32))")
    cfg = lab.write_config(USERS, tailer={"heartbeat_interval_s": 0.05})
    add_config_sections(cfg, metrics={"probe_interval_s": PROBE_EVERY_S})
    lab.start_tailer(cfg)
    consume = lab.spawn("consume", cfg)
    addr = address(lab, consume)
    wait_for(lambda: status_of(addr, "/readyz") == 200, 60, interval=0.2, what="consumer ready")
    beats = ("cachesync_consumer_commit_to_apply_seconds_count", (("kind", "heartbeat"),))
    before = scrape(addr).get(beats, 0)
    writer = UsersWriter(lab, rows_per_txn=1)
    writer.start()
    statuses = []
    try:
        deadline = time.monotonic() + WATCH_S
        while time.monotonic() < deadline:
            statuses.append(status_of(addr, "/readyz"))
            time.sleep(0.05)                # the sampling rate of the watch, not a wait
    finally:
        writer.stop()
    applied = scrape(addr).get(beats, 0) - before
    assert applied >= 20, f"the engine recorded only {applied} heartbeats' lag while watched"
    assert set(statuses) == {200}, f"/readyz answered {sorted(set(statuses))}"
    log = lab.log(consume)
    assert not [s for s in SHARED_CONNECTION_SIGNS if s in log], log[-3000:]
