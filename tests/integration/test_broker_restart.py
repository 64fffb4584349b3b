"""With ``tailer.on_kafka_outage: wait``, changes committed while the Kafka broker was down are
applied soon after it serves again (the default, ``invalidate``, applies them during the outage:
test_kafka_outage.py).

The tailer's producer and the consumer reconnect with a short backoff (100 ms at most), so
once the restarted broker acknowledges a produce, what waited for it reaches Redis within
about a second. The bound here is wider, for a loaded host; the consistency lab's kill class
(``python -m bench --only consistency_nines``) measures the recovery at size. While the broker
is away, the waiting pipeline stays nearly idle (kafka-python's producer spun a core).

Both clients, each for the whole pipeline: librdkafka's consumer gives up its group membership
during an outage longer than the session timeout and joins again as a new member, and the
restarted coordinator would hold the partitions for the old one for another session timeout
(7.7 s measured here) if the consumer did not remove it (``rdkafka_source.evict_member``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from bench.failover import first_produce
from bench.threads import schedstat_ns, tree_pids
from tests.support import REPO, create_topics, stack_command, wait_for

pytestmark = pytest.mark.integration

ROWS = 50
# from the broker's first acknowledged produce to every key gone: about 1 s on a quiet host,
# 5.4 s measured beside a second test worker on 2 cores; a consumer that left its old member
# to the coordinator would add its session timeout (6 s; 7.7 s measured), about 8.7 s in all
APPLIED_WITHIN_S = 6.5
IDLE_WINDOW_S = 3.0           # how long the pipeline's CPU is measured while the broker is away
IDLE_MAX_CORE = 0.3           # a process tree's share of a core then (the spinning producer: ~1)


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_changes_made_while_the_broker_was_down_are_applied_soon_after_it_serves(lab, client):
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    lab.sql("INSERT INTO users VALUES " + ", ".join(f"({i}, 'a')" for i in range(ROWS)))
    probe_topic = f"{lab.topic}.probe"
    create_topics(lab.stack.bootstrap, {probe_topic: 1})
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}}, kafka={"client": client},
                           tailer={"on_kafka_outage": "wait"})
    procs = {"tail": lab.start_tailer(cfg), "consume": lab.spawn("consume", cfg)}
    keys = [f"{lab.prefix}user:{i}" for i in range(ROWS)]
    lab.redis.set(keys[0], b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'b' WHERE id = 0")
    wait_for(lambda: not lab.redis.exists(keys[0]), 120, interval=0.05, what="consuming")

    # commits go on while the broker shuts down, as in production: the producer learns that
    # its partitions lost their leader, and has records waiting for one
    writing = threading.Event()
    writer = threading.Thread(target=write_until, args=(lab, writing), daemon=True)
    writer.start()
    try:
        stack_command("down", "kafka")
    finally:
        writing.set()
        writer.join(30)
    for key in keys:
        lab.redis.set(key, b"cached", ex=600)
    lab.sql("UPDATE users SET name = 'c'")                 # committed while the broker is down
    idle = cpu_share(procs, IDLE_WINDOW_S)               # its events wait in the producer
    up = subprocess.Popen([os.path.join(REPO, "devstack", "stack.sh"), "up", "kafka"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        served = first_produce(lab.stack.bootstrap, probe_topic, 600, clock=time.monotonic)
        gone = wait_for(lambda: not lab.redis.exists(*keys) and time.monotonic(), 120,
                        interval=0.02, what="every change of the outage applied")
    finally:
        _, err = up.communicate(timeout=600)
    assert up.returncode == 0, err[-2000:]
    took = gone - served
    assert all(share < IDLE_MAX_CORE for share in idle.values()), (
        f"while the broker was down, share of a core per process tree: {idle}")
    assert took < APPLIED_WITHIN_S, (
        f"the changes committed during the outage were applied {took:.1f} s after the broker "
        f"served again")


def cpu_share(procs: dict, seconds: float) -> dict[str, float]:
    """Per process (with its children: the tailer's producer runs in one), its share of a core
    over the next ``seconds``."""
    def on_cpu(pid):
        return sum(sum(on for on, _ in schedstat_ns(p).values()) for p in tree_pids(pid))
    before = {name: on_cpu(p.pid) for name, p in procs.items()}
    start = time.monotonic()
    time.sleep(seconds)                  # a measuring window, not a wait for a condition
    took = time.monotonic() - start
    return {name: round((on_cpu(p.pid) - before[name]) / 1e9 / took, 3)
            for name, p in procs.items()}


def write_until(lab, stop: threading.Event) -> None:
    """Update row 1 over and over (one commit at a time) until ``stop``."""
    with lab.stack.admin(lab.db) as conn, conn.cursor() as cur:
        n = 0
        while not stop.is_set():
            n += 1
            cur.execute("UPDATE users SET name = %s WHERE id = 1", (f"w{n}",))
            conn.commit()
