"""``python -m bench --only consistency_nines``: the consistency lab's large cells, in nines.

The crash, outside-writes and kill classes, each with cachesync (delete mode +
``read_through``), plain cache-aside and double delete at >= 10^7 reads, >= 10^5 writes and
10^4 rows read with Zipf skew per cell (``--quick``: 3 * 10^5 reads, 3,000 writes, 1,000
rows). See :mod:`bench.consistency.large` for what is measured. The other fault classes
stay in the small lab (``--only consistency``).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from bench.common import ROOT, Sandbox, log, wait_for
from bench.consistency import large, plot, series
from bench.consistency.chaos import await_ready
from bench.consistency.faults import OUTSIDE_SHARE, P_FAULT, Faults
from bench.consistency.load import FILL_DELAY_S, PIPELINE, READERS_IDLE, READERS_NICE
from bench.consistency.strategies import BY_NAME, DOUBLE_DELETE_S, TTL_S
from bench.failover import _stack_sh

NAME = "consistency_nines"
PLOT = {"full": Path("docs") / "consistency-lab.png",
        "quick": Path("bench") / "results" / "consistency-nines-quick.png"}
NOTIFY = "Kg"      # keyspace notifications of generic commands (DEL, UNLINK): the markers
# the load warm-up before the first cell: this share of a cell's writes and reads
# (BENCH_NINES_WARM_UP; 0: none)
WARM_UP_SHARE = float(os.environ.get("BENCH_NINES_WARM_UP", "0.1"))
WARM_UP = Faults("warm-up", "no faults: the load before the first cell, not measured")
# kafka.client of cachesync's processes (BENCH_NINES_KAFKA_CLIENT; default: the default, auto)
KAFKA_CLIENT = os.environ.get("BENCH_NINES_KAFKA_CLIENT", "auto")
# kafka.session_timeout_ms of the consumer (BENCH_NINES_SESSION_TIMEOUT_MS; default: the default)
SESSION_TIMEOUT_MS = os.environ.get("BENCH_NINES_SESSION_TIMEOUT_MS")
# tailer.on_kafka_outage of the tailer (BENCH_NINES_ON_KAFKA_OUTAGE; default: the default)
ON_KAFKA_OUTAGE = os.environ.get("BENCH_NINES_ON_KAFKA_OUTAGE")


class Pipeline:
    """cachesync's tail and consume for the cachesync cells, restartable by the injector."""

    def __init__(self, box: Sandbox):
        self.box, self.stack_sh = box, _stack_sh
        self.topic = box.new_topic(3)
        path = box.write_config(large.tables_config(box.db, box.prefix), topic=self.topic,
                                # a free port each: /readyz tells the injector it is back
                                metrics={"listen": "127.0.0.1:0"},
                                # static membership, as a pod runs it: a consumer restarted
                                # under its id takes its partitions back without a rebalance
                                kafka={"group_instance_id": f"nines-{box.suffix}-consume",
                                       "client": KAFKA_CLIENT, **(
                                           {"session_timeout_ms": int(SESSION_TIMEOUT_MS)}
                                           if SESSION_TIMEOUT_MS else {})},
                                **({"tailer": {"on_kafka_outage": ON_KAFKA_OUTAGE}}
                                   if ON_KAFKA_OUTAGE else {}))
        self.configs = {"tail": path, "consume": path}
        self.probe_topic = box.new_topic(1)     # the injector's check that the broker serves
        self.procs = {c: box.spawn(c, path) for c in ("tail", "consume")}
        self.faults_made = 0      # the kill class's faults so far (their cycle spans cells)
        for proc in self.procs.values():
            await_ready(box, proc)

    def check_alive(self) -> None:
        for command, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"cachesync {command} exited ({proc.returncode}):\n"
                                   f"{self.box.proc_log(proc)}")


