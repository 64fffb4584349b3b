"""CPU per commit at the head of the binlog: cachesync beside the database it watches.

At the head of the binlog every commit arrives alone, so what the sidecar costs is its cost
per arrival. Writer processes (``bench.lag``'s ``Harness.measure_commits``: single-row
autocommit INSERTs, open loop, at nice WRITER_NICE) commit at fixed rates while cachesync
runs as deployed, in one of the CONFIGS:

* ``tail+consume``: ``cachesync tail`` and ``cachesync consume``, two processes;
* ``run``: both in one process (``cachesync run``);
* ``run --direct``: no Kafka (``cachesync run --direct``).

For each rate (0 = idle: no writes at all) it reads, from /proc, the CPU (user + system) of
each cachesync process tree (the tailer's publisher child included), of mariadbd, of the
Kafka broker and of Redis, over the time from the writers' first commit due to the last key
gone, and the writers' own CPU (their rusage once reaped); divided by the commits made:
CPU per commit. Beside it: the commit -> key gone latency, the load average, mariadbd's
durability settings, and the requests the broker served per commit (produce, fetch, offset
commit), read from its own request metrics over JMX (the devstack's broker gets a JMX agent
on a free loopback port through ``jcmd``, read with Kafka's ``JmxTool``). Idle rows give the
share of a core each process used instead. Each run also breaks each cachesync process's CPU
down per thread (``bench.threads``: Python thread names when py-spy is installed):
``threads_core_pct`` idle, ``threads_us`` (µs per commit) at a rate; and counts each
thread's wake-ups (the times the kernel put it on a CPU, from ``schedstat``), per commit
(``<process>_wakes``, ``threads_wakes``) and idle per second (``<process>_wakes_per_s``,
``threads_wakes_per_s``): what an arrival costs is mostly how many threads it wakes.

``BENCH_HEAD_COST_RATES=0,100`` and ``BENCH_HEAD_COST_CONFIGS=run`` narrow a run,
``BENCH_HEAD_COST_PARTITIONS`` sets the topic's partitions (3); a
configuration ``<shape>@<client>`` sets ``kafka.client`` (``tail+consume@kafka-python``: every
Kafka client on kafka-python, ``tail+consume@librdkafka``: the consumer on librdkafka too),
and ``{section.key=value,...}`` after it other settings (``tail+consume{tailer.publisher=thread}``);
``BENCH_BASELINE_TREE`` (another checkout with its own .venv, ``bench.common.baseline_tree``)
measures each configuration of that checkout too, just before this one's.
``BENCH_HEAD_COST_PROFILE=<dir>`` samples each cachesync process (its children included)
with ``py-spy record`` during every run at a rate, without pausing it (``--nonblocking``),
into ``<dir>/<config>-<rate>-<process>-<run>.txt`` (py-spy's raw format: a line per stack
and its sample count, idle stacks left out): where the CPU per commit goes.
"""

from __future__ import annotations

import contextlib
import csv
import os
import resource
import subprocess
import time
from pathlib import Path

from bench.common import (Sandbox, baseline_tree, busy_share, free_port, host_cpu, log, stat_cpu_s,
                          summarize, tree_commit, wait_for)
from bench.lag import DDL, KEYS_PER_ROW, WRITER_NICE, Harness, _alive, _checkpoint_stored
from bench.threads import ThreadClock, median_threads, py_spy, scaled

NAME = "head_cost"
# seconds of writing per run and rate, seconds of idle measurement
SIZES = {"full": (30.0, 30.0), "quick": (5.0, 5.0)}
RATES = tuple(float(r) for r in os.environ.get("BENCH_HEAD_COST_RATES", "0,100,1000,3000").split(","))


