"""Failover of a Redis Cluster master: how long cachesync stops invalidating when a master is
killed -9 and the cluster promotes its replica (devstack variant ``redis-cluster``: 3 masters,
a replica each, cluster-node-timeout 3 s).

One ``cachesync tail`` and one ``cachesync consume`` (child processes, as deployed) whose
cache and dedup store (``consumer.dedup_store: redis``) are the cluster. A writer caches a
row's key in the cluster, then commits the row (single-row transactions at RATE/s); a poller
records when each key goes. After ``before_s`` the master holding the most slots of the
keys is killed -9. Per run:

* ``promotion_s`` (the baseline, what no client can beat): kill -> the cluster names the
  replica master (CLUSTER NODES of a live node, polled every POLL_S);
* ``resume_victim_s``: kill -> the first key of the lost master's slots committed after the
  kill is gone (cachesync applies there again);
* ``resume_others_s``: the same for keys of the two masters that stayed up (a batch spans
  every slot, so they wait for the failed one's retries);
* ``after_promotion_s`` = resume_victim_s - promotion_s: what cachesync adds to the cluster's
  own failover (its retry backoff, the slot-map refresh);
* ``stale_keys``: rows whose key is still cached once every change is applied (must be 0).

The killed node is started again after each run (it rejoins as its replacement's replica).
Run: ``python -m bench --only failover_redis_cluster [--quick] [--runs N]``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster

from bench.common import ROOT, Sandbox, Worker, log, median, percentile, wait_for
from bench.lag import _alive, _checkpoint_stored
from cachesync.runtime.env_file import read_env_file
from cachesync.consumer.adapters.redis_cluster import refresh

NAME = "failover_redis_cluster"
VARIANT = "redis-cluster"
RATE = 200                         # row changes/s (single-row transactions)
SIZES = {"full": (5.0, 10.0), "quick": (3.0, 4.0)}   # seconds of writes before / after the fault
POLL_S = 0.01
RECOVERY_TIMEOUT_S = 120.0
DDL = "CREATE TABLE lag (id BIGINT PRIMARY KEY, v INT NOT NULL)"


def run(stack, quick: bool, runs: int) -> dict:
    before_s, after_s = SIZES["quick" if quick else "full"]
    env = _stack_sh(stack, "up", VARIANT)
    box = Sandbox(stack, NAME)
    bench = None
    try:
        bench = ClusterFailover(box, env, before_s, after_s)
        results = [bench.one_run(i) for i in range(runs)]
        return bench.report(results, runs)
    finally:
        if bench is not None:
            bench.close()
        box.cleanup()
        _stack_sh(stack, "up", VARIANT)       # a run that failed mid-fault: the node back


class ClusterFailover:
    def __init__(self, box: Sandbox, env: dict, before_s: float, after_s: float):
        self.box, self.env, self.before_s, self.after_s = box, env, before_s, after_s
        self.url = env["DEVSTACK_REDIS_CLUSTER_URL"]
        self.cluster = RedisCluster.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)
        box.create_schema(DDL)
        topic = box.new_topic(3)
        self.key = box.prefix + "lag:{}"
        self.group, name = box.new_group(), box.new_tailer_name()
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}"]}}, topic=topic,
                               group=self.group, tailer={"name": name},
                               consumer={"dedup_store": "redis"}, metrics={"listen": "127.0.0.1:0"})
        self.tail = box.spawn("tail", cfg, env=self._redis_env())
        self.consume = box.spawn("consume", cfg, env=self._redis_env())
        wait_for(lambda: _alive(box, self.tail) and _checkpoint_stored(box.stack, name), 60,
                 "the tailer's start checkpoint")
        self.next_id = 0

    def _redis_env(self) -> dict:
        return {"CACHESYNC_REDIS_URL": self.url, "CACHESYNC_REDIS_CLUSTER": "true",
                "CACHESYNC_REDIS_CLUSTER_NODES": self.env["DEVSTACK_REDIS_CLUSTER_NODES"]}

    def one_run(self, i: int) -> dict:
        log(f"{NAME}: run {i + 1}")
        self._warm_up()
        writes = Writes(self, RATE)
        writes.start()
        try:
            time.sleep(self.before_s)        # the workload before the fault (not a synchronisation)
            victim, replica = self._victim()
            pid = int((Path(self.env["DEVSTACK_DIR"]) / "run" / f"{VARIANT}-{victim.port}.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            t_kill = time.perf_counter()
            wait_for(lambda: self._role(replica) == "master", RECOVERY_TIMEOUT_S,
                     "the replica promoted", interval=POLL_S)
            t_promoted = time.perf_counter()
            on_victim = lambda key: self._slot_owner(key) == replica      # noqa: E731
            wait_for(lambda: writes.first_gone(t_kill, on_victim) and
                     writes.first_gone(t_kill, lambda k: not on_victim(k)), RECOVERY_TIMEOUT_S,
                     "keys committed after the kill invalidated", interval=0.05)
            time.sleep(self.after_s)         # the workload after the recovery, to see it hold
        finally:
            writes.stop()
        writes.check()
        t_victim = writes.first_gone(t_kill, on_victim)
        t_others = writes.first_gone(t_kill, lambda k: not on_victim(k))
        missing = writes.drain(60)
        stale = self._stale(writes.committed)
        _stack_sh(self.box.stack, "up", VARIANT)       # the killed node back, as a replica
        run = {"victim": victim.name, "promoted": replica,
               "promotion_s": _r(t_promoted - t_kill), "resume_victim_s": _r(t_victim - t_kill),
               "resume_others_s": _r(t_others - t_kill),
               "after_promotion_s": _r(t_victim - t_promoted),
               "p99_ms": _r(percentile(writes.latencies_ms(), 99)),
               "invalidations": len(writes.gone), "missing_after_drain": missing, "stale_keys": stale}
        log(f"{NAME}: run {i + 1}: promotion {run['promotion_s']} s, cachesync on the lost "
            f"master's slots {run['resume_victim_s']} s, elsewhere {run['resume_others_s']} s, "
            f"stale {stale}")
        return run

    def _warm_up(self) -> None:
        """A first key through the pipeline (consumer joined, every script loaded)."""
        writes = Writes(self, 50)
        writes.start()
        try:
            wait_for(lambda: writes.gone, 120, "the pipeline invalidating")
        finally:
            writes.stop()
        writes.check()
        writes.drain(60)

    def _victim(self):
        """The master holding the most slots, and the address of its replica."""
        self.cluster.nodes_manager.initialize()
        nodes = self._nodes()
        masters = {a: n for a, n in nodes.items() if "master" in n["flags"] and n["slots"]}
        name = max(masters, key=lambda a: sum(int(e) - int(s) + 1 for s, e in
                                              (r[:2] if len(r) > 1 else (r[0], r[0]) for r in masters[a]["slots"])))
        replica = next(a for a, n in nodes.items() if n["master_id"] == masters[name]["node_id"])
        return self.cluster.get_node(node_name=name), replica

    def _nodes(self) -> dict:
        for addr in self.env["DEVSTACK_REDIS_CLUSTER_NODES"].split(","):
            host, port = addr.rsplit(":", 1)
            try:
                with redis.Redis(host=host, port=int(port), socket_timeout=1) as node:
                    return node.execute_command("CLUSTER NODES")
            except redis.RedisError:
                continue
        raise RuntimeError("no node of the cluster answers")

    def _role(self, addr: str) -> str:
        flags = self._nodes().get(addr, {}).get("flags", "")
        return "failed" if "fail" in flags else "master" if "master" in flags else "replica"

    def _slot_owner(self, key: str) -> str:
        """The master serving ``key``'s slot now (after the promotion: the new one)."""
        return self._owners().get(self.cluster.keyslot(key), "")

    def _owners(self) -> dict[int, str]:
        if getattr(self, "_owners_at", None) is None or self._owners_at[0] < time.perf_counter() - 1:
            owners = {}
            for addr, n in self._nodes().items():
                if "master" in n["flags"] and "fail" not in n["flags"]:
                    for r in n["slots"]:
                        for slot in range(int(r[0]), int(r[-1]) + 1):
                            owners[slot] = addr
            self._owners_at = (time.perf_counter(), owners)
        return self._owners_at[1]

    def _stale(self, committed: list[str]) -> int:
        """Keys of committed rows still cached (each was cached before its commit)."""
        refresh(self.cluster)
        return sum(1 for key, found in zip(committed, self.cluster.mget_nonatomic(committed)) if found)

    def report(self, results: list[dict], runs: int) -> dict:
        fields = ("promotion_s", "resume_victim_s", "resume_others_s", "after_promotion_s", "p99_ms")
        return {"rate": RATE, "runs": results,
                "median": {f: median([r[f] for r in results if r[f] is not None]) for f in fields},
                "ratio_resume_to_promotion": _r(median([r["resume_victim_s"] / r["promotion_s"]
                                                        for r in results if r["promotion_s"]])),
                "stale_keys": sum(r["stale_keys"] for r in results),
                "missing_after_drain": sum(r["missing_after_drain"] for r in results),
                "note": f"{runs} run(s); the host is shared: compare the figures with the "
                        "promotion measured in the same run"}

    def close(self) -> None:
        for proc in (self.tail, self.consume):
            self.box.stop_proc(proc)
        try:
            for match in (self.box.prefix + "*", f"cachesync:dedup:{self.group}:*"):
                for key in self.cluster.scan_iter(match=match, count=5000):
                    self.cluster.delete(key)
        except redis.RedisError as e:
            log(f"{NAME}: cleanup of the cluster's keys failed: {e}")
        self.cluster.close()


