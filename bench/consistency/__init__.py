"""The consistency lab (v2): every write-path strategy under the same workload and the same
injected faults, each fault class separately and all together.

Modules: ``faults`` (the fault classes and the injector), ``strategies`` (what the writer
does about the cache), ``workload`` (one strategy under one fault class on the real
services), ``measure`` (stale reads beyond the lag window, nines, targets; pure) and
``plot``. ``run`` is what ``python -m bench --only consistency`` calls.

Per run and fault class, probes measure cachesync's commit -> invalidation lag during every
cell (the same extra writes for every strategy); the slowest probe of the class is its window
for every strategy. ``cachesync_tail_replica`` has its own tailer (reading the replica's
binlog) and consumer; a probe through them runs in every cell too, and its lag is reported
beside the window, not in it.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path

from bench.common import ROOT, Sandbox, log, median, percentile
from bench.consistency import measure, plot
from bench.consistency.faults import CLASSES, OUTSIDE_SHARE, P_FAULT, Faults, shape
from bench.consistency.strategies import (APP, CACHESYNC, CACHESYNC_DOUBLE_DELETE_S,
                                          DOUBLE_DELETE_S, PROBE_TABLE, STRATEGIES, TTL_S,
                                          headline, tables_config)
from bench.consistency.workload import (FILL_DELAY_S, PROBES, REPLICA_WAIT_S, Cell, Databases,
                                        probe)
from cachesync.runtime.env_file import read_env_file

NAME = "consistency"
ROWS = 32
SIZES = {"full": {"seconds": 2.5, "rows": ROWS, "writers": 2, "readers": 4, "write_rate": 120},
         "quick": {"seconds": 0.4, "rows": ROWS, "writers": 2, "readers": 4, "write_rate": 120}}
DDL = "CREATE TABLE `{table}` (id INT PRIMARY KEY, v BIGINT NOT NULL, seq BIGINT NOT NULL)"
PLOT = {"full": Path("docs") / "consistency-lab-classes.png",
        "quick": Path("bench") / "results" / "consistency-quick.png"}


def run(stack, quick: bool, runs: int, classes: tuple[Faults, ...] = CLASSES,
        plot_to: Path | None = None) -> dict:
    """The lab; ``--quick`` runs once (each cell 0.4 s) whatever ``runs`` says. Raises
    RuntimeError when a cachesync child dies or a probe never arrives."""
    mode = "quick" if quick else "full"
    runs = 1 if quick else runs
    base = SIZES[mode]
    ensure_replica(stack)
    box = Sandbox(stack, NAME)
    try:
        values = _create(box)
        procs = [box.spawn(command, cfg) for cfg in _configs(box)
                 for command in ("tail", "consume")]
        dbs = Databases(stack, box.db)
        for tail_replica in PROBE_TABLE:
            warm_up(dbs, box.prefix, lambda: _check_alive(box, procs), tail_replica)
        cells = {f.name: {s.name: [] for s in STRATEGIES} for f in classes}
        windows: dict[str, list[float]] = {f.name: [] for f in classes}
        for i in range(runs):
            for n, faults in enumerate(classes):
                w = _run_class(dbs, box.prefix, faults, shape(base, faults), values,
                               seed=i * 100 + n, into=cells[faults.name])
                windows[faults.name].append(w)
                _check_alive(box, procs)
        dbs.close()
        table = {f: {s: measure.medians(c) for s, c in per.items()} for f, per in cells.items()}
        return _document(base, runs, table, cells, windows, plot_to or ROOT / PLOT[mode])
    finally:
        _drop_internal_keys(box)
        box.cleanup()


def _run_class(dbs, prefix: str, faults: Faults, p: dict, values, seed: int,
               into: dict[str, list]) -> float:
    """Every strategy under ``faults``; returns the class's lag window (seconds)."""
    done, lags = [], []
    for strategy in sorted(STRATEGIES, key=lambda s: not s.cachesync):   # cachesync first
        cell = Cell(dbs, prefix, strategy, faults, p, values, seed)
        # probes in every cell: the same extra writes (and replica load) for every strategy
        raw = cell.run(probes=True, window=max(lags, default=None))
        lags += cell.probe_lags
        done.append((cell, raw))
    window = measure.window(lags)
    tail_replica = [x for cell, _ in done for x in cell.tail_replica_lags]
    for cell, raw in done:
        result = measure.verdict(cell.reads, cell.history, window, raw["left"], raw["seconds"])
        into[cell.strategy.name].append({**result, "injected": raw["injected"],
                                         "lag_window_ms": round(window * 1000, 1),
                                         **_replica_lag(cell.replica_lags)})
        into[cell.strategy.name][-1]["tail_replica_lag_ms"] = _lag_ms(tail_replica)
        log(f"consistency: {faults.name:>14} {cell.strategy.name:>23}: "
            f"{result['stale_reads']}/{result['reads']} stale reads, "
            f"{result['stale_keys_after']} stale keys after, injected {raw['injected']}")
    log(f"consistency: {faults.name}: lag window {window * 1000:.1f} ms ({len(lags)} probes); "
        f"through the replica's tailer {_lag_ms(tail_replica)}")
    return window


def _replica_lag(lags: list[float]) -> dict:
    """The replica's apply lag measured during a replica cell (none elsewhere)."""
    if not lags:
        return {}
    return {"replica_lag_ms": _lag_ms(lags)}


def _lag_ms(lags: list[float]) -> dict | None:
    if not lags:
        return None
    return {"p50": round(percentile(lags, 50) * 1000, 1), "max": round(max(lags) * 1000, 1),
            "samples": len(lags)}