def configs(text: str) -> tuple[str, ...]:
    """The configurations of ``BENCH_HEAD_COST_CONFIGS``: separated by commas outside braces
    (a configuration's settings are separated by commas too)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    return tuple(c for c in out if c)


CONFIGS = configs(os.environ.get("BENCH_HEAD_COST_CONFIGS", "tail+consume,run,run --direct"))
# the topic's partitions: a read's transactions go out as one produce request per partition
# they touch (librdkafka's), and reach the consumer as as many fetch responses
PARTITIONS = int(os.environ.get("BENCH_HEAD_COST_PARTITIONS", "3"))
SETTLE_S = 5.0              # after warm-up, before an idle measurement
# Before a configuration's first figure, writes at WARM_UP_RATE for this long that are not
# measured (BENCH_HEAD_COST_WARM_UP_S): the broker's JVM, just started with the devstack, spent
# its first minute compiling, and the configuration measured first paid for it (5,843 broker
# µs per commit at 100/s against 3,680 for the one after it, and a pipeline that fell behind
# at 1,000/s, in bench/results/full-head_cost-20261130T013233Z.json)
WARM_UP_S = {"full": float(os.environ.get("BENCH_HEAD_COST_WARM_UP_S", "20")), "quick": 0.0}
WARM_UP_RATE = 1000.0
PROFILE_DIR = os.environ.get("BENCH_HEAD_COST_PROFILE")
PROFILE_RATE_HZ = 200         # py-spy samples per second and process
REQUESTS = ("Produce", "Fetch", "OffsetCommit")
PROCESSES = ("mariadbd", "kafka", "redis")
SIDECARS = ("tail", "consume", "run", "run --direct")
FIELDS = ["achieved_rate", "commits", "p50_ms", "p99_ms", "load_1m", "host_busy", "sidecar_us",
          *(f"{n}_us" for n in SIDECARS), "sidecar_wakes", *(f"{n}_wakes" for n in SIDECARS),
          "mariadbd_us",
          "sidecar_x_mariadbd", "kafka_us", "kafka_x_mariadbd", "redis_us", "writers_us",
          *(f"{r.lower()}_per_commit" for r in REQUESTS)]
IDLE_FIELDS = ["load_1m", "host_busy", "sidecar_core_pct",
               *(f"{n}_core_pct" for n in (*SIDECARS, *PROCESSES)),
               *(f"{n}_wakes_per_s" for n in SIDECARS),
               *(f"{r.lower()}_per_s" for r in REQUESTS)]


def run(stack, quick: bool, runs: int) -> dict:
    seconds, idle_seconds = SIZES["quick" if quick else "full"]
    services = _service_pids(stack)
    broker = BrokerRequests(services["kafka"], Path(stack.env["DEVSTACK_DIR"]) / "kafka" / "libs")
    (sync_binlog, flush), = stack.admin_sql(
        "SELECT @@sync_binlog, @@innodb_flush_log_at_trx_commit")
    trees = {"": None}
    if baseline_tree() is not None:       # the same configurations of another checkout
        trees = {f" (baseline {tree_commit(baseline_tree())})": baseline_tree(), **trees}
    out = {}
    for config in CONFIGS:
        for label, tree in trees.items():
            out[config + label] = _measure_config(stack, config, services, broker, seconds,
                                                  idle_seconds, runs, tree,
                                                  WARM_UP_S["quick" if quick else "full"])
    return {"description": "CPU per commit of cachesync, mariadbd, the Kafka broker and Redis at "
                           "fixed single-row commit rates (0 = idle: share of a core)",
            "params": {"rates": list(RATES), "seconds": seconds, "idle_seconds": idle_seconds,
                       "warm_up": f"{WARM_UP_S['quick' if quick else 'full']:g} s of writes at "
                                  f"{WARM_UP_RATE:g}/s per configuration, not measured",
                       "runs": runs, "configs": list(CONFIGS), "keys_per_row": KEYS_PER_ROW,
                       "writer_nice": WRITER_NICE, "partitions": PARTITIONS,
                       "cpu": "user + system from /proc, process trees, over first commit due "
                              "-> last key gone; writers from their rusage",
                       "broker_requests": broker.how},
            "mariadb": {"sync_binlog": int(sync_binlog),
                        "innodb_flush_log_at_trx_commit": int(flush)},
            "configs": out, "table": table(out)}


def _measure_config(stack, config: str, services: dict, broker, seconds: float,
                    idle_seconds: float, runs: int, tree=None, warm_s: float = 0.0) -> dict:
    box = Sandbox(stack, "headcost")
    box.tree = tree
    try:
        box.create_schema(DDL)
        topic = box.new_topic(PARTITIONS)
        group = box.new_group()
        shape, client, overrides = _parse(config)
        cfg = box.write_config({f"{box.db}.lag": {"keys": [box.prefix + "lag:{id}",
                                                           box.prefix + "lag:note:{note}"]}},
                               topic=topic, group=group, consumer={"namespace": group},
                               kafka={"client": client} if client else None,
                               metrics={"listen": "127.0.0.1:0"})
        procs = _spawn(box, shape, cfg, overrides)
        alive = lambda: all(_alive(box, p) for p in procs.values())  # noqa: E731
        wait_for(lambda: alive() and _checkpoint_stored(stack, box.settings(cfg).tailer.name),
                 90, f"{config}: the tailer's start checkpoint")
        harness = ClockedHarness(box, notified=True)
        try:
            harness.warm_up(alive)
            if warm_s > 0:               # not measured: see WARM_UP_S
                harness.measure_commits(WARM_UP_RATE, warm_s, False)
            time.sleep(SETTLE_S)         # let the warm-up's batches and commits settle
            pids = {**{n: p.pid for n, p in procs.items()}, **services}
            rates = {}
            for rate in RATES:
                results = []
                for i in range(runs):
                    if rate == 0:
                        results.append(_idle(pids, procs, broker, idle_seconds))
                    else:
                        with _profiled(procs, f"{config}-{rate:g}", i + 1, seconds):
                            results.append(_busy(harness, pids, procs, broker, rate, seconds))
                    alive()
                    log(f"head_cost {config} {rate:g}/s run {i + 1}/{runs}: {_brief(results[-1])}")
                rates[f"{rate:g}"] = summarize(results, IDLE_FIELDS if rate == 0 else FIELDS)
                for key in (("threads_core_pct", "threads_wakes_per_s") if rate == 0
                            else ("threads_us", "threads_wakes")):
                    rates[f"{rate:g}"]["median"][key] = median_threads(
                        [r[key] for r in results if r.get(key)])
            return {"rates": rates, "processes": list(procs), "commit": tree_commit(tree)}
        finally:
            harness.close()
    finally:
        box.cleanup()


def _parse(config: str) -> tuple[str, str | None, dict[str, str]]:
    """A configuration's shape, ``kafka.client`` (None: the default, auto) and settings:
    ``tail+consume@librdkafka{tailer.publisher=thread}`` is ("tail+consume", "librdkafka",
    {"CACHESYNC_TAILER_PUBLISHER": "thread"}), the settings given to the processes as the
    environment overrides they read (``section.key=value``, comma-separated)."""
    config, _, settings = config.partition("{")
    shape, _, client = config.partition("@")
    env = {}
    for item in configs(settings.removesuffix("}")):   # commas outside braces
        name, eq, value = item.partition("=")
        if not eq or "." not in name:
            raise ValueError(f"{item!r} in {config!r}: expected section.key=value "
                             "(BENCH_HEAD_COST_CONFIGS)")
        env["CACHESYNC_" + name.strip().replace(".", "_").upper()] = value.strip()
    return shape, client or None, env


def _spawn(box: Sandbox, config: str, cfg, env: dict | None = None) -> dict:
    if config == "tail+consume":
        tail = box.spawn("tail", cfg, env)
        return {"tail": tail, "consume": box.spawn("consume", cfg, env)}
    if config == "run":
        return {"run": box.spawn("run", cfg, env)}
    if config == "run --direct":
        return {"run --direct": box.spawn("run", cfg, env, args=("--direct",))}
    raise ValueError(f"unknown configuration {config!r} (BENCH_HEAD_COST_CONFIGS)")


@contextlib.contextmanager
def _profiled(procs: dict, label: str, run: int, seconds: float):
    """py-spy recording each of ``procs`` for about ``seconds`` while the body runs, when
    BENCH_HEAD_COST_PROFILE names a directory (else nothing)."""
    spy = py_spy()
    if PROFILE_DIR is None or spy is None:
        yield
        return
    Path(PROFILE_DIR).mkdir(parents=True, exist_ok=True)
    spies = []
    for name, proc in procs.items():
        out = Path(PROFILE_DIR) / f"{label}-{name}-{run}.txt".replace(" ", "_")
        spies.append(subprocess.Popen(
            [spy, "record", "--pid", str(proc.pid), "--subprocesses", "--threads",
             "--nonblocking", "--rate", str(PROFILE_RATE_HZ), "--format", "raw",
             "--duration", str(int(seconds)), "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield
    finally:
        for s in spies:
            try:
                s.wait(30)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()


class ClockedHarness(Harness):
    """``Harness`` that runs ``on_start`` the moment every writer is connected (the writers'
    clock starts WRITERS_START_S later): the CPU readings bracket the writing, not the keys
    cached before it or the writers' connects."""

    on_start = None

    def _wait_connected(self, queue, writers: int) -> None:
        Harness._wait_connected(queue, writers)
        if self.on_start is not None:
            self.on_start()