class Writes:
    """Open-loop writer (cache the key, then commit the row) and poller (key gone) threads."""

    def __init__(self, bench: ClusterFailover, rate: float):
        self.bench, self.rate = bench, rate
        self.committed: list[str] = []
        self.commit_at: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._poll_done = threading.Event()
        self._writer = Worker(self._write, "cluster-writer")
        self._poller = Worker(self._poll, "cluster-poller")

    def start(self) -> None:
        self._writer.start()
        self._poller.start()

    def stop(self) -> None:
        self._halt.set()
        self._writer.join(60)

    def check(self) -> None:
        self._writer.check()

    def _write(self) -> None:
        client = RedisCluster.from_url(self.bench.url, socket_timeout=2, socket_connect_timeout=2)
        with self.bench.box.stack.admin(self.bench.box.db) as conn, conn.cursor() as cur:
            t0, n = time.perf_counter(), 0
            while not self._halt.is_set():
                due = t0 + n / self.rate
                if due > time.perf_counter():
                    time.sleep(due - time.perf_counter())
                row = self.bench.next_id
                self.bench.next_id += 1
                key = self.bench.key.format(row)
                try:
                    cached = client.set(key, b"cached", ex=600)
                except (redis.RedisError, redis.exceptions.RedisClusterException):
                    cached = False       # its master is down: a key not cached is not watched
                    refresh(client)
                cur.execute("INSERT INTO lag VALUES (%s, %s)", (row, n))
                if cached:
                    with self._lock:
                        self.committed.append(key)
                        self.commit_at[key] = time.perf_counter()
                n += 1
        client.close()

    def _poll(self) -> None:
        client = RedisCluster.from_url(self.bench.url, socket_timeout=2, socket_connect_timeout=2)
        while not self._poll_done.is_set():
            keys = self._outstanding()
            try:
                found = client.mget_nonatomic(keys) if keys else []
            except (redis.RedisError, redis.exceptions.RedisClusterException):
                found = []               # a master down: polled again next round, on a new map
                refresh(client)
            now = time.perf_counter()
            with self._lock:
                for key, value in zip(keys, found):
                    if value is None:
                        self.gone[key] = now
            self._poll_done.wait(POLL_S)
        client.close()

    def _outstanding(self) -> list[str]:
        with self._lock:
            return [k for k in self.committed if k not in self.gone]

    def drain(self, timeout_s: float) -> int:
        """Wait until every committed key is gone; returns how many were still there."""
        try:
            wait_for(lambda: not self._outstanding(), timeout_s, "every key gone", interval=0.1)
        except TimeoutError:
            pass
        left = len(self._outstanding())
        self._poll_done.set()
        self._poller.join(10)
        return left

    def first_gone(self, after: float, which) -> float | None:
        """When the first key matching ``which``, committed after ``after``, went."""
        with self._lock:
            gone = [(k, self.gone[k]) for k, c in self.commit_at.items() if c > after and k in self.gone]
        hits = [t for k, t in gone if which(k)]
        return min(hits) if hits else None

    def latencies_ms(self) -> list[float]:
        with self._lock:
            return [(self.gone[k] - c) * 1000 for k, c in self.commit_at.items() if k in self.gone]


def _stack_sh(stack, *args: str) -> dict:
    """``devstack/stack.sh ARGS`` on the stack the benchmark uses (its data dir and ports);
    returns the env file's facts."""
    env = {**os.environ, "CACHESYNC_DEVSTACK_DIR": stack.env["DEVSTACK_DIR"],
           "DEVSTACK_MYSQL_PORT": stack.env["CACHESYNC_MYSQL_PORT"],
           "DEVSTACK_KAFKA_PORT": stack.bootstrap.rsplit(":", 1)[1],
           "DEVSTACK_REDIS_PORT": stack.env["CACHESYNC_REDIS_URL"].rsplit(":", 1)[1].split("/")[0]}
    done = subprocess.run([str(ROOT / "devstack" / "stack.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"stack.sh {' '.join(args)} failed: {done.stderr[-2000:]}")
    return read_env_file(stack.env_path)


def _r(x):
    return None if x is None else round(x, 3)
