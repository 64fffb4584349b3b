"""An idle consumer on the real broker: it asks Kafka again once per poll timeout (the broker
holds its fetch that long), and a record arriving during a held fetch is applied at once."""

from __future__ import annotations

import logging
import statistics
import time

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

POLL_TIMEOUT_S = 3.0    # long, so that a fetch held to its end could not pass for an arrival
IDLE_S = 6.0
ARRIVALS = 5


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_an_idle_consumer_fetches_once_per_poll_timeout_and_arrivals_end_the_wait(lab, caplog,
                                                                                  client):
    """The fetches are counted from kafka-python's DEBUG lines; librdkafka holds its fetches
    the same way (fetch.wait.max.ms) but logs none, so with it only the arrivals are timed."""
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}},
                           consumer={"poll_timeout_s": POLL_TIMEOUT_S}, kafka={"client": client})
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.sql("INSERT INTO users VALUES (0, 'n')")
    wait_for(lambda: engine.stats.applied == 1, 60, what="the first row applied (assigned)")

    with caplog.at_level(logging.DEBUG, logger="kafka.consumer.fetcher"):
        caplog.clear()
        time.sleep(IDLE_S)          # the figure is what happens while nothing does
        fetches = sum("Sending FetchRequest" in r.getMessage() for r in caplog.records)
    # held POLL_TIMEOUT_S each: 2 or 3 in IDLE_S (kafka-python's 0.5 s would send 12)
    if client == "kafka-python":
        assert 1 <= fetches <= IDLE_S / POLL_TIMEOUT_S + 1, fetches

    lags = []
    for i in range(1, ARRIVALS + 1):
        lab.sql("INSERT INTO users VALUES (%s, 'n')", (i,))
        committed = time.monotonic()
        wait_for(lambda: engine.stats.applied == i + 1, 60, interval=0.005,
                 what=f"row {i} applied")
        lags.append(time.monotonic() - committed)
        time.sleep(0.1 * i)         # each arrival at another point of the held fetch
    # a fetch held to its end would add POLL_TIMEOUT_S / 2 on average
    assert statistics.median(lags) < POLL_TIMEOUT_S / 3, lags