def _busy(harness: ClockedHarness, pids: dict, procs: dict, broker, rate: float,
          seconds: float) -> dict:
    before, threads = {}, []

    def start():
        before.update(_readings(pids, broker, starting=True))
        threads.append(ThreadClock({n: pids[n] for n in procs}))
    harness.on_start = start
    result = harness.measure_commits(rate, seconds, False)
    after = _readings(pids, broker)
    per_thread, wakes = threads[0].read() if threads else ({}, {})
    commits = max(1, result["writes"])
    wakes_per_commit = {n: sum(wakes.get(n, {}).values()) / commits for n in procs}
    per_commit = {n: (after[n] - before[n]) / commits * 1e6 for n in after if n != "host"}
    sidecar = sum(per_commit[n] for n in procs)
    out = {"achieved_rate": result["achieved_rate"], "commits": result["writes"],
           "missing": result["missing"], "p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
           "load_1m": round(os.getloadavg()[0], 2),
           "host_busy": busy_share(before["host"], after["host"]),
           **{f"{n}_us": round(per_commit[n], 1) for n in procs},
           "sidecar_us": round(sidecar, 1),
           **{f"{n}_wakes": round(wakes_per_commit[n], 2) for n in procs},
           "sidecar_wakes": round(sum(wakes_per_commit.values()), 2),
           **{f"{n}_us": round(per_commit[n], 1) for n in PROCESSES},
           "writers_us": round(per_commit["writers"], 1),
           "sidecar_x_mariadbd": _ratio(sidecar, per_commit["mariadbd"]),
           "kafka_x_mariadbd": _ratio(per_commit["kafka"], per_commit["mariadbd"]),
           "threads_us": scaled(per_thread, 1e6 / commits, 1),
           "threads_wakes": scaled(wakes, 1 / commits, 2)}
    for r in REQUESTS:
        if r in after:
            out[f"{r.lower()}_per_commit"] = round((after[r] - before[r]) / commits, 3)
    return out


