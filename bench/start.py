"""Start: how long a cold ``cachesync consume`` and ``cachesync tail`` take, from launch to work.

Each run launches the real processes with default settings (only ``metrics.listen`` on a free
port: the host is shared):

* ``consume`` (a new consumer group each run: a cold start): one delete event of a cached
  key waits on the topic. Figures: launch -> the key gone from Redis (``first_applied_s``),
  and, from the process's own ``start:`` log line, launch -> the first poll call and each
  step before it (command = interpreter, imports and arguments; settings; topics; metrics;
  engine built).
* ``tail`` (a new tailer name, ``--from-gtid`` just before one committed row): launch -> the
  row's record appended by the broker (``first_append_s``, the topic's LogAppendTime), and
  from the ``start:`` line launch -> the first binlog read and its steps (settings, topics,
  metrics, preflight, lock).

``cpu_s``: CPU seconds of the process and its children (the tail's publisher process) over
the whole run. ``<step> without CPU waits``: launch -> the step less the time the process's
thread sat in the kernel's run queue waiting for a CPU (its own ``start:`` line): the start
as it is where a CPU is free; a shared host stretches the wall time many times over. Both
checkouts' sources are compiled to bytecode first, as an install does. One more launch of each, under ``-X importtime``, gives the import self-time
per top-level package.

With BENCH_BASELINE_TREE (another checkout with its own .venv, see bench.common.baseline_tree)
every run launches that checkout's processes too, interleaved, and ``ratios`` are this
checkout's medians over the baseline's. The host is shared: compare within one run.
"""

from __future__ import annotations

import re
import resource
import time
from collections import Counter

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from bench.common import (Sandbox, baseline_tree, compile_tree, log, median, ratio, tree_commit,
                          wait_for)
from bench.tailer import _append_time
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import decode_record, encode
from cachesync.schema.keys import kafka_key

NAME = "start"
PARTITIONS = 3
TABLE = "start_rows"
DDL = f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, v INT NOT NULL)"
METRICS = {"listen": "127.0.0.1:0"}     # a free port: several processes on a shared host
TIMEOUT_S = 120.0
TARGETS_S = {"consume": ("first poll", 1.0), "tail": ("first binlog read", 1.0)}
START_LINE = re.compile(r"start: (?P<step>.+?) after (?P<s>[\d.]+) s, (?P<cpu>[\d.]+) s CPU"
                        r"(?:, (?P<wait>[\d.]+) s waiting for a CPU)? \((?P<steps>.*)\)")
LATE_LINE = re.compile(r"start: (?P<step>[^(]+?) after (?P<s>[\d.]+) s$", re.M)
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")


def run(stack, quick: bool, runs: int) -> dict:
    box = Sandbox(stack, NAME)
    try:
        return StartBench(box).report(runs)
    finally:
        box.cleanup()


class StartBench:
    def __init__(self, box: Sandbox):
        self.box = box
        box.create_schema(DDL)
        self.topic = box.new_topic(PARTITIONS)
        _append_time(box, self.topic)
        self.tables = {f"{box.db}.{TABLE}": {"keys": [box.prefix + "start:{id}"]}}
        self.trees = {"new": None}
        baseline = baseline_tree()
        if baseline is not None:
            self.trees["baseline"] = baseline
        for tree in self.trees.values():
            compile_tree(tree)
        self._row = 0

    def report(self, runs: int) -> dict:
        figures = {(cmd, label): [] for cmd in ("consume", "tail") for label in self.trees}
        for i in range(runs):
            for label, tree in self.trees.items():
                self.box.tree = tree
                log(f"start: run {i + 1}, {label}")
                figures["consume", label].append(self.consume_run())
                figures["tail", label].append(self.tail_run())
        imports = {}
        for label, tree in self.trees.items():
            self.box.tree = tree
            imports[label] = {"consume": self.consume_run(importtime=True),
                              "tail": self.tail_run(importtime=True)}
        self.box.tree = None
        out = {cmd: {label: _summary(figures[cmd, label]) for label in self.trees}
               for cmd in ("consume", "tail")}
        return {"description": "cold start of cachesync consume and cachesync tail: launch -> "
                               "first poll / first binlog read / first key applied / first "
                               "Kafka append (child processes, default settings)",
                "params": {"runs": runs, "partitions": PARTITIONS,
                           "trees": {label: tree_commit(tree) for label, tree in self.trees.items()},
                           "host": "shared with other work: compare within this run"},
                **out, "targets": _targets(out), "ratios": _ratios(out),
                "imports_self_s_by_package": imports}

    # -- consume --------------------------------------------------------------------------
    def consume_run(self, importtime: bool = False) -> dict:
        """A new group; one delete event of a cached key waits for it."""
        row = self._next_row()
        key = f"{self.box.prefix}start:{row}"
        r = self.box.stack.redis()
        try:
            r.set(key, "cached")
            self._produce_delete(row)
            cfg = self.box.write_config(self.tables, topic=self.topic, metrics=METRICS)
            proc, launched, cpu0 = self._launch("consume", cfg, (), importtime)
            gone = wait_for(lambda: self._alive(proc) and not r.exists(key) and time.time(),
                            TIMEOUT_S, "the consumer deleting the key", interval=0.01)
        finally:
            r.close()
        return self._finish(proc, launched, cpu0, importtime, first_applied_s=gone - launched)

    def _produce_delete(self, row: int) -> None:
        producer = KafkaProducer(bootstrap_servers=self.box.stack.bootstrap, acks="all")
        try:
            ctx = TxnContext("mariadb:bench-start", f"0-88-{row}", row, time.time())
            event = row_change(ctx, 0, self.box.db, TABLE, "delete", "id",
                               {"id": row, "v": 0}, None)
            producer.send(self.topic, key=kafka_key(self.box.db, TABLE, event.pk).encode(),
                          value=encode(event), headers=[("id", event.id.encode("ascii"))])
            producer.flush(30)
        finally:
            producer.close()

    # -- tail -------------------------------------------------------------------------------
    def tail_run(self, importtime: bool = False) -> dict:
        """A new tailer name, started just before one committed row."""
        row = self._next_row()
        with self.box.stack.admin(self.box.db) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            (before,) = cur.fetchone()
            cur.execute(f"INSERT INTO {TABLE} VALUES (%s, 0)", (row,))
        reader = self._reader()
        try:
            cfg = self.box.write_config(self.tables, topic=self.topic, metrics=METRICS)
            proc, launched, cpu0 = self._launch("tail", cfg, ("--from-gtid", before), importtime)
            appended = wait_for(lambda: self._alive(proc) and self._appended(reader, row),
                                TIMEOUT_S, "the tailer's record of the row", interval=0)
        finally:
            reader.close()
        return self._finish(proc, launched, cpu0, importtime, first_append_s=appended - launched)

    def _reader(self) -> KafkaConsumer:
        consumer = KafkaConsumer(bootstrap_servers=self.box.stack.bootstrap, group_id=None,
                                 enable_auto_commit=False)
        parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_end(*parts)
        for tp in parts:
            consumer.position(tp)           # resolved now, before the tailer publishes
        return consumer

    def _appended(self, reader: KafkaConsumer, row: int) -> float | None:
        """The broker's append time of the row's record, once it is read."""
        for records in reader.poll(timeout_ms=50).values():
            for record in records:
                for event in decode_record(record.value):
                    if event.table == TABLE and str(dict(event.pk).get("id")) == str(row):
                        return record.timestamp / 1000
        return None

    # -- shared -----------------------------------------------------------------------------
    def _launch(self, command: str, cfg, args, importtime: bool):
        env = {"PYTHONPROFILEIMPORTTIME": "1"} if importtime else None
        cpu0 = _children_cpu()
        launched = time.time()
        return self.box.spawn(command, cfg, env=env, args=args), launched, cpu0

    def _finish(self, proc, launched: float, cpu0: float, importtime: bool, **figures) -> dict:
        self.box.stop_proc(proc)
        text = open(proc.log_path).read()
        if importtime:
            return _import_self_s(text)
        out = {k: round(v, 3) for k, v in figures.items()}
        out["cpu_s"] = round(_children_cpu() - cpu0, 3)
        out.update(parse_start(text) or {})
        return out

    def _alive(self, proc) -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"cachesync exited {proc.returncode}:\n{self.box.proc_log(proc)}")
        return True

    def _next_row(self) -> int:
        self._row += 1
        return self._row


