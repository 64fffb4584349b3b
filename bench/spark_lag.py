"""Commit -> invalidation latency with the real tailer in front: Spark consume vs the python engine.

The pipeline of bench/lag.py (``cachesync tail`` as a child process, writer processes
committing single-row transactions open loop at a fixed rate, Redis key-event
notifications timing each key's removal), with two consumers in turn on the same topic,
the same table and the same tailer:

* contender: ``cachesync spark-submit --conf spark.cores.max=1 -- consume --engine spark``
  on the devstack's standalone cluster: one executor core, the default trigger (500 ms),
  MySQL dedup store, a fresh checkpoint;
* baseline: ``cachesync consume`` (the python engine, one process, config defaults), started
  after the Spark driver stopped (it first skips, as duplicates, what Spark applied).

``BENCH_SPARK_LAG_RATES`` (comma-separated commits/s, default ``1000,5000``): the rates
measured, each for the mode's seconds. Each run records ``host_busy``, the share of the
host's CPU time busy over it (1.0: every core busy throughout, every process waiting).

``BENCH_SPARK_TRIGGERS`` (comma-separated, default ``default``): one Spark consumer per
value, in that order, before the python engine: ``default`` (no ``--trigger``: the setting's
default) or any ``--trigger`` value (``200ms``, ``0``); figures under ``spark`` for the
default and ``spark_trigger_<value>`` for the others.

Each consumer is warmed up (keys invalidated end to end), then, before each asked rate,
runs WARM_LOAD_S seconds at that rate, unmeasured: a long-running Spark query's JVMs
(driver and executor) have compiled their hot code, which in the first minutes costs them
more CPU than the micro-batches themselves (C1/C2 compiler threads, 230-290 ms per
micro-batch each, measured at 1,000 commits/s; at 5,000/s still 40 ms each after two
minutes, ``python -m bench.spark_cycle 5000 180``), and a rate's batches are larger than the
rate before's; the python engine gets the same. Start-up is not in the figures. Needs
`devstack/stack.sh up spark` (started here if not).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench import lag
from bench.common import ROOT, Sandbox, busy_share, host_cpu, log, ratio, summarize, wait_for
from bench.spark_cluster import _cluster
from cachesync.consumer.spark.stream import parse_trigger

NAME = "spark_lag"
# (commits/s, seconds) per figure
SIZES = {"full": ((1000, 30.0), (5000, 30.0)), "quick": ((1000, 5.0), (5000, 5.0))}
SPARK_CONF = {"spark.cores.max": "1", "spark.executor.memory": "512m",
              "spark.ui.enabled": "false"}
# seconds of unmeasured load per consumer before each rate's figures (the module docstring)
WARM_LOAD_S = {"full": 60.0, "quick": 20.0}
FIELDS = ["p50_ms", "p90_ms", "p99_ms", "max_ms", "achieved_rate", "missing", "host_busy"]
# Harness.warm_up waits 90 s a try; at load average 40 a Spark application's first
# micro-batch came 6 minutes after its spark-submit
WARM_TRIES = 10
DEFAULT = "default"     # BENCH_SPARK_TRIGGERS: the consumer's own default trigger


def run(stack, quick: bool, runs: int) -> dict:
    rates = _rates(os.environ.get("BENCH_SPARK_LAG_RATES"), SIZES["quick" if quick else "full"])
    warm_load_s = WARM_LOAD_S["quick" if quick else "full"]
    triggers = _triggers(os.environ.get("BENCH_SPARK_TRIGGERS", DEFAULT))
    env = _cluster()
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(lag.DDL)
        topic = box.new_topic(3)
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}",
                                                           box.prefix + "lag:note:{note}"]}},
                               topic=topic, consumer={"dedup_store": "mysql"},
                               metrics={"listen": "127.0.0.1:0"})   # any free port
        settings = box.settings(cfg)
        tail = box.spawn("tail", cfg)
        wait_for(lambda: lag._alive(box, tail) and lag._checkpoint_stored(stack, settings.tailer.name),
                 60, "the tailer's start checkpoint")
        harness = lag.Harness(box, notified=True)
        figures: dict = {}
        try:
            for engine, trigger in [*(("spark", t) for t in triggers), ("python", None)]:
                consume = (_submit(box, cfg, env, trigger) if engine == "spark"
                           else box.spawn("consume", cfg))
                if trigger not in (None, DEFAULT):
                    engine = f"spark_trigger_{trigger}"
                try:
                    try:
                        warm = _warm(harness,
                                     lambda: lag._alive(box, tail) and lag._alive(box, consume))
                    except TimeoutError:      # the sandbox and its logs go with the failure
                        log(f"{NAME}: {engine} consumer's log ends:\n{box.proc_log(consume)}")
                        raise
                    log(f"{NAME}: {engine} consumer warm, first key gone after {warm:.2f}s")
                    for rate, seconds in rates:
                        harness.measure_commits(rate, warm_load_s, False)     # not kept
                        results = [_measured(harness, rate, seconds) for _ in range(runs)]
                        for result in results:
                            log(f"{NAME}: {engine} {rate}/s: p50 {result['p50_ms']} ms, p99 "
                                f"{result['p99_ms']} ms at {result['achieved_rate']}/s")
                        figures.setdefault(str(rate), {"rate_per_s": rate, "seconds": seconds})
                        figures[str(rate)][engine] = summarize(results, FIELDS)
                finally:
                    _stop(box, consume)
        finally:
            harness.close()
        lag._child_report(box, tail)
        for figure in figures.values():
            python_p99 = figure["python"]["median"]["p99_ms"]
            for engine in [e for e in figure if e.startswith("spark")]:
                figure[f"p99_{engine}_vs_python"] = ratio(figure[engine]["median"]["p99_ms"],
                                                          python_p99)
        return {
            "description": "commit -> key-gone latency, cachesync tail in front: Spark consume "
                           "(standalone devstack cluster, one executor core, default trigger) "
                           "vs the python engine, same topic, same tailer, same run",
            "params": {"rates": [list(r) for r in rates], "runs": runs, "partitions": 3,
                       "warm_load_s_per_rate": warm_load_s,
                       "keys_per_row": lag.KEYS_PER_ROW, "dedup_store": "mysql",
                       "spark_conf": SPARK_CONF, "spark_triggers": triggers,
                       "order": "spark (each trigger in turn), then python",
                       "spark_master": env["DEVSTACK_SPARK_MASTER_URL"],
                       "latency_from": "the writer's commit returning",
                       "host": "shared, 2 cores"},
            "rates": figures,
        }
    finally:
        box.cleanup()


def _rates(spec: str | None, default):
    """``BENCH_SPARK_LAG_RATES`` (comma-separated commits/s, e.g. ``1000,2500,5000``) with the
    mode's seconds per rate, or the mode's rates."""
    if not spec:
        return default
    seconds = default[0][1]
    return tuple((int(r), seconds) for r in spec.split(",") if r.strip())


def _measured(harness, rate: int, seconds: float) -> dict:
    """One run's figures, with how busy the host's CPUs were over it (``host_busy``: 1.0 is
    every core busy the whole run, where every process waits for a core) and the load."""
    before = host_cpu()
    result = harness.measure_commits(rate, seconds, False)
    return {**result, "host_busy": busy_share(before, host_cpu()),
            "loadavg_1m": round(os.getloadavg()[0], 1)}


def _triggers(spec: str) -> list[str]:
    """``BENCH_SPARK_TRIGGERS``' values, each checked as ``--trigger`` checks it."""
    triggers = [t.strip() for t in spec.split(",") if t.strip()] or [DEFAULT]
    for trigger in triggers:
        if trigger != DEFAULT:
            parse_trigger(trigger)      # ValueError naming the accepted forms
    return triggers


