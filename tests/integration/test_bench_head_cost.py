"""The head-cost benchmark's instruments on the real services: the broker's request counts
over JMX, the CPU of a process tree, and one short run of ``run --direct`` end to end."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from bench import head_cost
from bench.common import Stack

pytestmark = pytest.mark.integration


def _broker(stack) -> head_cost.BrokerRequests:
    pids = head_cost._service_pids(stack)
    return head_cost.BrokerRequests(pids["kafka"], Path(stack.env["DEVSTACK_DIR"]) / "kafka" / "libs")


def test_the_broker_counts_the_produce_requests_it_served(stack):
    broker = _broker(Stack())
    assert broker.url is not None, broker.how
    before = broker.counts()
    producer = KafkaProducer(bootstrap_servers=stack.bootstrap, linger_ms=0)
    try:
        for i in range(5):
            producer.send("cachesync.changes", value=b"head-cost %d" % i).get(timeout=30)
    finally:
        producer.close()
    after = broker.counts()
    assert set(after) == set(head_cost.REQUESTS)
    assert after["Produce"] - before["Produce"] >= 5
    assert _broker(Stack()).url == broker.url          # the agent started once is reused


def test_tree_cpu_counts_the_children_of_a_process():
    # the child burns 0.3 s and stays alive (a reaped child's CPU is its parent's cutime,
    # which the tree does not count: the benchmark reads live processes)
    busy = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
            "time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               f"{busy!r}]); import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        while head_cost.tree_cpu_s(parent.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)       # until the child's 0.3 s of CPU show in the tree
        assert head_cost.tree_cpu_s(parent.pid) >= 0.3
    finally:
        parent.kill()
        parent.wait()


def test_a_short_run_of_run_direct_reports_cpu_per_commit_and_idle_share(stack, monkeypatch):
    monkeypatch.setattr(head_cost, "RATES", (0.0, 50.0))
    monkeypatch.setattr(head_cost, "CONFIGS", ("run --direct",))
    monkeypatch.setattr(head_cost, "SIZES", {"quick": (3.0, 2.0)})
    monkeypatch.setattr(head_cost, "SETTLE_S", 0.5)
    result = head_cost.run(Stack(), True, 1)
    assert set(result["mariadb"]) == {"sync_binlog", "innodb_flush_log_at_trx_commit"}
    rates = result["configs"]["run --direct"]["rates"]
    idle, busy = rates["0"]["median"], rates["50"]["median"]
    assert 0 <= idle["sidecar_core_pct"] < 100
    assert busy["commits"] > 0 and busy["sidecar_us"] > 0 and busy["mariadbd_us"] > 0
    assert busy["p50_ms"] is not None and busy["produce_per_commit"] is not None
    # each commit wakes the process at least once (its binlog read)
    assert busy["run --direct_wakes"] >= 1 and busy["sidecar_wakes"] == busy["run --direct_wakes"]
    assert idle["run --direct_wakes_per_s"] >= 0
    assert len(result["table"]) == 4 and "run --direct" in result["table"][-1]