def _configs(box: Sandbox) -> tuple[Path, Path]:
    """Two pipelines (tailer, topic, consumer): the primary's binlog, and the replica's
    (``tailer.source_hosts``; its checkpoint, lock and heartbeat stay on the primary)."""
    env = box.stack.env
    replica = f"{env['DEVSTACK_MYSQL_REPLICA_HOST']}:{env['DEVSTACK_MYSQL_REPLICA_PORT']}"
    # metrics off: the default ports may belong to another cachesync on the machine
    return tuple(box.write_config(tables_config(box.db, box.prefix, tail_replica),
                                  topic=box.new_topic(3), metrics={"listen": "off"},
                                  tailer={"source_hosts": replica} if tail_replica else None)
                 for tail_replica in (False, True))


def _document(base: dict, runs: int, table: dict, cells: dict, windows: dict,
              plot_to: Path) -> dict:
    plot_path = plot.draw(table, {s.name: s.label for s in STRATEGIES}, plot_to,
                          "cachesync consistency lab: stale reads beyond the lag window and "
                          "stale keys left, per fault class (medians)")
    return {
        "description": "per fault class and write-path strategy: reads older than the committed "
                       "value beyond the lag window (cachesync's slowest probe, same run and "
                       "class), stale keys left once writes stop, longest stale time observed",
        "params": {**base, "runs": runs, "fault_p": P_FAULT, "outside_share": OUTSIDE_SHARE,
                   "fill_delay_max_ms": FILL_DELAY_S * 1000, "ttl_s": TTL_S,
                   "double_delete_ms": DOUBLE_DELETE_S * 1000,
                   "cachesync_double_delete_ms": CACHESYNC_DOUBLE_DELETE_S * 1000,
                   "probes": PROBES, "replica_guard_wait_ms": REPLICA_WAIT_S * 1000, "crash_model": "the writer skips every cache step after "
                   "its commit (a process dying there sends nothing more)"},
        "fault_classes": {f.name: f.what for f in CLASSES},
        "strategies": {s.name: s.label for s in STRATEGIES},
        "lag_window_ms": {f: {"median": round(median(w) * 1000, 1),
                              "runs": [round(x * 1000, 1) for x in w]} for f, w in windows.items()},
        "median": table,
        "tail_replica_lag_ms": {f: _lag_summary(per) for f, per in cells.items()},
        # per class, each cachesync strategy against the app strategies; "headline" is the one
        # the targets name: delete mode + read_through, configured as documented for
        # the class's readers (tailing the replica they read, in the replica classes)
        "headline": {f.name: headline(f.replica_reads) for f in CLASSES if f.name in table},
        "targets": {f: {s: measure.target(t, s, APP) for s in CACHESYNC}
                    for f, t in table.items()},
        "runs": cells,
        "plot": _relative(plot_path),
    }


def _lag_summary(per: dict[str, list[dict]]) -> dict:
    """A class's lag through the replica's tailer: median p50 and max over its runs."""
    runs = next(iter(per.values()))     # the class's figure, the same in each strategy's cell
    lags = [c["tail_replica_lag_ms"] for c in runs if c.get("tail_replica_lag_ms")]
    return {"p50": median([x["p50"] for x in lags]) if lags else None,
            "max": max((x["max"] for x in lags), default=None)}


def _create(box: Sandbox):
    """The schema: one table per strategy group, ROWS rows each; returns the value counter."""
    tables = sorted({s.table for s in STRATEGIES})
    box.create_schema(*(DDL.format(table=t) for t in tables),
                      *(f"CREATE TABLE `{t}` (id INT PRIMARY KEY, n BIGINT NOT NULL)"
                        for t in PROBE_TABLE.values()),
                      # the replica's own lag; not in cachesync's mapping
                      "CREATE TABLE replica_probe (id INT PRIMARY KEY, n BIGINT NOT NULL)")
    values = itertools.count(1)
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        for t in tables:
            cur.executemany(f"INSERT INTO `{t}` VALUES (%s, %s, 0)",
                            [(row, next(values)) for row in range(ROWS)])
    return values


def ensure_replica(stack) -> None:
    """Start the devstack's MariaDB replica, or check that the running one replicates (`up`
    rebuilds one that was promoted since: the env file still names it, but it no longer
    follows the primary); raises CalledProcessError with stack.sh's error."""
    log("consistency: the devstack's mariadb-replica (replica-lag fills), started or checked")
    subprocess.run([str(ROOT / "devstack" / "stack.sh"), "up", "mariadb-replica"],
                   check=True, capture_output=True, timeout=300)
    stack.env.update(read_env_file(stack.env_path))


def warm_up(dbs: Databases, prefix: str, alive, tail_replica: bool = False) -> None:
    """Until one probe goes through the primary's (or the replica's) tailer: it may still be
    connecting when the first update commits (it starts at the then-current position), so a
    probe that does not arrive within 2 s is repeated, for up to 90 s. ``alive()`` raises
    when a child died."""
    give_up = time.perf_counter() + 90
    r = dbs.stack.redis()
    table = PROBE_TABLE[tail_replica]
    with dbs.primary() as conn:
        while probe(r, conn, f"{prefix}{table}:0", 0, 2.0, table) is None:
            alive()
            if time.perf_counter() > give_up:
                raise RuntimeError("cachesync never invalidated the probe key in 90 s")


def _check_alive(box: Sandbox, procs) -> None:
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"a cachesync child exited ({proc.returncode}):\n"
                               f"{box.proc_log(proc)}")


def _drop_internal_keys(box: Sandbox) -> None:
    """cachesync's leases and update-mode versions of the lab's keys (outside its prefix)."""
    r = box.stack.redis()
    keys = list(r.scan_iter(match=f"cachesync:*:{box.prefix}*", count=5000))
    if keys:
        r.unlink(*keys)


def _relative(path: Path | None) -> str | None:
    if path is None:
        return None
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