def _submit(box: Sandbox, cfg: Path, env: dict, trigger: str = DEFAULT) -> subprocess.Popen:
    """`cachesync spark-submit ... -- consume --engine spark` in its own process group, a
    fresh checkpoint per submission."""
    out = open(box.tmp / f"spark-consume-{trigger}.log", "w")
    confs = [a for k, v in SPARK_CONF.items() for a in ("--conf", f"{k}={v}")]
    chosen = [] if trigger == DEFAULT else ["--trigger", trigger]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachesync", "spark-submit", "--master",
         env["DEVSTACK_SPARK_MASTER_URL"], "--executor-python", env["DEVSTACK_SPARK_PYTHON"],
         *confs, "--", "consume", "--engine", "spark",
         "--config", str(cfg), "--checkpoint-location",
         str(box.tmp / f"spark-checkpoint-{trigger}"), *chosen],
        cwd=ROOT, env={**box.stack.environ, "SPARK_LOCAL_IP": "127.0.0.1"}, stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    proc.log_path = out.name
    return proc


def _warm(harness, alive) -> float:
    """Harness.warm_up, tried again while the Spark application is still starting."""
    t0 = time.perf_counter()
    for attempt in range(WARM_TRIES):
        try:
            harness.warm_up(alive)
            return time.perf_counter() - t0
        except TimeoutError:
            if attempt == WARM_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def _stop(box: Sandbox, proc) -> None:
    """SIGTERM (a Spark driver lets its micro-batch finish), then the process group killed."""
    if proc.poll() is not None:
        return
    if proc.args[3] != "spark-submit":
        box.stop_proc(proc)
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
