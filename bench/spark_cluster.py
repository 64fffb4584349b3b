"""Spark on the devstack's standalone cluster vs the python engine, same topic, same run.

A fresh topic (3 partitions) is pre-filled once with M ChangeEvents (bench.consumer.prefill:
2 distinct keys each, one record per event). Per run, every key is SET first, then:

* consume, baseline: the python engine (one process in a fresh group, MySQL dedup store)
  until it consumed M events;
* consume, contender: `consume --engine spark` (build_spark_engine, trigger availableNow,
  micro-batches of MAX_OFFSETS) on the cluster with ONE executor core (spark.cores.max=1), a fresh
  checkpoint and dedup namespace; the session is started and its executor's Python worker
  warmed once, outside the timing; then one untimed consume by each engine (WARM_UP);
  besides the whole run's keys/s, both engines' steady keys/s after their first batch (the
  Spark task's time per phase is logged per micro-batch);
  the records reach the executor's Python worker as Arrow batches (its Python has pyarrow:
  the devstack's executor Python, devstack/spark/executor-python.sh);
* consume, rows: the same Spark engine with the records handed over as pickled Rows (what
  it does when the executors' Python has no pyarrow);
* replay, baseline / contender: `replay --engine python` / `--engine spark` (the session
  above, so one executor core) of the whole topic;
* executor loss (once, contender only): a consume run whose executor is killed with SIGKILL
  after its first micro-batch; reported: seconds from the kill to the next applied batch,
  and keys still in Redis after the run (stale keys: must be 0).

Needs `devstack/stack.sh up spark` (started here if it is not).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from bench.common import ROOT, Sandbox, Worker, log, ratio, stat_cpu_s, summarize
from bench.consumer import engine_run, populate, prefill
from cachesync.commands.consume_spark import build_spark_engine
from cachesync.commands.replay import run_replay
from cachesync.consumer.replay import parse_bound
from cachesync.consumer.spark import DEFAULT_MAX_OFFSETS
from cachesync.devstack import wait_for

NAME = "spark_cluster"
SIZES = {"full": 200_000, "quick": 40_000}
PARTITIONS = 3
# records per micro-batch of a consume run: the engine's default (--max-offsets-per-trigger);
# BENCH_SPARK_MAX_OFFSETS sets another. The first batch starts the executor's Python worker and
# connections, the others show the steady rate.
MAX_OFFSETS = int(os.environ.get("BENCH_SPARK_MAX_OFFSETS", DEFAULT_MAX_OFFSETS))
# one untimed consume by each engine before the timed runs: the executor JVM compiles its
# Kafka and Arrow code on its first batches (a long-running query pays that once, 4-5 s of
# JVM CPU in the first batch), and the host settles after the prefill
WARM_UP = ("consume_python", "consume_spark")
APP_CONF = {"spark.executor.memory": "512m", "spark.cores.max": "1"}
EXECUTOR = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def run(stack, quick: bool, runs: int) -> dict:
    from cachesync.consumer.spark.session import spark_session
    env = _cluster()
    m = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    r = stack.redis()
    try:
        topic = box.new_topic(PARTITIONS)
        table = f"{box.db}.items"
        keys, prefill_s, _ = prefill(box, {True: box.new_topic(PARTITIONS), False: topic},
                                     box.db, "items", m)
        tables = {table: {"keys": [box.prefix + "item:{id}", box.prefix + "item:sku:{sku}"]}}
        t0 = time.perf_counter()
        with spark_session("cachesync-bench", env["DEVSTACK_SPARK_MASTER_URL"],
                           conf=APP_CONF) as spark:
            _warm_executor(spark)
            startup_s = time.perf_counter() - t0
            warm_up = {}
            for what in WARM_UP:
                populate(r, keys)
                warm_up[what] = _one(what, box, spark, topic, tables, m, len(keys))["keys_per_s"]
                log(f"{NAME}: warm-up {what} (not kept): {warm_up[what]:.0f} keys/s")
            sides = {k: [] for k in ("consume_python", "consume_spark", "consume_spark_rows",
                                     "replay_python", "replay_spark")}
            for i in range(runs):
                order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                for what in order:
                    populate(r, keys)
                    result = _one(what, box, spark, topic, tables, m, len(keys))
                    result["loadavg_1m"] = round(os.getloadavg()[0], 1)   # at its end
                    sides[what].append(result)
                    log(f"{NAME}: run {i + 1}/{runs} {what}: {result['keys_per_s']:.0f} keys/s")
            populate(r, keys)
            loss = _executor_loss(box, spark, topic, tables, m, keys, r)
        fields = ["keys_per_s", "events_per_s", "elapsed_s", "steady_keys_per_s"]
        s = {k: summarize(v, fields) for k, v in sides.items()}
        return {
            "description": "Spark on the standalone devstack cluster (one executor core) vs the "
                           "python engine (one process) on the same topic, same run: consume "
                           "(MySQL dedup) and replay; then an executor killed mid-consume",
            "params": {"events": m, "keys": len(keys), "keys_per_event": 2,
                       "max_offsets_per_trigger": MAX_OFFSETS,
                       "partitions": PARTITIONS, "runs": runs, "prefill_s": round(prefill_s, 2),
                       "spark_master": env["DEVSTACK_SPARK_MASTER_URL"], "spark_conf": APP_CONF,
                       "spark_startup_s": round(startup_s, 2), "warm_up_keys_per_s": warm_up,
                       "executor_python": os.environ["CACHESYNC_SPARK_EXECUTOR_PYTHON"],
                       "host": "shared, 2 cores"},
            "consume": {"baseline": {"name": "consume --engine python", **s["consume_python"]},
                        "contender": {"name": "consume --engine spark, 1 executor core, "
                                              "trigger availableNow", **s["consume_spark"]},
                        "spark_vs_python": ratio(s["consume_spark"]["median"]["keys_per_s"],
                                                 s["consume_python"]["median"]["keys_per_s"]),
                        # after each engine's first batch (python: its first poll, spark: the
                        # first micro-batch, which starts the executor's Python worker)
                        "steady_spark_vs_python": ratio(
                            s["consume_spark"]["median"]["steady_keys_per_s"],
                            s["consume_python"]["median"]["steady_keys_per_s"]),
                        # the same engine, the records handed to the Python worker as
                        # pickled Rows (executors without pyarrow)
                        "rows": {"name": "consume --engine spark, 1 executor core, records "
                                         "as pickled Rows", **s["consume_spark_rows"]},
                        "arrow_vs_rows": ratio(s["consume_spark"]["median"]["keys_per_s"],
                                               s["consume_spark_rows"]["median"]["keys_per_s"]),
                        "rows_vs_python": ratio(s["consume_spark_rows"]["median"]["keys_per_s"],
                                                s["consume_python"]["median"]["keys_per_s"])},
            "replay": {"baseline": {"name": "replay --engine python", **s["replay_python"]},
                       "contender": {"name": "replay --engine spark, 1 executor core",
                                     **s["replay_spark"]},
                       "spark_vs_python": ratio(s["replay_spark"]["median"]["keys_per_s"],
                                                s["replay_python"]["median"]["keys_per_s"])},
            "executor_loss": loss,
        }
    finally:
        r.close()
        box.cleanup()


def _warm_executor(spark) -> None:
    """Start the executor's Python worker and import the engine's modules there, outside the
    timing (a long-running query pays it once): otherwise the first timed Spark run of the
    session, whichever side it is, pays it alone."""
    from cachesync.consumer.spark.stream import arrow_transfer

    def load(rows):
        list(rows)    # a worker that left input unread is not reused (pyspark worker.py)
        import cachesync.consumer.spark.applier  # noqa: F401
        import cachesync.wiring  # noqa: F401
        return [0]
    spark.sparkContext.parallelize([0], 1).mapPartitions(load).collect()

    def load_arrow(batches):
        # Arrow tasks get their Python workers from a daemon of their own: warm it too
        import pyarrow as pa
        list(batches)
        load([])
        yield pa.RecordBatch.from_pylist([{"x": 0}])
    if arrow_transfer(spark)[0]:
        spark.range(1, numPartitions=1).mapInArrow(load_arrow, "x long").collect()


def _cluster() -> dict[str, str]:
    """Start the devstack's spark variant (idempotent); its facts from the env file."""
    from cachesync.runtime.env_file import read_env_file
    from cachesync.devstack import default_env_file
    subprocess.run([str(ROOT / "devstack" / "stack.sh"), "up", "spark"], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    env = read_env_file(default_env_file(ROOT))
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("CACHESYNC_SPARK_EXECUTOR_PYTHON", env["DEVSTACK_SPARK_PYTHON"])
    return env


def _one(what: str, box, spark, topic, tables, m: int, n_keys: int) -> dict:
    if what == "consume_python":
        return engine_run(box, topic, tables, m, n_keys, "mysql")
    if what == "consume_spark":
        return _spark_consume(box, spark, topic, tables, m)[0]
    if what == "consume_spark_rows":
        return _spark_consume(box, spark, topic, tables, m, transfer="rows")[0]
    engine = what.split("_")[1]
    settings = box.settings(box.write_config(tables, topic=topic))
    report = run_replay(settings, settings.tables, engine, parse_bound("earliest"),
                        parse_bound("latest"), spark=spark, show_progress=False)
    if report.records != m or report.keys_existed != n_keys:
        raise RuntimeError(f"{what}: {report.records} records, {report.keys_existed} existed")
    return {"what": what, "elapsed_s": report.elapsed_s,
            "events_per_s": round(m / report.elapsed_s, 1),
            "keys_per_s": round(n_keys / report.elapsed_s, 1)}


def _spark_consume(box, spark, topic, tables, m: int, trigger="availableNow", on_batch=None,
                   max_offsets: int = MAX_OFFSETS, transfer: str = "auto"):
    cfg = box.write_config(tables, topic=topic, group=box.new_group(),
                           consumer={"dedup_store": "mysql"})
    checkpoint = Path(box.tmp) / f"ck-{time.monotonic_ns()}"
    batches: list[dict] = []
    jvm = [_executor_cpu()]

    def record(report):
        jvm.append(_executor_cpu())
        batches.append({"at": time.perf_counter(), "events": report.stats.consumed,
                        "keys": report.stats.keys_deleted, "wall_s": round(report.wall_s, 3),
                        **{f"{k}_s": round(v, 3) for k, v in report.timings.items()},
                        "executor_jvm_cpu_s": _delta(jvm[-2], jvm[-1])})
        if on_batch is not None:
            on_batch(report)
    engine = build_spark_engine(box.settings(cfg), spark, str(checkpoint), max_offsets,
                                on_batch=record, trigger=trigger, transfer=transfer)
    engine.start()                     # the query's start is not timed, as the python side's
    t0 = time.perf_counter()
    engine.run()
    elapsed = time.perf_counter() - t0
    s = engine.stats
    if (s.consumed, s.applied) != (m, m):
        raise RuntimeError(f"spark consume: unexpected stats {s}")
    keys = s.keys_deleted
    phases = [p.get("durationMs") for p in engine.progress() if p.get("numInputRows")]
    log(f"{NAME}: spark micro-batches, Spark's durationMs: {phases}")
    first, last = batches[0], batches[-1]
    steady = last["at"] - first["at"]
    for b in batches:
        b.pop("at")
    log(f"{NAME}: spark batches (driver wall time, the tasks' phases summed): {batches}")
    return {"what": "consume_spark", "transfer": engine.transfer, "events": m, "keys": keys, "elapsed_s": round(elapsed, 4),
            "events_per_s": round(m / elapsed, 1), "keys_per_s": round(keys / elapsed, 1),
            "startup_s": round(first["wall_s"], 4),
            "steady_keys_per_s": round((keys - first["keys"]) / steady, 1) if steady else None,
            "batches": batches}, engine


def _executor_loss(box, spark, topic, tables, m: int, keys: list[str], r) -> dict:
    """Kill the executor after the first micro-batch; time until the next one applied."""
    batches: list[float] = []
    killed: list[float] = []

    def on_batch(report):
        batches.append(time.perf_counter())
        if len(batches) == 1:
            pid = _executor_pid()
            os.kill(pid, signal.SIGKILL)
            killed.append(time.perf_counter())
    worker = Worker(lambda: _spark_consume(box, spark, topic, tables, m, on_batch=on_batch,
                                           max_offsets=max(1000, m // 10)), "spark-loss")
    worker.start()
    wait_for(lambda: worker.check() or not worker.is_alive(), 900, what="the executor-loss run",
             interval=0.5)
    worker.check()
    after = [t for t in batches if killed and t > killed[0]]
    stale = sum(r.exists(*keys[i:i + 1000]) for i in range(0, len(keys), 1000))
    return {"recovery_s": round(after[0] - killed[0], 2) if after else None,
            "batches_after_kill": len(after), "stale_keys": stale}


def _executor_cpu() -> tuple[int, float] | None:
    """(pid, CPU seconds so far, user + system) of the executor JVM, None without one: per
    micro-batch, the work Spark does outside the Python worker (Kafka fetch, row and Arrow
    conversion) -- the Python worker's own CPU is the tasks' ``cpu``."""
    try:
        pid = _executor_pid()
        return pid, stat_cpu_s(Path("/proc") / str(pid) / "stat")
    except (RuntimeError, OSError):
        return None


def _delta(before, after) -> float | None:
    """CPU seconds between two _executor_cpu readings of the same executor."""
    if before is None or after is None or before[0] != after[0]:
        return None
    return round(after[1] - before[1], 3)


def _executor_pid() -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                args = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if EXECUTOR in args and _ours(args):
                return int(proc.name)
    raise RuntimeError("no executor of the bench's application")


def _ours(args: list[bytes]) -> bool:
    """An executor of this devstack's workers (ports after DEVSTACK_SPARK_PORT_BASE)."""
    base = int(os.environ.get("DEVSTACK_SPARK_PORT_BASE", "17077"))
    url = args[args.index(b"--worker-url") + 1].decode()
    return int(url.rsplit(":", 1)[1]) in (base + 2, base + 4)
