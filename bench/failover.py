"""Failover: how long invalidation stops when a part of the pipeline dies, at 1,000 row changes/s.

One sandbox (table, 3-partition topic, consumer group, tailer name) serves every run. Each
run injects the faults in order, each during its own open-loop write phase (lag.Harness:
the writer caches a row's key, commits the row, and the poller records when the key goes):

* ``consumer_static_restart``: two consumers with static ids (``kafka.group_instance_id``);
  one is killed -9 and started again 1 s later under its id.
* ``consumer_dynamic_lost``: two dynamic consumers; one is killed -9 for good.
* ``tailer_standby``: an active and a standby ``cachesync tail`` of one name; the active one
  is killed -9.
* ``kafka_restart``: ``devstack/stack.sh down kafka`` then ``up kafka``.
* ``mariadb_promotion``: the MariaDB primary lost (``stack.sh down mariadb``), the devstack's
  replica promoted; a tailer that read the replica restarted against it
  (bench/failover_promotion.py).

BENCH_FAILOVER_FAULTS (comma-separated names, default all) runs only those faults, e.g.
``kafka_restart``; BENCH_FAILOVER_LOG_LEVEL (e.g. DEBUG: kafka-python's coordinator, client
and connection lines) runs every cachesync process at that level and keeps their logs in
``bench/results/failover-logs-<time>/``, to see where a recovery's time goes.

A partition's **stall** is the longest interval during which at least one committed key of
it was outstanding and none of its keys was invalidated (a key's partition: murmur2 of
``db.lag:id``, as the tailer partitions). Over all phases of a run: p99 and max commit ->
key-gone latency, and at the end the stale keys (every row in MySQL whose key is still
cached; must be 0).
"""

from __future__ import annotations

import datetime
import functools
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from bench.common import (ROOT, Sandbox, Worker, baseline_tree, compile_tree, log, median,
                          percentile, ratio, tree_commit, wait_for)
from bench.failover_promotion import PromotionFault
from bench.lag import DDL, Harness, _alive, _checkpoint_stored, _child_report, lag_key
from bench.start import start_steps
from cachesync.schema.partition import partition_for

NAME = "failover"
RATE = 1000                      # row changes/s of the write workload
PARTITIONS = 3
# seconds of writes before each fault, and after the pipeline has recovered from it
SIZES = {"full": (5.0, 10.0), "quick": (3.0, 4.0)}
RESTART_AFTER_S = 1.0            # the killed static consumer comes back after this
RECOVERY_TIMEOUT_S = 120.0       # a fault the pipeline has not recovered from by then fails
PHASE_MAX_S = 600.0              # the writer's bound; each phase stops it when it is done
GROUP_TIMEOUT_S = 60.0
TARGETS_S = {"consumer_static_restart": {"killed": 5.0, "survivor": 1.0},
             "consumer_dynamic_lost": 10.0, "tailer_standby": 10.0, "kafka_restart": 5.0,
             "mariadb_promotion": 8.0}
METRICS = {"listen": "127.0.0.1:0"}   # several consumers on one host: no fixed port
FAULTS = [f.strip() for f in os.environ.get("BENCH_FAILOVER_FAULTS", "").split(",") if f.strip()] \
    or list(TARGETS_S)
LOG_LEVEL = os.environ.get("BENCH_FAILOVER_LOG_LEVEL", "")


class Progress:
    """Hook for Harness(on_gone=): every invalidated key as (commit, gone) per partition."""

    def __init__(self, db: str, partitions: int = PARTITIONS):
        self._db, self._partitions = db, partitions
        self._lock = threading.Lock()
        self._events: dict[int, list[tuple[float, float]]] = {p: [] for p in range(partitions)}

    def __call__(self, key: str, t_commit: float, t_gone: float) -> None:
        row_id = key.rsplit(":", 1)[1]
        p = partition_for(f"{self._db}.lag:{row_id}".encode(), self._partitions)
        with self._lock:
            self._events[p].append((t_commit, t_gone))

    def events(self, partition: int, since: float) -> list[tuple[float, float]]:
        """(commit, gone) of the partition's keys committed at or after ``since``."""
        with self._lock:
            return [e for e in self._events[partition] if e[0] >= since]

    def first_gone(self, partition: int, after: float, committed_after: float = 0.0):
        """When the first key of ``partition`` committed after ``committed_after`` went
        after ``after`` (None: none yet)."""
        with self._lock:
            gone = [g for c, g in self._events[partition] if g > after and c > committed_after]
        return min(gone) if gone else None

    def latencies_ms(self, since: float) -> list[float]:
        with self._lock:
            return [(g - c) * 1000 for evs in self._events.values() for c, g in evs if c >= since]