def run(stack, quick: bool, runs: int = 1) -> dict:
    """Every large class and strategy once (``runs`` is ignored: one cell is 10^7 reads)."""
    mode = "quick" if quick else "full"
    size = large.scaled(large.SIZES[mode], float(os.environ.get("BENCH_NINES_SCALE", "1")))
    box = Sandbox(stack, "nines")
    r = stack.redis()
    notify = r.config_get("notify-keyspace-events")["notify-keyspace-events"]
    r.config_set("notify-keyspace-events", "".join(sorted(set(notify) | set(NOTIFY))))
    try:
        large.create(box, size["rows"])
        pipeline = Pipeline(box)
        _warm_up(box)
        _load_warm_up(box, pipeline, size)
        classes = {}
        chosen = os.environ.get("BENCH_NINES_CLASSES")       # e.g. "kill": a subset
        for n, faults in enumerate(large.CLASSES):
            if chosen and faults.name not in chosen.split(","):
                continue
            classes[faults.name] = _run_class(box, pipeline, faults, size, seed=n)
        subset = chosen or os.environ.get("BENCH_NINES_STRATEGIES")
        # a subset's plot never replaces the docs' one, drawn from every class and strategy
        return _document(size, classes, ROOT / PLOT["quick" if subset else mode])
    finally:
        r.config_set("notify-keyspace-events", notify)
        if os.environ.get("BENCH_NINES_SERIES"):     # the processes' logs beside the series
            logs = Path(os.environ["BENCH_NINES_SERIES"])
            logs.mkdir(parents=True, exist_ok=True)
            for log_path in box.tmp.glob("*.log"):
                shutil.copy(log_path, logs / log_path.name)
        box.cleanup()


def _run_class(box, pipeline: Pipeline, faults, size: dict, seed: int) -> dict:
    out, window = {}, None
    chosen = os.environ.get("BENCH_NINES_STRATEGIES")    # e.g. "cachesync": a subset
    for strategy in large.STRATEGIES:            # cachesync first: its lag is the window
        if chosen and strategy not in chosen.split(","):
            continue
        cell = large.LargeCell(box, pipeline, strategy, faults, size, seed)
        raw = cell.run()
        t_end = time.perf_counter()
        if os.environ.get("BENCH_NINES_SERIES") and raw["gone"]:
            path = Path(os.environ["BENCH_NINES_SERIES"]) / f"{faults.name}-{strategy}.json"
            series.write(path, raw)
        if window is None:
            window = large.class_window(raw)
        out[strategy] = large.verdict(raw, window, t_end)
        pipeline.check_alive()
        f = out[strategy]
        log(f"consistency_nines: {faults.name:>14} {strategy:>15}: {f['reads']:,} reads "
            f"({f['per_read']['stale']['failed']} stale, "
            f"{f['per_read']['beyond_lag']['failed']} beyond the lag), {f['writes']:,} writes, "
            f"within 1 s {f['per_change']['within']['1s']['ratio']:.6f}, "
            f"p99.9 {f['per_change']['p99.9_ms']} ms, {f['stale_keys_after']} stale keys left, "
            f"{f['seconds']} s")
    return out


def _warm_up(box: Sandbox) -> None:
    """Until cachesync applies a change (the tailer may still be connecting)."""
    r = box.stack.redis()
    table = large.TABLES["cachesync"]
    marker = large.marker_template(box.prefix)
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        deadline = time.perf_counter() + 120
        while True:
            cur.execute(f"SELECT seq FROM `{table}` WHERE id = 0")
            (seq,), = cur.fetchall()
            r.set(marker.format(id=0, seq=seq + 1), b"1", ex=TTL_S)
            cur.execute(f"UPDATE `{table}` SET seq = seq + 1 WHERE id = 0")
            try:
                wait_for(lambda: not r.exists(marker.format(id=0, seq=seq + 1)), 3,
                         "warm-up", interval=0.01)
                return
            except TimeoutError:
                if time.perf_counter() > deadline:
                    raise RuntimeError("cachesync never applied a change in 120 s") from None


