"""The failover benchmark's ``mariadb_promotion`` fault: the MariaDB primary lost, its replica
promoted (devstack variant ``mariadb-replica``).

The phase has a pipeline of its own, because the run's tailer and consumers read and keep
their state on the primary that this fault takes away: one ``cachesync tail`` reading the
replica (``tailer.source_hosts``) with its state on the primary, and one ``cachesync
consume`` whose dedup store is Redis, so that the consumer does not depend on the lost
primary and the figure is the tailer's. The run's own tailer and consumers are stopped for
the phase and started again by the next run.

The writer writes to the primary for ``before_s`` and every key goes (the replica had every
transaction); then ``stack.sh down mariadb`` (the primary lost) and ``stack.sh promote
mariadb-replica``. From the promotion on, the writer writes to the new primary and the tailer
is restarted with it as ``mysql.host`` (the README's "restart with the new host"). Figure: the
promotion done -> the first key gone of a row committed on the new primary. Then every row of
the new primary is checked against Redis, and the old primary is started again for the next
run (the next ``up mariadb-replica`` rebuilds the promoted replica from it).
"""

from __future__ import annotations

import threading
import time

import pymysql

from bench.common import Worker, log, wait_for
from bench.lag import _alive, _checkpoint_stored
from bench.start import start_steps
from cachesync.runtime import config
from cachesync.runtime.env_file import read_env_file

PHASE_MAX_S = 600.0
RECOVERY_TIMEOUT_S = 120.0
GROUP_TIMEOUT_S = 60.0


class PromotionFault:
    """One ``mariadb_promotion`` phase of a FailoverBench run; ``run()`` returns its figures."""

    def __init__(self, bench, stack_sh, partitions: int, rate: float):
        self.bench, self.box, self._stack_sh = bench, bench.box, stack_sh
        self.partitions, self.rate = partitions, rate

    def run(self) -> dict:
        replica_port = self._replica_up()
        self.bench.stop_pipeline()
        tail_cfg, consume_cfg, name = self._configs(replica_port)
        tailer = self.box.spawn("tail", tail_cfg)
        consumer = self.box.spawn("consume", consume_cfg)
        wait_for(lambda: _alive(self.box, tailer) and _checkpoint_stored(self.box.stack, name),
                 60, "the replica tailer's start checkpoint")
        self._await_group(consumer, consume_cfg)
        harness, before_s = self.bench.harness, self.bench.before_s
        first = harness.measure(self.rate, before_s, False)      # on the primary, every key gone
        self._stack_sh(self.box.stack, "down", "mariadb")
        self._stack_sh(self.box.stack, "promote", "mariadb-replica")
        t_promoted = time.perf_counter()
        harness.reconnect(lambda: self._admin(replica_port))
        out, stop = {}, threading.Event()
        writer = Worker(lambda: out.update(harness.measure(self.rate, PHASE_MAX_S, False, stop)),
                        "promotion-writer")
        writer.start()
        try:
            self.box.stop_proc(tailer)
            stopped_s = time.perf_counter() - t_promoted
            tailer = self.box.spawn("tail", tail_cfg, env=self._pointed_at(replica_port))
            wait_for(lambda: _alive(self.box, tailer) and _alive(self.box, consumer) and all(
                self.bench.progress.first_gone(p, t_promoted, t_promoted)
                for p in range(self.partitions)), RECOVERY_TIMEOUT_S,
                "keys of rows committed on the new primary invalidated", interval=0.1)
            first_gone = min(self.bench.progress.first_gone(p, t_promoted, t_promoted)
                             for p in range(self.partitions))
            time.sleep(self.bench.after_s)   # writes on the new primary, to see it hold
        finally:
            stop.set()
            writer.join(PHASE_MAX_S)
        writer.check()
        stale = self.bench.stale_keys(lambda: self._admin(replica_port))
        for proc in (tailer, consumer):
            self.box.stop_proc(proc)
        self._primary_back()
        return {"figure_s": round(first_gone - t_promoted, 3),
                "what": "promotion done -> the first key gone of a row committed on the new "
                        "primary (tailer restarted with the new primary as mysql.host)",
                "missing": first["missing"] + out["missing"], "stale_keys_new_primary": stale,
                "achieved_rate": out["achieved_rate"], "phase_p99_ms": out["p99_ms"],
                "phase_max_ms": out["max_ms"], "before_promotion_max_ms": first["max_ms"],
                "old_tailer_stopped_after_s": round(stopped_s, 3),
                "new_tailer_start_steps_s": start_steps(tailer)}

    def _replica_up(self) -> int:
        """Start (or rebuild, after the last run's promotion) the replica; its port."""
        log("failover: starting the MariaDB replica (a promoted one is rebuilt)")
        self._stack_sh(self.box.stack, "up", "mariadb-replica")
        env = read_env_file(self.box.stack.env_path)
        return int(env["DEVSTACK_MYSQL_REPLICA_PORT"])

    def _configs(self, replica_port: int):
        box, bench = self.box, self.bench
        topic, group, name = box.new_topic(self.partitions), box.new_group(), box.new_tailer_name()
        tail_cfg = box.write_config(bench.tables, topic=topic, group=group, metrics=bench.metrics,
                                    tailer={"name": name,
                                            "source_hosts": f"127.0.0.1:{replica_port}"})
        consume_cfg = box.write_config(bench.tables, topic=topic, group=group,
                                       metrics=bench.metrics, tailer={"name": name},
                                       consumer={"dedup_store": "redis"})
        return tail_cfg, consume_cfg, name

    def _await_group(self, consumer, cfg) -> None:
        group = config.load(cfg, self.box.stack.environ).kafka.group_id
        wait_for(lambda: _alive(self.box, consumer) and sorted(
            p for ps in self.box.stack.group_assignment(group).values() for p in ps)
            == list(range(self.partitions)), GROUP_TIMEOUT_S, "the consumer owning every partition",
            interval=0.5)

    @staticmethod
    def _pointed_at(port: int) -> dict[str, str]:
        """The restarted tailer's environment: state and binlog on the new primary."""
        return {"CACHESYNC_MYSQL_PORT": str(port), "CACHESYNC_TAILER_SOURCE_HOSTS": ""}

    def _admin(self, port: int) -> pymysql.connections.Connection:
        with open(self.box.stack.env["DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"], encoding="utf-8") as f:
            password = f.read().strip()
        return pymysql.connect(host=self.box.stack.env["CACHESYNC_MYSQL_HOST"], port=port,
                               user=self.box.stack.env["DEVSTACK_MYSQL_ADMIN_USER"],
                               password=password, database=self.box.db, autocommit=False)

    def _primary_back(self) -> None:
        """The old primary started again for the next run; ``up`` resets the cachesync
        account's grants, so the sandbox's one is given again."""
        self._stack_sh(self.box.stack, "up", "mariadb")
        self.box.stack.admin_sql(f"GRANT SELECT ON `{self.box.db}`.* TO cachesync@'127.0.0.1'")
        self.bench.harness.reconnect(lambda: self.box.stack.admin(self.box.db, autocommit=False))