def start_steps(proc) -> dict[str, float] | None:
    """The ``start:`` lines (cachesync.runtime.startup) in a spawned process's log."""
    with open(proc.log_path) as f:
        return parse_start(f.read())


def parse_start(text: str) -> dict[str, float] | None:
    """Each start step's seconds since launch and ``cpu_s`` (CPU seconds until the last
    step); None for a checkout that does not log them."""
    found = START_LINE.search(text)
    if not found:
        return None
    steps = {found["step"]: float(found["s"]), "cpu_s_to_start": float(found["cpu"])}
    if found["wait"] is not None:       # the start as it would be with a CPU free
        steps["cpu_wait_s_to_start"] = float(found["wait"])
        steps[f"{found['step']} without CPU waits"] = round(
            float(found["s"]) - float(found["wait"]), 3)
    for part in found["steps"].split(", "):
        name, _, seconds = part.rpartition(" ")
        steps[name] = float(seconds)
    steps.update({late["step"]: float(late["s"]) for late in LATE_LINE.finditer(text)})
    return steps


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _import_self_s(text: str) -> dict:
    """Import self-time per top-level package (cachesync per subpackage), largest first; the
    tail's includes its publisher process."""
    per = Counter()
    for us, module in IMPORT_LINE.findall(text):
        parts = module.split(".")
        per[".".join(parts[:2]) if parts[0] == "cachesync" else parts[0]] += int(us)
    top = {name: round(us / 1e6, 3) for name, us in per.most_common(12)}
    return {"total_s": round(sum(per.values()) / 1e6, 3), "modules": len(IMPORT_LINE.findall(text)),
            "top": top}


def _summary(runs: list[dict]) -> dict:
    names = [n for n in runs[0] if all(n in r for r in runs)] if runs else []
    return {"median": {n: median([r[n] for r in runs]) for n in names}, "runs": runs}


def _targets(out: dict) -> dict:
    """The target against the wall time, and against the wall time less the waits for a CPU
    (what a host with a free CPU would show)."""
    found = {}
    for cmd, (step, target) in TARGETS_S.items():
        median_of = out[cmd]["new"]["median"]
        figure, free = median_of.get(step), median_of.get(f"{step} without CPU waits")
        found[cmd] = {"step": step, "figure_s": figure, "target_s": target,
                      "met": figure is not None and figure <= target,
                      "without_cpu_waits_s": free,
                      "met_without_cpu_waits": free is not None and free <= target}
    return found


def _ratios(out: dict) -> dict:
    """new ÷ baseline of the figures both checkouts have."""
    ratios = {}
    for cmd, by_tree in out.items():
        if "baseline" not in by_tree:
            continue
        new, old = by_tree["new"]["median"], by_tree["baseline"]["median"]
        ratios[cmd] = {n: ratio(new[n], old[n]) for n in new if n in old}
    return ratios
