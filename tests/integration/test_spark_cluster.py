"""Losses on the Spark standalone cluster: an executor, a worker, then the driver, killed
while `cachesync consume --engine spark` (submitted with `cachesync spark-submit`) applies
what the real tailer publishes from MariaDB. Nothing may be lost, no fenced key may end
older than MySQL, every message id is done once, and the query keeps running (or, after
the driver's loss, resumes from its checkpoint)."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path

import pytest

from cachesync.consumer.adapters.mysql_dedup import rows_sql
from tests.integration.test_spark import (BATCH_LINE, cluster_env, executors_of, running_apps,
                                          spark_driver, spawn_spark_consumer, stop_gracefully,
                                          wait_app_gone)
from tests.support import add_config_sections, stack_command, wait_for
from tests.integration.test_update_mode import db_state, redis_state

pytestmark = pytest.mark.integration

USERS_DDL = ("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"], "mode": "update"}}


class Churn(threading.Thread):
    """Inserts, updates (moving the email key) and deletes over 40 rows until stop()."""

    def __init__(self, lab, seed: int):
        super().__init__(daemon=True)
        self._lab, self._rng, self._halt = lab, random.Random(seed), threading.Event()
        self.statements = 0

    def run(self) -> None:
        with self._lab.stack.admin(self._lab.db) as conn, conn.cursor() as cur:
            while not self._halt.wait(0.05):       # ~20/s: the consumer keeps up on 2 cores
                row = self._rng.randrange(40)
                if self._rng.random() < 0.15:
                    cur.execute("DELETE FROM users WHERE id = %s", (row,))
                else:
                    cur.execute("INSERT INTO users VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE "
                                "email = VALUES(email), name = VALUES(name)",
                                (row, f"e{self._rng.randrange(4)}-{row}@x",
                                 f"n{self.statements}"))
                self.statements += 1

    def stop(self) -> None:
        self._halt.set()
        self.join(30)



def dedup_counts(lab, ns: str) -> dict[str, int]:
    return dict(lab.sql(f"SELECT status, COUNT(*) FROM {rows_sql('cachesync')} WHERE ns = %s "
                        "GROUP BY status", (ns,)))


def executors(env: dict[str, str]) -> list[tuple[int, str]]:
    """(pid, worker url) of every executor JVM of this cluster's running applications."""
    return [(pid, worker) for pid, _, worker in executors_of(running_apps(env))]


def converged(lab, ns: str, proc):
    assert proc.poll() is None, lab.log(proc)
    return redis_state(lab) == db_state(lab) and dedup_counts(lab, ns).get("claimed", 0) == 0


def phase(lab, ns: str, proc, seed: int, kill) -> int:
    """Churn, wait until the consumer applies some of it, ``kill()``, churn on, then wait
    until Redis holds exactly MySQL's rows; returns the done count."""
    churn = Churn(lab, seed)
    churn.start()
    before = dedup_counts(lab, ns).get("done", 0)
    try:
        wait_for(lambda: dedup_counts(lab, ns).get("done", 0) >= before + 40, 180,
                 interval=0.2, what="the consumer applying the new changes")
        proc = kill() or proc
        wait_for(lambda: churn.statements >= 150, 120, what="changes after the kill")
    finally:
        churn.stop()
    wait_for(lambda: converged(lab, ns, proc), 300, interval=0.5,
             what="Redis holding exactly MySQL's rows after the kill")
    return proc


def test_consume_on_the_cluster_survives_executor_worker_and_driver_loss(lab):
    env = cluster_env()
    lab.sql(USERS_DDL)
    ns = f"cl-{lab.suffix}"
    # the MySQL dedup store: dedup_counts reads its rows
    cfg = add_config_sections(lab.write_config(USERS, consumer={"batch_size": 20,
                                                                "claim_lease_s": 2,
                                                                "dedup_store": "mysql"}),
                              kafka={"group_id": ns})
    lab.start_tailer(cfg)
    checkpoint = lab.tmp / "ck"
    two = {"spark.cores.max": "2"}
    apps_before = running_apps(env)
    proc = spawn_spark_consumer(lab, cfg, checkpoint, "driver-1.log", max_offsets=50, conf=two)
    logs = [proc.log_path]
    try:
        lab.sql("INSERT INTO users VALUES (1000, 'first@x', 'first')")
        wait_for(lambda: dedup_counts(lab, ns).get("done", 0) >= 1, 420, interval=0.5,
                 what="the consumer's first applied change (spark-submit, executors, query)")
        def kill_executor():
            pid, _ = wait_for(lambda: executors(env), 60, what="an executor of the consumer")[0]
            os.kill(pid, signal.SIGKILL)
        proc = phase(lab, ns, proc, 1, kill_executor)

        def kill_worker():
            _, worker = wait_for(lambda: executors(env), 60, what="an executor of the consumer")[0]
            port = int(worker.rsplit(":", 1)[1])
            n = (port - int(env["DEVSTACK_SPARK_MASTER_URL"].rsplit(":", 1)[1])) // 2
            pidfile = Path(env["DEVSTACK_DIR"]) / "run" / f"spark-worker-{n}.pid"
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        proc = phase(lab, ns, proc, 2, kill_worker)
        driver = spark_driver(proc)            # the first driver ran through both losses

        def kill_driver():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            wait_app_gone(env, apps_before)
            again = spawn_spark_consumer(lab, cfg, checkpoint, "driver-2.log", max_offsets=50,
                                         conf=two)
            logs.append(again.log_path)
            return again
        proc = phase(lab, ns, proc, 3, kill_driver)
        assert driver not in _alive_pids()
        assert stop_gracefully(proc) == 0, lab.log(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        stack_command("up", "spark")           # the killed worker back for the next tests

    published = {d.event.id for d in lab.topic_events()}
    done = dedup_counts(lab, ns)
    assert set(done) == {"done"} and done["done"] == len(published)    # nothing lost
    done_ids = {i for (i,) in lab.sql(f"SELECT msg_id FROM {rows_sql('cachesync')} WHERE ns = %s",
                                      (ns,))}
    assert done_ids == published
    applied = sum(int(m[2]) for log in logs for m in BATCH_LINE.findall(Path(log).read_text()))
    assert 0 < applied <= done["done"]       # no id counted as applied by two attempts
    assert redis_state(lab) == db_state(lab)


def _alive_pids() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