def _load_warm_up(box: Sandbox, pipeline: Pipeline, size: dict) -> None:
    """A cachesync cell of WARM_UP_SHARE of a cell's size, without faults, whose figures are
    dropped: every process of the write path (MariaDB, the broker's JVM, cachesync, Redis) has
    then run the cells' load before the first measured cell, as it has before every later
    one. Without it the first class's cachesync cell, just after the devstack started, timed
    the broker's JIT compilation and heap growth too (BENCH_NINES_WARM_UP=0: none)."""
    if WARM_UP_SHARE <= 0:
        return
    warm = large.scaled(size, WARM_UP_SHARE)
    log(f"consistency_nines: warm-up: {warm['writes']:,} writes, {warm['reads']:,} reads "
        "(not measured)")
    large.LargeCell(box, pipeline, "cachesync", WARM_UP, warm, seed=-1).run()
    pipeline.check_alive()


def _document(size: dict, classes: dict, plot_to: Path) -> dict:
    strategies = {s: BY_NAME[s].label for s in large.STRATEGIES       # those run
                  if all(s in cells for cells in classes.values())}
    plot_path = plot.draw_nines(classes, strategies, plot_to)
    return {
        "description": "large cells: per change, the share of invalidations applied within "
                       "100 ms and 1 s of the commit (nines, p99.9); per read, stale reads and "
                       "stale reads beyond the lag (cachesync's longest commit -> invalidation "
                       "of the class, outside outages) in nines; stale keys left; 95 % upper "
                       "bounds 3/n where none failed",
        "params": {**size, "pipeline_gets": PIPELINE,
                   "reads": f"MGET of {PIPELINE} keys per round trip; a miss is filled by the "
                            "strategy's reader",
                   "readers_nice": READERS_NICE,
                   "readers_idle": READERS_IDLE,
                   "kafka_client": f"{KAFKA_CLIENT} (BENCH_NINES_KAFKA_CLIENT)",
                   "session_timeout_ms": f"{SESSION_TIMEOUT_MS or 'the default'} "
                                         "(BENCH_NINES_SESSION_TIMEOUT_MS)",
                   "on_kafka_outage": f"{ON_KAFKA_OUTAGE or 'the default, invalidate'} "
                                      "(BENCH_NINES_ON_KAFKA_OUTAGE)",
                   "warm_up": f"before the first cell, a cachesync cell of {WARM_UP_SHARE:g} "
                              "of a cell's writes and reads without faults, not measured "
                              "(BENCH_NINES_WARM_UP)",
                   "priorities": f"the readers and their fill threads at nice {READERS_NICE} "
                                 "(BENCH_NINES_READERS_NICE)"
                                 + (", in SCHED_IDLE (BENCH_NINES_READERS_IDLE)" if READERS_IDLE
                                    else "") + "; the keyspace watcher at "
                                 "SCHED_FIFO 1 where the host allows it (each cachesync "
                                 "cell's instrument.watcher_realtime); the writer, cachesync, "
                                 "MariaDB, Redis and Kafka at the normal priority",
                   "outage": "from the SIGKILL (tail, consume) or the start of `stack.sh down "
                             "kafka` until the component is up and serving: the replacement "
                             "process answers /readyz with 200, the restarted broker "
                             "acknowledged (acks=all) a record a new client produced",
                   "fault_p": P_FAULT,
                   "outside_share": OUTSIDE_SHARE, "fill_delay_max_ms": FILL_DELAY_S * 1000,
                   "ttl_s": TTL_S, "double_delete_ms": DOUBLE_DELETE_S * 1000,
                   "commit_time": "taken just before COMMIT is sent (conservative for both "
                                  "the lag and the stale reads)",
                   "cachesync_apply_time": "when the lab saw cachesync unlink the change's "
                                           "marker key (keyspace notification); each "
                                           "cachesync cell's `instrument` says how late the "
                                           "watcher heard the markers being set and how long "
                                           "COMMIT took to return",
                   "app_apply_time": "when the writer's post-commit DEL returned (double "
                                     "delete: the delayed one); never after a crash or an "
                                     "outside write"},
        "fault_classes": {f.name: f.what for f in large.CLASSES},
        "strategies": strategies,
        "classes": classes,
        "plot": str(plot_path.relative_to(ROOT)) if plot_path and plot_path.is_relative_to(ROOT)
        else (str(plot_path) if plot_path else None),
    }