def longest_stall(events: list[tuple[float, float]]) -> float:
    """The longest time, in the (commit, gone) pairs given, during which some key was
    committed but not yet gone and no key went."""
    events = sorted(events, key=lambda e: e[1])
    earliest_pending = [0.0] * len(events)     # earliest commit among keys gone at i or later
    low = float("inf")
    for i in range(len(events) - 1, -1, -1):
        low = min(low, events[i][0])
        earliest_pending[i] = low
    best, last_gone = 0.0, float("-inf")
    for (_, gone), pending_since in zip(events, earliest_pending):
        best = max(best, gone - max(last_gone, pending_since))
        last_gone = gone
    return best


def run(stack, quick: bool, runs: int) -> dict:
    before_s, after_s = SIZES["quick" if quick else "full"]
    unknown = set(FAULTS) - set(TARGETS_S)
    if unknown:
        raise SystemExit(f"BENCH_FAILOVER_FAULTS: unknown {sorted(unknown)}; known: {list(TARGETS_S)}")
    box = Sandbox(stack, NAME)
    if LOG_LEVEL:       # every cachesync process of the run logs at this level
        box.spawn = functools.partial(box.spawn, args=("--log-level", LOG_LEVEL))
    bench = None
    trees = {"new": None}
    if baseline_tree() is not None:
        trees["baseline"] = baseline_tree()
    for tree in trees.values():
        compile_tree(tree)
    try:
        bench = FailoverBench(box, before_s, after_s)
        results = {label: [] for label in trees}
        for i in range(runs):          # the checkouts take turns: each run under like load
            for label, tree in trees.items():
                if box.tree != tree:
                    bench.stop_pipeline()
                    box.tree = tree
                results[label].append(bench.one_run(i))
        reports = {label: bench.report(results[label], runs) for label in trees}
        if len(trees) == 1:
            return reports["new"]
        return {**reports["new"], "trees": {label: tree_commit(tree) for label, tree in trees.items()},
                "baseline": reports["baseline"], "ratios": _ratios(reports)}
    finally:
        if bench is not None:
            bench.harness.close()
        if not _port_open(stack.bootstrap):     # a run that failed mid-restart
            _stack_sh(stack, "up", "kafka")
        mysql = f"{stack.env['CACHESYNC_MYSQL_HOST']}:{stack.env['CACHESYNC_MYSQL_PORT']}"
        if not _port_open(mysql):               # a run that failed mid-promotion
            _stack_sh(stack, "up", "mariadb")
        if LOG_LEVEL:
            _keep_logs(box)
        box.cleanup()