def _idle(pids: dict, procs: dict, broker, seconds: float) -> dict:
    before = _readings(pids, broker, starting=True)
    threads = ThreadClock({n: pids[n] for n in procs})
    t0 = time.monotonic()
    time.sleep(seconds)        # nothing to await: the figure is what happens while nothing does
    after = _readings(pids, broker)
    elapsed = time.monotonic() - t0
    per_thread, wakes = threads.read()
    pct = {n: round((after[n] - before[n]) / elapsed * 100, 2) for n in pids}
    out = {"seconds": round(elapsed, 1), "load_1m": round(os.getloadavg()[0], 2),
           "host_busy": busy_share(before["host"], after["host"]),
           **{f"{n}_core_pct": pct[n] for n in pids},
           "sidecar_core_pct": round(sum(pct[n] for n in procs), 2),
           **{f"{n}_wakes_per_s": round(sum(wakes.get(n, {}).values()) / elapsed, 1)
              for n in procs},
           "threads_core_pct": scaled(per_thread, 100 / elapsed),
           "threads_wakes_per_s": scaled(wakes, 1 / elapsed, 1)}
    for r in REQUESTS:
        if r in after:
            out[f"{r.lower()}_per_s"] = round((after[r] - before[r]) / elapsed, 2)
    return out


def _readings(pids: dict, broker, starting: bool = False) -> dict:
    """CPU seconds of each process tree, of the reaped children (the writers), and the
    broker's request counts. The JVM that reads those is a reaped child too: it is read
    before the children's rusage when ``starting``, after it otherwise."""
    out = broker.counts() if starting else {}
    out["host"] = host_cpu()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.update({n: tree_cpu_s(pid) for n, pid in pids.items()})
    out["writers"] = usage.ru_utime + usage.ru_stime
    return out if starting else {**out, **broker.counts()}


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid``'s threads and its live descendants."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += stat_cpu_s(f"/proc/{p}/stat")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass            # exited between two reads
    return total


def _service_pids(stack) -> dict:
    run_dir = Path(stack.env["DEVSTACK_DIR"]) / "run"
    return {name: int((run_dir / f"{file}.pid").read_text())
            for name, file in (("mariadbd", "mariadb"), ("kafka", "kafka"), ("redis", "redis"))}


