"""Tailer throughput: binlog rows -> Kafka-acknowledged change events per second.

One data set is written once: N row changes (insert/update/delete mix) in multi-row
transactions of a 5-column table, bracketed by @@gtid_binlog_pos. Each run then reads
the same binlog range twice, alternating which goes first:

* baseline: raw python-mysql-replication, BinLogStreamReader iterating the rows
  (touching every value) until it has seen N rows -> rows/s decoded. It runs with
  blocking=True (plus a heartbeat so a shortfall times out): with blocking=False this
  MariaDB resets the dump connection part-way and python-mysql-replication silently
  reconnects from the original auto_position, re-reading rows (see BASELINE_NOTE);
* contender: cachesync's Tailer (build_tailer) with the default settings (packs of up to
  ``tailer.pack_rows``, PACK_ROWS, rows),
  checkpoint set to the start GTID, publishing to a fresh topic, until Kafka acknowledged
  all N rows -> rows/s acked; then the topic is read back and must hold exactly the N
  row ids, once each;
* the same Tailer with ``pack_rows: 1`` (one record per row), reported beside it;
* the same Tailer with the default settings but every row written by the Python path
  (the compiled row writer and the compiled run, producer_outbox/encode/hotpath.py, switched off),
  beside it;
* what users run: the ``cachesync tail --from-gtid`` process with the default settings
  (its metrics server on a free port), on a topic whose records carry the broker's append
  time; rows/s is N over first to last append (and over launch to last append), and CPU
  seconds are the process's and its children's (the child publisher's too). Its first
  append comes after its first pack left, so on a small range (--quick) the append window
  misses the reading of the first packs and flatters it: quote it from the full sizes;
* the peers (bench/peers): Debezium embedded, Canal's parser (Java programs) and go-mysql
  (a Go program), reading the same range with their CPU seconds, on the shapes S (single-row transactions) and M (20-80-row
  transactions) of the 5-column table. ``peers`` compares every reader first row to last.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import resource
import time

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import HeartbeatLogEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from bench import peers
from bench.common import Sandbox, Worker, log, ratio, summarize, topic_events
from cachesync.runtime.config import TailerSettings
from cachesync.wiring import build_tailer, mysql_params
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.producer_outbox.binlog.preflight import read_server_info

NAME = "tailer"
SIZES = {"full": 200_000, "quick": 10_000}
# BENCH_TAILER_ROWS=50000: rows per shape (S and M) instead of the size's, for a run between
# --quick (whose short range flatters the process) and the full size (an hour on a busy host)
ROWS = int(os.environ.get("BENCH_TAILER_ROWS", "0") or 0)
WIDE_SIZES = {"full": 50_000, "quick": 5_000}     # the 30-column table (reported too)
TXN_ROWS = (20, 80)              # row changes per transaction, uniform (shape M)
SINGLE_ROW = (1, 1)              # shape S: one row change per transaction
MIX = {"insert": 0.5, "update": 0.3, "delete": 0.2}
WIDE_EXTRA = 25                  # 5 + 25 = 30 columns
DDL = ("CREATE TABLE t (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NOT NULL, "
       "c DOUBLE NOT NULL, d DATETIME(6) NOT NULL)")
WIDE_DDL = ("CREATE TABLE w (id BIGINT PRIMARY KEY, a INT NOT NULL, b VARCHAR(64) NOT NULL, "
            "c DOUBLE NOT NULL, d DATETIME(6) NOT NULL, "
            + ", ".join(f"{kind}{i} {sql}" for i in range(WIDE_EXTRA // 5)
                        for kind, sql in (("i", "INT NOT NULL"), ("s", "VARCHAR(48) NOT NULL"),
                                          ("f", "DOUBLE NOT NULL"), ("n", "BIGINT NULL"),
                                          ("t", "DATETIME(6) NOT NULL")))
            + ")")
PARTITIONS = 3
PACK_ROWS = TailerSettings().pack_rows    # the contender runs the default settings
BASELINE_NOTE = ("blocking=True instead of blocking=False: in non-blocking mode MariaDB "
                 "10.11 resets the binlog dump connection after ~1,600 rows and "
                 "python-mysql-replication 1.0.17 reconnects from the original auto_position "
                 "(it never advances it), so rows are read again; the run stops at N rows, "
                 "so blocking mode reads exactly the same events")


def run(stack, quick: bool, runs: int) -> dict:
    size = "quick" if quick else "full"
    box = Sandbox(stack, NAME)
    try:
        box.create_schema(DDL, DDL.replace("CREATE TABLE t ", "CREATE TABLE s "), WIDE_DDL)
        readers, peers_missing = peers.prepare()
        out = {
            "description": "binlog -> Kafka-acked rows/s of the cachesync Tailer vs raw "
                           "python-mysql-replication decoding the same binlog range",
            "params": {"txn_rows": list(TXN_ROWS), "mix": MIX, "partitions": PARTITIONS,
                       "runs": runs},
        }
        # the 5-column table is the target figure (shape M here, S in "single_row"); the
        # 30-column one is reported beside it
        rows = ROWS or SIZES[size]
        out["params"]["rows"] = rows
        out.update(_table_figures(box, "t", DDL, rows, runs, peer_names=readers))
        out["single_row"] = _table_figures(box, "s", DDL, rows, runs, SINGLE_ROW, readers)
        out["wide"] = _table_figures(box, "w", WIDE_DDL, WIDE_SIZES[size], runs)
        out["peers"] = peers.compare({"S": out["single_row"], "M": out}, peers_missing)
        return out
    finally:
        box.cleanup()


def _table_figures(box: Sandbox, table: str, ddl: str, n: int, runs: int,
                   txn_rows: tuple[int, int] = TXN_ROWS, peer_names: tuple[str, ...] = ()) -> dict:
    log(f"tailer: writing {n} row changes to {box.db}.{table}")
    data = write_changes(box, table, n, txn_rows=txn_rows)
    log(f"tailer: wrote {data['transactions']} transactions in {data['write_s']:.1f}s; "
        f"binlog {data['start_gtid']} -> {data['end_gtid']}")
    sides = {"baseline": [], "packed": [], "unpacked": [], "python_rows": [], "process": [],
             **{p: [] for p in peer_names}}
    for i in range(runs):
        # alternate the order so neither side always runs on a warmer machine
        order = list(sides)
        for what in (order if i % 2 == 0 else order[::-1]):
            if what == "baseline":
                result = baseline_run(box, table, data, n)
            elif what in peer_names:
                result = peers.read_range(what, box.stack.env, database=box.db, table=table,
                                          data=data, rows=n, server_id=box.new_server_id())
            elif what == "process":
                result = process_run(box, table, data, n)
            elif what == "python_rows":
                result = python_rows_run(box, table, data, n)
            else:
                result = tailer_run(box, table, data, n, None if what == "packed" else 1)
            sides[what].append(result)
            log(f"tailer[{table}]: run {i + 1}/{runs} {result['what']}: "
                f"{result['rows_per_s']:.0f} rows/s")
    fields = ["rows_per_s", "elapsed_s", "published_rows_per_s", "startup_s", "records"]
    baseline = summarize(sides["baseline"], ["rows_per_s", "elapsed_s", "startup_s"])
    contender = summarize(sides["packed"], fields)
    unpacked = summarize(sides["unpacked"], fields)
    python_rows = summarize(sides["python_rows"], fields)
    process = summarize(sides["process"], ["rows_per_s", "rows_per_s_from_launch", "startup_s",
                                           "cpu_s", "cpu_s_per_100k_rows"])
    return {
        "table": {"name": table, "ddl": ddl, "columns": 5 + WIDE_EXTRA if table == "w" else 5,
                  "rows": n, "txn_rows": list(txn_rows)},
        "data": data,
        "baseline": {"name": "BinLogStreamReader(is_mariadb, auto_position, blocking=True, "
                             "only_events=rows, only_schemas) rows decoded/s",
                     "note": BASELINE_NOTE, **baseline},
        "contender": {"name": f"Tailer.run, default settings (pack_rows {PACK_ROWS}) -> N rows "
                              "acked by Kafka, rows/s", **contender},
        "ratio_contender_to_baseline": ratio(contender["median"]["rows_per_s"],
                                             baseline["median"]["rows_per_s"]),
        "unpacked": {"name": "the same with pack_rows 1 (one record per row)", **unpacked,
                     "ratio_to_baseline": ratio(unpacked["median"]["rows_per_s"],
                                                baseline["median"]["rows_per_s"])},
        "python_rows": {"name": "the same, default settings, every row written by the Python "
                                "path (compiled row writer off)", **python_rows,
                        "ratio_contender_to_it": ratio(contender["median"]["rows_per_s"],
                                                       python_rows["median"]["rows_per_s"])},
        "process": {"name": "cachesync tail --from-gtid as a process, default settings -> N "
                            "rows appended by the broker (LogAppendTime), rows/s first to "
                            "last append", **process,
                    # first row to last on every side (as peers.compare): the in-process
                    # sides' rows_per_s above include their start
                    **_first_to_last_ratios(process, contender, baseline)},
        **{peer: summarize(sides[peer], ["rows_per_s", "seconds", "setup_s", "cpu_s",
                                         "cpu_s_per_100k_rows"])
           for peer in peer_names},
    }


def _first_to_last_ratios(process: dict, contender: dict, baseline: dict) -> dict:
    rate = peers.first_to_last_median(process)
    return {"ratio_to_contender": ratio(rate, peers.first_to_last_median(contender)),
            "ratio_to_baseline": ratio(rate, peers.first_to_last_median(baseline))}


# -- the data set -------------------------------------------------------------------------
def write_changes(box: Sandbox, table: str, n: int, seed: int = 42,
                  txn_rows: tuple[int, int] = TXN_ROWS) -> dict:
    rng = random.Random(seed)
    live: list[int] = []
    next_id, counts, txns = 1, dict.fromkeys(MIX, 0), 0
    epoch = dt.datetime(2024, 1, 1)
    conn = box.stack.admin(box.db, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            start_gtid = cur.fetchone()[0]
            cur.execute("SHOW MASTER STATUS")
            start_file, start_pos = cur.fetchone()[:2]
            t0 = time.perf_counter()
            remaining = n
            while remaining:
                size = min(remaining, rng.randint(*txn_rows))
                ins, ups, dels = _split(rng, size, len(live), txn_rows == SINGLE_ROW)
                picked = rng.sample(range(len(live)), ups + dels)
                up_ids = [live[i] for i in picked[:ups]]
                del_idx = sorted(picked[ups:], reverse=True)
                del_ids = [live[i] for i in del_idx]
                for i in del_idx:               # swap-remove the deleted ids
                    live[i] = live[-1]
                    live.pop()
                rows = []
                for _ in range(ins):
                    rows.append(_row(table, rng, next_id, epoch))
                    live.append(next_id)
                    next_id += 1
                if rows:
                    marks = ", ".join(["%s"] * len(rows[0]))
                    cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
                if up_ids:
                    marks = ",".join(["%s"] * len(up_ids))
                    cur.execute(f"UPDATE {table} SET a = a + 1, b = CONCAT('u', b), c = c * 1.5 "
                                f"WHERE id IN ({marks})", up_ids)
                    assert cur.rowcount == len(up_ids), cur.rowcount
                if del_ids:
                    marks = ",".join(["%s"] * len(del_ids))
                    cur.execute(f"DELETE FROM {table} WHERE id IN ({marks})", del_ids)
                    assert cur.rowcount == len(del_ids), cur.rowcount
                conn.commit()
                counts["insert"] += ins
                counts["update"] += len(up_ids)
                counts["delete"] += len(del_ids)
                txns += 1
                remaining -= size
            write_s = time.perf_counter() - t0
            cur.execute("SELECT @@gtid_binlog_pos")
            end_gtid = cur.fetchone()[0]
            cur.execute("SHOW MASTER STATUS")
            end_file, end_pos = cur.fetchone()[:2]
            identity = read_server_info(conn).identity
    finally:
        conn.close()
    span = int(end_pos) - int(start_pos) if end_file == start_file else None
    return {"start_gtid": start_gtid, "end_gtid": end_gtid,
            "start": f"{start_file}:{start_pos}", "end": f"{end_file}:{end_pos}",
            "binlog_bytes": span, "transactions": txns, "ops": counts,
            "write_s": round(write_s, 3), "server": identity}


def _split(rng: random.Random, size: int, live: int, single_row: bool) -> tuple[int, int, int]:
    """(inserts, updates, deletes) of one transaction of ``size`` rows, ``live`` rows existing.

    A multi-row transaction takes the MIX shares; in shape S each transaction draws its one
    operation with the MIX weights (an insert while no row exists), so S has M's mix.
    """
    if single_row:
        op = rng.choices(list(MIX), weights=list(MIX.values()))[0] if live else "insert"
        return int(op == "insert"), int(op == "update"), int(op == "delete")
    ups = min(int(size * MIX["update"]), live)
    dels = min(int(size * MIX["delete"]), live - ups)
    return size - ups - dels, ups, dels


def _row(table: str, rng: random.Random, row_id: int, epoch: dt.datetime) -> tuple:
    base = (row_id, rng.randint(0, 10**6), f"name-{row_id}-{rng.random():.6f}",
            rng.random() * 1000, epoch + dt.timedelta(seconds=row_id))
    if table != "w":
        return base
    extra = []
    for i in range(WIDE_EXTRA // 5):
        extra += [rng.randint(0, 10**6), f"s{i}-{row_id}-{rng.random():.4f}", rng.random(),
                  None if rng.random() < 0.3 else rng.randint(0, 10**12),
                  epoch + dt.timedelta(seconds=row_id + i)]
    return base + tuple(extra)


# -- baseline -----------------------------------------------------------------------------
def baseline_run(box: Sandbox, table: str, data: dict, n: int) -> dict:
    m = box.stack.env
    with open(m["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        password = f.read().strip()
    t0, cpu0 = time.perf_counter(), time.process_time()
    stream = BinLogStreamReader(
        connection_settings={"host": m["CACHESYNC_MYSQL_HOST"], "port": int(m["CACHESYNC_MYSQL_PORT"]),
                             "user": m["CACHESYNC_MYSQL_USER"], "passwd": password},
        server_id=box.new_server_id(), is_mariadb=True, auto_position=data["start_gtid"],
        blocking=True, slave_heartbeat=1.0,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, HeartbeatLogEvent],
        only_schemas=[box.db], only_tables=[table])
    seen = touched = 0
    t_first = None
    try:
        for event in stream:
            if isinstance(event, HeartbeatLogEvent):   # idle: the binlog ran out before N rows
                break
            t_first = t_first or time.perf_counter()
            for row in event.rows:
                if "after_values" in row:
                    touched += _touch(row["before_values"]) + _touch(row["after_values"])
                else:
                    touched += _touch(row["values"])
                seen += 1
            if seen >= n:
                break
    finally:
        stream.close()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if seen != n:
        raise RuntimeError(f"baseline read {seen} rows from the binlog, expected {n}")
    return {"what": "baseline", "rows": seen, "values_touched": touched,
            "elapsed_s": round(elapsed, 4), "rows_per_s": round(n / elapsed, 1),
            "startup_s": round(t_first - t0, 4),
            **_cpu_figures(n, cpu)}


def _cpu_figures(n: int, cpu: float) -> dict:
    """CPU seconds of this process (every thread) and rows per CPU second: on a loaded
    host, wall-clock rates measure the other processes as much as the reader."""
    return {"cpu_s": round(cpu, 3), "rows_per_cpu_s": round(n / cpu, 1) if cpu else None}


def _touch(values: dict) -> int:
    count = 0
    for v in values.values():
        if v is not None:
            count += 1
    return count


# -- contender ----------------------------------------------------------------------------
def tailer_run(box: Sandbox, table_name: str, data: dict, n: int, pack_rows: int | None,
               tailer: dict | None = None) -> dict:
    """``pack_rows`` None: the default (or ``tailer``'s settings)."""
    topic = box.new_topic(PARTITIONS)
    table = f"{box.db}.{table_name}"
    settings_section = dict(tailer or {})
    if pack_rows is not None:
        settings_section["pack_rows"] = pack_rows
    cfg = box.write_config({table: {"keys": [box.prefix + table_name + ":{id}",
                                             box.prefix + table_name + ":b:{b}"]}},
                           topic=topic, tailer=settings_section)
    settings = box.settings(cfg)
    MySQLCheckpointStore(mysql_params(settings).connect, settings.tailer.name).save(
        Checkpoint(data["server"], gtid=data["start_gtid"]))
    tailer = build_tailer(settings)
    worker = Worker(tailer.run, "tailer")
    t_published = t_first = None
    try:
        t0, cpu0 = time.perf_counter(), time.process_time()
        worker.start()
        deadline = time.monotonic() + 300
        while True:
            worker.check()
            if not worker.is_alive():
                raise RuntimeError("the tailer stopped before publishing every row")
            published = tailer.published
            if t_first is None and published:
                t_first = time.perf_counter()
            if published >= n:
                t_published = t_published or time.perf_counter()
                if tailer.acked >= n:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"tailer published {published}/{n} in 300s")
            time.sleep(0.01)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        tailer.stop()       # its run closes the publisher it made and its checkpoint store
        worker.join(30)
    worker.check()
    # exactly the N rows, once each, and nothing beyond (a wrong start would show here)
    records, events, ids = topic_events(box.stack.bootstrap, topic)
    if (events, len(ids)) != (n, n):
        raise RuntimeError(f"topic {topic} holds {events} events ({len(ids)} distinct ids) "
                           f"in {records} records, expected {n}")
    what = (f"tailer pack_rows={pack_rows}" if pack_rows is not None
            else f"tailer {settings_section or 'default'}")
    return {"what": what, "rows": n, "records": records,
            "elapsed_s": round(elapsed, 4), "rows_per_s": round(n / elapsed, 1),
            "published_rows_per_s": round(n / (t_published - t0), 1),
            "startup_s": round(t_first - t0, 4), **_cpu_figures(n, cpu),
            "checkpoint": tailer.committed.describe() if tailer.committed else None}