def _keep_logs(box: Sandbox) -> None:
    """The run's process logs, copied to bench/results/failover-logs-<time>/."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    where = ROOT / "bench" / "results" / f"failover-logs-{stamp}"
    where.mkdir(parents=True, exist_ok=True)
    for path in box.tmp.glob("*.log"):
        shutil.copy(path, where / path.name)
    log(f"failover: process logs kept in {where}")


class FailoverBench:
    """The sandbox's pipeline (tailers, consumers, writer) and the faults injected into it."""

    def __init__(self, box: Sandbox, before_s: float, after_s: float):
        self.box, self.before_s, self.after_s = box, before_s, after_s
        box.create_schema(DDL)
        self.topic = box.new_topic(PARTITIONS)
        self.probe_topic = box.new_topic(1)     # the broker-readiness probe's (kafka_restart)
        self.group = box.new_group()
        self.tailer_name = box.new_tailer_name()
        self.tables = {f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}"]}}
        self.progress = Progress(box.db)
        self.metrics = METRICS
        self.tail_cfg = self._config()
        self.tail = self._start_tailer()
        self.consumers = {}
        self.harness = Harness(box, on_gone=self.progress)

    def _start_tailer(self):
        log("failover: starting `cachesync tail`")
        tail = self.box.spawn("tail", self.tail_cfg)
        wait_for(lambda: _alive(self.box, tail) and
                 _checkpoint_stored(self.box.stack, self.tailer_name), 60,
                 "the tailer's start checkpoint")
        return tail

    def stop_pipeline(self) -> None:
        """Stop the run's tailer and consumers (the promotion phase runs its own)."""
        for proc in [self.tail, *self.consumers.values()]:
            if proc is not None:
                self.box.stop_proc(proc)
        self.tail, self.consumers = None, {}

    def _promotion(self) -> dict:
        return PromotionFault(self, _stack_sh, PARTITIONS, RATE).run()

    def _config(self, instance_id: str | None = None) -> Path:
        return self.box.write_config(
            self.tables, topic=self.topic, group=self.group, metrics=METRICS,
            tailer={"name": self.tailer_name},
            kafka={"group_instance_id": instance_id} if instance_id else None)

    # -- one run: every fault in turn --------------------------------------------------
    def one_run(self, i: int) -> dict:
        log(f"failover: run {i + 1}")
        since = time.perf_counter()
        if self.tail is None:         # the last run's promotion phase stopped it
            self.tail = self._start_tailer()
        self._start_consumers([f"{self.box.suffix}-r{i}-c{n}" for n in (1, 2)])
        self.harness.warm_up(self._pipeline_alive)
        faults = _Logged(f"failover: run {i + 1}")   # each fault's figures logged as it ends
        if "consumer_static_restart" in FAULTS:
            faults["consumer_static_restart"] = self._phase(self._kill_static_consumer)
        if "consumer_dynamic_lost" in FAULTS:
            self._start_consumers([None, None])
            faults["consumer_dynamic_lost"] = self._phase(self._kill_dynamic_consumer)
        if "tailer_standby" in FAULTS:
            standby = self.box.spawn("tail", self.tail_cfg)
            wait_for(lambda: "standby" in self.box.proc_log(standby), 60,
                     "the standby tailer waiting")
            faults["tailer_standby"] = self._phase(lambda: self._kill_active_tailer(standby))
        if "kafka_restart" in FAULTS:
            faults["kafka_restart"] = self._phase(self._restart_kafka)
        if "mariadb_promotion" in FAULTS:
            faults["mariadb_promotion"] = self._promotion()
        lat = self.progress.latencies_ms(since)
        # the old primary's rows, and the rows the promotion phase left on the new primary
        stale = (self.stale_keys(lambda: self.box.stack.admin(self.box.db))
                 + faults.get("mariadb_promotion", {}).get("stale_keys_new_primary", 0))
        run = {"faults": dict(faults), "p99_ms": _r(percentile(lat, 99)), "max_ms": _r(max(lat, default=None)),
               "invalidations": len(lat), "stale_keys": stale,
               "missing_after_drain": sum(f.get("missing", 0) for f in faults.values())}
        log(f"failover: run {i + 1}: " + ", ".join(
            f"{k} {v['figure_s']}" for k, v in faults.items()) + f"; p99 {run['p99_ms']} ms, "
            f"max {run['max_ms']} ms, stale {stale}")
        return run

    def _pipeline_alive(self) -> bool:
        return self.tail is not None and _alive(self.box, self.tail) and all(_alive(self.box, p) for p in self.consumers.values())

    def _phase(self, fault) -> dict:
        """Write at RATE while ``fault()`` runs and for after_s once it returns (the pipeline
        recovered); the fault's figures plus the phase's missing keys."""
        stop, out = threading.Event(), {}
        writer = Worker(lambda: out.update(self.harness.measure(RATE, PHASE_MAX_S, False, stop)),
                        "failover-writer")
        writer.start()
        try:
            time.sleep(self.before_s)      # workload before the fault (not a synchronisation)
            figures = fault()
            time.sleep(self.after_s)       # and after the recovery, to see it hold
        finally:
            stop.set()
            writer.join(PHASE_MAX_S)
        writer.check()
        if "stalls" in figures:      # measured once the phase's keys are all in
            figures.update(self._stall_figures(*figures.pop("stalls")))
        figures.update({"missing": out["missing"], "achieved_rate": out["achieved_rate"],
                        "phase_p99_ms": out["p99_ms"], "phase_max_ms": out["max_ms"]})
        return figures

    # -- consumers ---------------------------------------------------------------------
    def _start_consumers(self, instance_ids: list[str | None]) -> None:
        """Replace the running consumers by one per id (None: dynamic); waits until the new
        ones own every partition between them."""
        old = list(self.consumers.values())
        gone = [k for k in self.consumers if not k.startswith("dynamic-")]
        new = {}
        for instance_id in instance_ids:
            proc = self.box.spawn("consume", self._config(instance_id))
            new[instance_id or f"dynamic-{proc.pid}"] = proc
        for proc in old:
            self.box.stop_proc(proc)
        self.consumers = new
        static = [i for i in instance_ids if i]
        wait_for(lambda: self._pipeline_alive() and self._owned_by_new(static, gone, len(new)),
                 GROUP_TIMEOUT_S, "the new consumers owning every partition", interval=0.5)

    def _owned_by_new(self, static: list[str], gone: list[str], count: int) -> bool:
        """Every partition owned, each new consumer owning some, no stopped one left."""
        owners = self.box.stack.group_assignment(self.group)
        # stopped static members stay in the group until their session times out, and a
        # cooperative rebalance hands partitions over in a second round
        return (len(owners) == count and all(s in owners for s in static)
                and not any(g in owners for g in gone) and all(owners.values())
                and sorted(p for ps in owners.values() for p in ps) == list(range(PARTITIONS)))

    def _stable_pair(self) -> dict[str, list[int]]:
        """The assignment of the two consumers (waits out a rebalance in progress)."""
        return wait_for(lambda: (lambda a: a if len(a) == 2 else None)(
            self.box.stack.group_assignment(self.group)), GROUP_TIMEOUT_S,
            "a stable group of two consumers", interval=0.2)

    def _kill_static_consumer(self) -> dict:
        owners = self._stable_pair()
        victim = next(iter(self.consumers))
        killed, survivor = owners[victim], [p for k, ps in owners.items() if k != victim for p in ps]
        t_kill = self._kill(self.consumers[victim])
        time.sleep(RESTART_AFTER_S)       # the fault: a restart one second later
        spawned_at = time.time()
        self.consumers[victim] = self.box.spawn("consume", self._config(victim))
        # only a consumer alive after the kill can invalidate a row committed after it
        self._await_progress(killed, t_kill, committed_after=t_kill)
        return {"stalls": (t_kill, killed, survivor),
                "restarted_lease_waits": _lease_waits(self.consumers[victim]),
                "restarted_process_start_s": _started_after(self.consumers[victim], spawned_at),
                "restarted_start_steps_s": start_steps(self.consumers[victim])}

    def _kill_dynamic_consumer(self) -> dict:
        before = self._stable_pair()
        t_kill = self._kill(self.consumers.pop(next(iter(self.consumers))))
        self._await_progress(list(range(PARTITIONS)), t_kill, committed_after=t_kill)
        t_seen = wait_for(self._survivor_owns_all, GROUP_TIMEOUT_S,
                          "the survivor owning every partition", interval=0.2)
        # a dynamic member is known by the broker's member id only: the killed one is the
        # member that left
        (survivor_id,) = self.box.stack.group_assignment(self.group)
        if survivor_id not in before:
            raise RuntimeError(f"the survivor {survivor_id} was not a member before the kill: "
                               f"{before}")
        killed = [p for k, ps in before.items() if k != survivor_id for p in ps]
        return {"stalls": (t_kill, killed, before[survivor_id]),
                "reassignment_seen_after_s": _r(t_seen - t_kill),
                "survivor_lease_waits": _lease_waits(next(iter(self.consumers.values())))}

    def _survivor_owns_all(self):
        owners = self.box.stack.group_assignment(self.group)
        return time.perf_counter() if len(owners) == 1 and \
            sorted(next(iter(owners.values()))) == list(range(PARTITIONS)) else None

    def _await_progress(self, partitions: list[int], t_fault: float, committed_after: float = 0.0):
        wait_for(lambda: self._pipeline_alive() and all(
            self.progress.first_gone(p, t_fault, committed_after) for p in partitions),
            RECOVERY_TIMEOUT_S, f"partitions {partitions} invalidating again", interval=0.1)

    def _stall_figures(self, t_fault: float, killed: list[int], survivor: list[int]) -> dict:
        """Each partition's stall over the whole phase (from before_s before the fault)."""
        since = t_fault - self.before_s
        stalls = {p: _r(longest_stall(self.progress.events(p, since))) for p in range(PARTITIONS)}
        worst = lambda ps: max((stalls[p] for p in ps), default=None)  # noqa: E731
        return {"figure_s": worst(killed), "killed_partitions": killed,
                "survivor_partitions": survivor, "killed_stall_s": worst(killed),
                "survivor_stall_s": worst(survivor), "stall_by_partition_s": stalls}

    # -- tailers -------------------------------------------------------------------------
    def _kill_active_tailer(self, standby) -> dict:
        t_kill = self._kill(self.tail)
        self.tail = standby
        self._await_progress(list(range(PARTITIONS)), t_kill, committed_after=t_kill)
        first = min(self.progress.first_gone(p, t_kill, t_kill) for p in range(PARTITIONS))
        return {"figure_s": _r(first - t_kill),
                "what": "kill -> the first key gone of a row committed after the kill"}

    # -- Kafka ---------------------------------------------------------------------------
    def _restart_kafka(self) -> dict:
        t_down = time.perf_counter()
        _stack_sh(self.box.stack, "down", "kafka")
        down_s = time.perf_counter() - t_down
        up = subprocess.Popen(_stack_sh_args("up", "kafka"), env=_stack_sh_env(self.box.stack),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # a broker's start is stack.sh's to bound (DEVSTACK_KAFKA_WAIT: a loaded host needs more)
        t_back = wait_for(lambda: _port_open(self.box.stack.bootstrap) and time.perf_counter(),
                          max(RECOVERY_TIMEOUT_S, float(os.environ.get("DEVSTACK_KAFKA_WAIT", 0))),
                          "the Kafka port open again", interval=0.05)
        back_at = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(
            seconds=time.perf_counter() - t_back)
        log(f"failover: Kafka port open again at {back_at:%H:%M:%S.%f} UTC")  # for the logs
        ready = {}
        probe = Worker(lambda: ready.update(produced=first_produce(self.box.stack.bootstrap,
                                                                    self.probe_topic)),
                       "failover-broker-probe")
        probe.start()
        self._await_progress(list(range(PARTITIONS)), t_back)
        firsts = [self.progress.first_gone(p, t_back) - t_back for p in range(PARTITIONS)]
        probe.join(RECOVERY_TIMEOUT_S)
        probe.check()
        _, err = up.communicate(timeout=180)
        if up.returncode != 0:
            raise RuntimeError(f"stack.sh up kafka failed: {err[-2000:]}")
        return {"figure_s": _r(max(firsts)), "first_partition_s": _r(min(firsts)),
                "what": "broker port open again -> every partition's first key gone after it",
                "broker_answers_produce_s": _r(ready["produced"] - t_back),
                "broker_down_for_s": _r(t_back - t_down), "stack_sh_down_s": _r(down_s)}

    # -- shared ------------------------------------------------------------------------------
    @staticmethod
    def _kill(proc) -> float:
        proc.kill()
        t = time.perf_counter()
        proc.wait(10)
        return t

    def stale_keys(self, connect) -> int:
        """Rows in the MySQL ``connect()`` reaches whose key is still cached, once the
        pipeline had time to drain."""
        with connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM lag")
            keys = [lag_key(self.box.prefix, row_id) for (row_id,) in cur.fetchall()]
        r = self.box.stack.redis()
        try:
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.exists(key)
            return sum(pipe.execute())
        finally:
            r.close()

    def report(self, results: list[dict], runs: int) -> dict:
        tail = {"tail": _child_report(self.box, self.tail)} if self.tail is not None else {}
        children = {**tail,
                    **{f"consume {k}": _child_report(self.box, p) for k, p in self.consumers.items()}}
        return {"description": "how long invalidation stops when a part of the pipeline dies, "
                               f"during {RATE} row changes/s (cachesync tail + consume, child processes)",
                "params": {"rate_per_s": RATE, "partitions": PARTITIONS, "runs": runs,
                           "before_fault_s": self.before_s, "after_recovery_s": self.after_s,
                           "stall": "per partition: the longest time with a committed key "
                                    "outstanding and none of its keys invalidated"},
                "faults": _fault_medians(results), "whole_run": _whole_run(results),
                "runs": results, "children": children}


class _Logged(dict):
    """The faults' figures; each logged as it is stored, so that a run that fails later still
    shows those of the faults before."""

    def __init__(self, prefix: str):
        super().__init__()
        self._prefix = prefix

    def __setitem__(self, name: str, figures: dict) -> None:
        super().__setitem__(name, figures)
        log(f"{self._prefix}: {name}: " + ", ".join(
            f"{k} {v}" for k, v in figures.items() if k.endswith("_s") and v is not None))


def _fault_medians(results: list[dict]) -> dict:
    out = {}
    for name, target in TARGETS_S.items():
        if name not in results[0]["faults"]:
            continue
        runs = [r["faults"][name] for r in results]
        if name == "consumer_static_restart":
            out[name] = {part: _met(median([f[f"{part}_stall_s"] for f in runs]), target[part])
                         for part in ("killed", "survivor")}
        elif runs[0]["figure_s"] is None:
            out[name] = {"figure_s": None, "target_s": target, "met": None,
                         "reason": runs[0]["reason"]}
        else:
            out[name] = _met(median([f["figure_s"] for f in runs]), target)
            if name == "kafka_restart" and "broker_answers_produce_s" in runs[0]:
                # the broker's own part, measured by a fresh client in the same runs
                out[name]["broker_answers_produce_s"] = _r(median(
                    [f["broker_answers_produce_s"] for f in runs]))
    return out


def _ratios(reports: dict) -> dict:
    """Each fault's figure, this checkout's over the baseline's."""
    out = {}
    for name, new in reports["new"]["faults"].items():
        old = reports["baseline"]["faults"][name]
        if "figure_s" in new:
            out[name] = ratio(new["figure_s"], old.get("figure_s"))
        else:
            out[name] = {part: ratio(new[part]["figure_s"], old[part]["figure_s"]) for part in new}
    return out


def _met(figure, target: float) -> dict:
    return {"figure_s": _r(figure), "target_s": target, "met": figure is not None and figure <= target}


def _whole_run(results: list[dict]) -> dict:
    return {"p99_ms": _r(median([r["p99_ms"] for r in results])),
            "max_ms": _r(median([r["max_ms"] for r in results])),
            "worst_max_ms": max(r["max_ms"] for r in results),
            "stale_keys": max(r["stale_keys"] for r in results), "stale_target": 0}


# -- devstack/stack.sh --------------------------------------------------------------------
def _stack_sh_args(*args: str) -> list[str]:
    return [str(ROOT / "devstack" / "stack.sh"), *args]


def _stack_sh_env(stack) -> dict[str, str]:
    """stack.sh finds its services by data dir and ports: take them from the env file, so
    that the script acts on the stack the benchmark uses."""
    data_dir = stack.env["DEVSTACK_DIR"]
    port = stack.bootstrap.rsplit(":", 1)[1]
    env = {**os.environ, "CACHESYNC_DEVSTACK_DIR": data_dir, "DEVSTACK_KAFKA_PORT": port,
           "DEVSTACK_MYSQL_PORT": stack.env["CACHESYNC_MYSQL_PORT"],
           "DEVSTACK_REDIS_PORT": stack.env["CACHESYNC_REDIS_URL"].rsplit(":", 1)[1].split("/")[0]}
    props = Path(data_dir) / "kafka" / "server.properties"
    for line in props.read_text().splitlines():
        if line.startswith("controller.quorum.voters="):
            env["DEVSTACK_KAFKA_CONTROLLER_PORT"] = line.rsplit(":", 1)[1].strip()
    return env


def _stack_sh(stack, *args: str) -> None:
    done = subprocess.run(_stack_sh_args(*args), env=_stack_sh_env(stack), capture_output=True,
                          text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"stack.sh {' '.join(args)} failed: {done.stderr[-2000:]}")


def first_produce(bootstrap: str, topic: str, timeout_s: float = RECOVERY_TIMEOUT_S,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """When a client that starts now, retrying every 20 ms, first has a record acknowledged
    (acks=all) by the broker (``clock``'s time): how long the restarted broker itself takes to
    serve produce requests, the floor of every client's recovery."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    deadline = clock() + timeout_s
    while True:
        producer = None
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                     reconnect_backoff_ms=20, reconnect_backoff_max_ms=20,
                                     retry_backoff_ms=20, max_block_ms=2000,
                                     # plain: an idempotent one first asks a restarting
                                     # broker for a producer id (seen hanging the probe)
                                     enable_idempotence=False)
            producer.send(topic, b"probe").get(timeout=2)
            return clock()
        except KafkaError:
            if clock() > deadline:
                raise
            time.sleep(0.02)
        finally:
            if producer is not None:
                try:
                    producer.close(timeout=0)     # a record not acknowledged is dropped
                except KafkaError:
                    pass


def _port_open(bootstrap: str) -> bool:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.2).close()
        return True
    except OSError:
        return False


def _lease_waits(proc) -> int:
    """How often a consumer waited for another's claims (a dead consumer's, after a kill)."""
    with open(proc.log_path) as f:
        return sum("claimed by another consumer" in line for line in f)


def _started_after(proc, spawned_at: float) -> float | None:
    """Seconds from spawning a consumer to its first log line (imports, config, connections)."""
    with open(proc.log_path) as f:
        for line in f:                  # the first line with a timestamp (not a warning's)
            try:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            except ValueError:
                continue
            return _r(stamp.timestamp() - spawned_at)
    return None


def _r(x):
    return None if x is None else round(x, 3)