class BrokerRequests:
    """The requests the broker served, per type: Kafka's
    ``kafka.network:type=RequestMetrics,name=RequestsPerSec`` counts (summed over request
    versions), over JMX. The devstack's broker starts without a JMX agent; ``jcmd`` starts
    one on a free loopback port (no restart), Kafka's ``JmxTool`` reads it (a JVM launch,
    outside the processes measured). Without a JDK's ``jcmd`` the counts are left out."""

    def __init__(self, pid: int, libs: Path):
        self._classpath = f"{libs}/*"
        self.url = self._agent(pid)
        self.how = ("the broker's RequestMetrics over JMX (jcmd ManagementAgent.start, "
                    "kafka JmxTool)" if self.url else "not read: no JMX agent could be started")

    @staticmethod
    def _agent(pid: int) -> str | None:
        try:
            status = subprocess.run(["jcmd", str(pid), "ManagementAgent.status"],
                                    capture_output=True, text=True, timeout=60).stdout
            port = next((line.split("=")[1].strip() for line in status.splitlines()
                         if "jmxremote.port =" in line), None)
            if port is None:
                port = str(free_port())
                subprocess.run(["jcmd", str(pid), "ManagementAgent.start",
                                f"jmxremote.port={port}", f"jmxremote.rmi.port={port}",
                                "jmxremote.host=127.0.0.1", "jmxremote.authenticate=false",
                                "jmxremote.ssl=false"], check=True, capture_output=True,
                               timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            log(f"head_cost: no JMX agent on the broker ({e}); request counts left out")
            return None
        return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"

    def counts(self) -> dict:
        if self.url is None:
            return {}
        text = subprocess.run(
            ["java", "-cp", self._classpath, "org.apache.kafka.tools.JmxTool",
             "--jmx-url", self.url, "--attributes", "Count", "--one-time", "true",
             "--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"],
            capture_output=True, text=True, timeout=120, check=True).stdout
        head, values = csv.reader([line for line in text.splitlines()
                                   if line.startswith(('"', "1"))][-2:])
        out = dict.fromkeys(REQUESTS, 0.0)
        for name, value in zip(head[1:], values[1:]):
            request = name.split("request=")[1].split(",")[0]
            if request in out:
                out[request] += float(value)
        return out


def _ratio(a: float, b: float):
    return round(a / b, 2) if b > 0 else None


def _brief(r: dict) -> str:
    if "sidecar_core_pct" in r:
        return f"idle: sidecar {r['sidecar_core_pct']} % of a core, load {r['load_1m']}"
    return (f"{r['achieved_rate']}/s: sidecar {r['sidecar_us']} us/commit = "
            f"{r['sidecar_x_mariadbd']}x mariadbd ({r['mariadbd_us']}), broker "
            f"{r['kafka_us']}, p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms, load {r['load_1m']}")


def table(configs: dict) -> list[str]:
    """The medians as markdown table lines, one row per configuration and rate."""
    lines = ["| configuration | commits/s | cachesync µs/commit (per process) | mariadbd µs/commit | ÷ mariadbd "
             "| cachesync wake-ups/commit (per process) "
             "| broker µs/commit | broker requests/commit (produce, fetch, offset commit) "
             "| redis µs/commit | writers µs/commit | p50 / p99 ms | load |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|"]
    for config, figures in configs.items():
        for rate, fig in figures["rates"].items():
            m = fig["median"]
            if rate == "0":
                parts = " + ".join(f"{n} {m.get(f'{n}_core_pct')}" for n in figures["processes"])
                wakes = " + ".join(f"{n} {_n(m.get(f'{n}_wakes_per_s'))}"
                                   for n in figures["processes"])
                lines.append(f"| {config} | idle | {m['sidecar_core_pct']} % of a core ({parts}) "
                             f"| {m['mariadbd_core_pct']} % | | {wakes} per s "
                             f"| {m['kafka_core_pct']} % | "
                             f"{_reqs(m, 'per_s')} per s | {m['redis_core_pct']} % | | | "
                             f"{m['load_1m']} |")
                continue
            parts = " + ".join(f"{n} {_n(m.get(f'{n}_us'))}" for n in figures["processes"])
            wakes = " + ".join(f"{n} {m.get(f'{n}_wakes')}" for n in figures["processes"])
            lines.append(
                f"| {config} | {_n(m['achieved_rate'])} | {_n(m['sidecar_us'])} ({parts}) | "
                f"{_n(m['mariadbd_us'])} | {m['sidecar_x_mariadbd']}× | "
                f"{m.get('sidecar_wakes')} ({wakes}) | {_n(m['kafka_us'])} | "
                f"{_reqs(m, 'per_commit')} | {_n(m['redis_us'])} | {_n(m['writers_us'])} | "
                f"{m['p50_ms']} / {m['p99_ms']} | {m['load_1m']} |")
    return lines


def _reqs(m: dict, unit: str) -> str:
    values = [m.get(f"{r.lower()}_{unit}") for r in REQUESTS]
    return "-" if None in values else ", ".join(f"{v:g}" for v in values)


def _n(x) -> str:
    return "-" if x is None else f"{x:,.0f}"