def python_rows_run(box: Sandbox, table_name: str, data: dict, n: int) -> dict:
    """``tailer_run`` with the default settings and the compiled row writer switched off
    (and with it the compiled run of whole transactions, which writes rows the same way)."""
    compiled, hotpath.record = hotpath.record, None
    run, hotpath._plain_run = hotpath._plain_run, None
    try:
        result = tailer_run(box, table_name, data, n, None)
    finally:
        hotpath.record, hotpath._plain_run = compiled, run
    return {**result, "what": "tailer default, Python row path"}


# -- the process users run ----------------------------------------------------------------
def process_run(box: Sandbox, table_name: str, data: dict, n: int) -> dict:
    """``cachesync tail --from-gtid <start>`` with default settings until its checkpoint
    passed the data set; the rate comes from the broker's append times of the N rows."""
    topic = box.new_topic(PARTITIONS)
    _append_time(box, topic)
    cfg = box.write_config({f"{box.db}.{table_name}": {
        "keys": [box.prefix + table_name + ":{id}", box.prefix + table_name + ":b:{b}"]}},
        topic=topic, metrics={"listen": "127.0.0.1:0"})    # a free port on a shared host
    store = MySQLCheckpointStore(mysql_params(box.settings(cfg)).connect,
                                 box.settings(cfg).tailer.name)
    cpu0 = _children_cpu()
    launched = time.time()
    proc = box.spawn("tail", cfg, args=("--from-gtid", data["start_gtid"]))
    try:
        deadline = time.monotonic() + 300
        while not _passed(store.load(), data["end_gtid"]):
            if proc.poll() is not None:
                raise RuntimeError(f"cachesync tail exited {proc.returncode}:\n"
                                   f"{box.proc_log(proc)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"cachesync tail did not pass {data['end_gtid']} in 300s")
            time.sleep(0.2)
    finally:
        box.stop_proc(proc)
        store.close()
    cpu = _children_cpu() - cpu0
    appended, ids = [], set()

    def row_event(record, event) -> None:
        if event.db == box.db and event.table == table_name:   # not the heartbeat's
            appended.append(record.timestamp / 1000)
            ids.add(event.id)
    topic_events(box.stack.bootstrap, topic, on_event=row_event)
    if (len(appended), len(ids)) != (n, n):
        raise RuntimeError(f"topic {topic} holds {len(appended)} row events ({len(ids)} "
                           f"distinct ids), expected {n}")
    first, last = min(appended), max(appended)
    return {"what": "cachesync tail process", "rows": n,
            "seconds": round(last - first, 4),      # first row to last, as the peers report
            "rows_per_s": round(n / (last - first), 1) if last > first else None,
            "rows_per_s_from_launch": round(n / (last - launched), 1),
            "startup_s": round(first - launched, 4), "cpu_s": round(cpu, 3),
            "cpu_s_per_100k_rows": round(cpu * 100_000 / n, 3)}


def _append_time(box: Sandbox, topic: str) -> None:
    """Records of ``topic`` get the broker's clock (LogAppendTime), not the producer's."""
    admin = KafkaAdminClient(bootstrap_servers=box.stack.bootstrap, request_timeout_ms=30000)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()


def _passed(checkpoint: Checkpoint | None, end_gtid: str) -> bool:
    """Whether a MariaDB GTID state ``checkpoint`` holds is at or past ``end_gtid`` in
    every domain of it."""
    if checkpoint is None or not checkpoint.gtid:
        return False
    held = _seqs(checkpoint.gtid)
    return all(held.get(domain, -1) >= seq for domain, seq in _seqs(end_gtid).items())


def _seqs(gtid_state: str) -> dict[str, int]:
    parts = [g.strip().split("-") for g in gtid_state.split(",") if g.strip()]
    return {domain: int(seq) for domain, _, seq in parts}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
