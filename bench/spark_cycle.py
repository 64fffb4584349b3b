"""Where a Spark consume micro-batch's cycle goes, at a steady produce rate (a development probe,
not one of the JSON benchmarks).

    python -m bench.spark_cycle RATE SECONDS [spark.conf=value ...] [trigger=0.5]

On the devstack's standalone cluster (one executor core), a child process produces RATE
events/s for SECONDS straight to a fresh topic (no tailer); the Spark engine consumes them
with the given trigger. Prints per micro-batch Spark's ``durationMs`` phases, the job's wall
time and the task's phases (``t_*``, applier.TaskClock), then their medians; the lag from each
event's commit time (set when produced) to its chunk being applied; and the CPU per
micro-batch of the driver's Python, the driver's JVM and the executor's JVM, with the JVMs'
threads by name (the JIT compiler threads among them). The host is usually shared: compare
CPU figures and phases of runs made one after the other, not wall times across sittings.
"""
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from kafka import KafkaProducer

from bench.common import Sandbox, Stack, stat_cpu_s
from bench.spark_cluster import _cluster, _warm_executor
from cachesync.commands.consume_spark import build_spark_engine
from cachesync.consumer.spark.session import spark_session
from cachesync.producer_outbox.decode.rows import TxnContext, row_change
from cachesync.schema.event import encode
from cachesync.schema.keys import kafka_key

rate, seconds = float(sys.argv[1]), float(sys.argv[2])
extra = dict(a.split("=", 1) for a in sys.argv[3:])
trigger = float(extra.pop("trigger", "0.5"))
env = _cluster()
stack = Stack()
box = Sandbox(stack, "probe")
topic = box.new_topic(3)
tables = {f"{box.db}.items": {"keys": [box.prefix + "item:{id}"]}}
conf = {"spark.executor.memory": "512m", "spark.cores.max": "1", **extra}
reports, lags = [], []
try:
    with spark_session("probe", env["DEVSTACK_SPARK_MASTER_URL"], conf=conf) as spark:
        _warm_executor(spark)
        cfg = box.write_config(tables, topic=topic, group=box.new_group(),
                               consumer={"dedup_store": "mysql"})

        def on_batch(report):
            reports.append(report)
            lags.extend(s.applied_at - s.committed for b in report.lag for s in b.samples())
        engine = build_spark_engine(box.settings(cfg), spark, str(Path(box.tmp) / "ck"), 20000,
                                    on_batch=on_batch, trigger=trigger)
        engine.start()
        runner = threading.Thread(target=engine.run, daemon=True)
        runner.start()
        producer = KafkaProducer(bootstrap_servers=stack.bootstrap, acks="all", linger_ms=0)
        # warm: a few events until one batch applied
        n = 0
        t_end = time.time() + 60
        while not reports and time.time() < t_end:
            ctx = TxnContext("p", f"0-1-{n}", n, time.time())
            ev = row_change(ctx, 0, box.db, "items", "update", "id", {"id": n}, {"id": n})
            producer.send(topic, key=kafka_key(box.db, "items", ev.pk).encode(), value=encode(ev),
                          headers=[("id", ev.id.encode())])
            producer.flush()
            n += 1
            time.sleep(0.5)
        time.sleep(3)
        warm = len(reports)
        lags.clear()
        from bench.spark_cluster import _executor_cpu
        import os
        def proc_cpu(pid):
            return stat_cpu_s(f"/proc/{pid}/stat")
        def driver_jvm():
            for p in os.listdir("/proc"):
                if p.isdigit():
                    try:
                        st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(st[1]) == os.getpid():
                        return int(p)
        djvm = driver_jvm()
        import collections, re
        from pathlib import Path as _P
        def threads(pid):
            out = collections.Counter()
            for t in _P(f"/proc/{pid}/task").iterdir():
                try:
                    cpu, name = stat_cpu_s(t / "stat"), (t / "comm").read_text().strip()
                except OSError:
                    continue
                out[re.sub(r"[\d#-]+$", "", name)] += cpu
            return out
        th0 = threads(djvm)
        from bench.spark_cluster import _executor_pid
        eth0 = threads(_executor_pid())
        cpu0 = (time.process_time(), proc_cpu(djvm), _executor_cpu()[1], len(reports))
        def produce():           # in a child process: its CPU is not the driver's
            producer2 = KafkaProducer(bootstrap_servers=stack.bootstrap, acks="all", linger_ms=0)
            start = time.perf_counter()
            sent = 0
            while (now := time.perf_counter() - start) < seconds:
                due = int(now * rate)
                while sent < due:
                    ctx = TxnContext("p", f"0-2-{sent}", sent + 10**6, time.time())
                    ev = row_change(ctx, 0, box.db, "items", "update", "id", {"id": sent}, {"id": sent})
                    producer2.send(topic, key=kafka_key(box.db, "items", ev.pk).encode(),
                                   value=encode(ev), headers=[("id", ev.id.encode())])
                    sent += 1
                producer2.flush()
                time.sleep(0.005)
            producer2.close()
        import multiprocessing
        proc = multiprocessing.get_context("fork").Process(target=produce)
        proc.start()
        proc.join()
        sent = int(seconds * rate)
        time.sleep(4)
        cpu1 = (time.process_time(), proc_cpu(djvm), _executor_cpu()[1], len(reports))
        nb = cpu1[3] - cpu0[3]
        th1 = threads(djvm)
        eth1 = threads(_executor_pid())
        print("DRIVER JVM threads ms/batch", json.dumps({k: round(1000 * (th1[k] - th0[k]) / nb) for k in sorted(th1, key=lambda k: th0[k] - th1[k]) if th1[k] - th0[k] > 0.005}))
        print("EXECUTOR JVM threads ms/batch", json.dumps({k: round(1000 * (eth1[k] - eth0[k]) / nb) for k in sorted(eth1, key=lambda k: eth0[k] - eth1[k]) if eth1[k] - eth0[k] > 0.005}))
        print("CPU per batch ms: driver_py %.0f driver_jvm %.0f executor_jvm %.0f (batches %d)" % tuple(
            [1000 * (cpu1[i] - cpu0[i]) / nb for i in range(3)] + [nb]))
        engine.stop()
        runner.join(60)
        progress = {p["batchId"]: p for p in engine.progress()}
        rows = []
        for r in reports[warm:]:
            p = progress.get(r.batch_id)
            if p is None:
                continue
            d = dict(p["durationMs"])
            d["job"] = round(r.wall_s * 1000)
            d.update({f"t_{k}": round(v * 1000) for k, v in r.timings.items()})
            d["n"] = r.stats.consumed
            rows.append(d)
        for d in rows:
            print(json.dumps(d))
        keys = sorted({k for d in rows for k in d})
        med = {k: statistics.median([d.get(k, 0) for d in rows]) for k in keys}
        print("MEDIAN", json.dumps(med))
        lags.sort()
        if lags:
            print("LAG p50 %.0f ms p99 %.0f ms n=%d sent=%d" % (
                1000 * lags[len(lags) // 2], 1000 * lags[int(len(lags) * 0.99)], len(lags), sent))
        steady = sorted(s.applied_at - s.committed for r in reports[warm:][-len(rows):]
                        for b in r.lag for s in b.samples())
        if steady:      # the batches printed above (Spark keeps the last 100 progress reports)
            print("LAG of those batches p50 %.0f ms p99 %.0f ms n=%d" % (
                1000 * steady[len(steady) // 2], 1000 * steady[int(len(steady) * 0.99)],
                len(steady)))
        print("accelerator", engine.accelerator, "transfer", engine.transfer)
finally:
    box.cleanup()
