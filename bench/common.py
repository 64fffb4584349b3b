"""Setup helpers shared by the benchmarks: the devstack, an isolated sandbox, statistics.

Everything a benchmark creates (schema, grant, topics, consumer groups, checkpoint and
dedup rows, Redis keys, child processes) is registered on its Sandbox and removed by
``Sandbox.cleanup()``, which ``__main__`` always calls.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from cachesync.runtime import config
from cachesync.runtime.env_file import read_env_file
from cachesync.schema.event import decode_record
from cachesync.schema.keys import (DEDUP_PREFIX, LEASE_PREFIX, TABLE_FENCE_PREFIX, TABLE_JOB_PREFIX,
                                    VERSION_PREFIX, dedup_retention_key)
from cachesync.devstack import DevStack, default_env_file, wait_for  # noqa: F401 (benchmarks import wait_for from here)

ROOT = Path(__file__).resolve().parents[1]

# consumer.overlap_batches for the consumer and lag benchmarks (config default: true);
# BENCH_OVERLAP_BATCHES=false compares
OVERLAP = os.environ.get("BENCH_OVERLAP_BATCHES", "true").lower() in ("1", "true", "yes")


def shared_file(*parts: str) -> Path:
    """A file of the shared data folder (``$CACHESYNC_SHARED``, by default the checkout's
    ``../shared``): data other projects recorded, read where it lies, never copied here.
    Raises FileNotFoundError naming the variable when it is absent."""
    path = Path(os.environ.get("CACHESYNC_SHARED") or ROOT.parent / "shared").joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: set CACHESYNC_SHARED to the shared data "
                                "folder (the one that holds realbinlog/ and recorded/)")
    return path


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def baseline_tree() -> Path | None:
    """BENCH_BASELINE_TREE: another checkout of cachesync with its own .venv (``git worktree
    add --detach /tmp/old <commit> && make -C /tmp/old install-sidecar``), whose processes the
    start and failover benchmarks run beside this checkout's, in the same run."""
    tree = os.environ.get("BENCH_BASELINE_TREE")
    if not tree:
        return None
    path = Path(tree).resolve()
    if not (path / ".venv" / "bin" / "python").exists():
        raise SystemExit(f"BENCH_BASELINE_TREE={tree}: no .venv/bin/python there "
                         "(make install-sidecar in it)")
    return path


def tree_commit(tree: Path | None) -> str:
    """The commit a checkout is at (``+dirty`` with changes), for the results file."""
    where = str(tree or ROOT)
    head = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


SOURCE_DIRS = ("cachesync", "schema", "consumer", "producer_outbox")


def compile_tree(tree: Path | None) -> None:
    """Compile a checkout's sources to bytecode, as an install does (pip compiles what it
    installs; an editable checkout run with PYTHONDONTWRITEBYTECODE compiles every module at
    every launch), so that start figures measure a process as deployed."""
    where = tree or ROOT
    python = str(where / ".venv" / "bin" / "python") if tree else sys.executable
    subprocess.run([python, "-m", "compileall", "-q", *SOURCE_DIRS], cwd=where, check=True,
                   stdout=subprocess.DEVNULL)


# -- statistics -------------------------------------------------------------------------
def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return None
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2


def percentile(values, q: float):
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    values = sorted(values)
    if not values:
        return None
    pos = (len(values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def summarize(runs: list[dict], fields: list[str]) -> dict:
    """``{"median": {field: median over runs}, "runs": runs}``; a field no run has is None."""
    def med(values):
        return _round(median(values)) if values else None
    return {"median": {f: med([r[f] for r in runs if r.get(f) is not None]) for f in fields},
            "runs": runs}


def stat_cpu_s(stat_path) -> float:
    """User + system CPU seconds of the process or thread whose /proc ``stat`` file this is;
    raises OSError when it is gone."""
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of the host so far (/proc/stat): two readings give
    the share of the host's CPU time that was busy between them (:func:`busy_share`). The
    first eight fields: guest time (the last two) is already counted in user time."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]                    # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The share (0..1) of the host's CPU time busy between two :func:`host_cpu` readings."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total > 0 else None


def free_port() -> int:
    """A TCP port free on the loopback now (for a child process to listen on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ratio(a, b):
    return _round(a / b) if a is not None and b else None


def _round(x):
    return round(x, 4) if isinstance(x, float) else x


class Worker(threading.Thread):
    """A daemon thread that keeps the exception its target raised."""

    def __init__(self, target, name: str):
        super().__init__(target=self._run, name=name, daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None

    def _run(self):
        try:
            self._target_fn()
        except BaseException as e:  # reported by the benchmark that owns the thread
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"{self.name} failed: {type(self.error).__name__}: "
                               f"{self.error}") from self.error


# -- the devstack -----------------------------------------------------------------------
class Stack(DevStack):
    """The devstack plus what the benchmarks need (a clean environ, admin_sql, versions)."""

    def __init__(self, env_path: Path | None = None):
        self.env_path = env_path or default_env_file(ROOT)
        if not self.env_path.exists():
            raise SystemExit(f"{self.env_path} is missing: start the devstack first "
                             "(`devstack/stack.sh up` or `make bench`)")
        super().__init__(read_env_file(self.env_path))

    @property
    def environ(self) -> dict[str, str]:
        """The process environment without stray CACHESYNC_* overrides, plus the devstack's."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CACHESYNC_")}
        return {**clean, **self.env}

    def admin_sql(self, statement: str, params=None):
        with self.admin() as conn, conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall()

    def kafka_admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)

    def check(self) -> None:
        try:
            super().check()
        except ConnectionError as e:
            raise SystemExit(str(e)) from e

    def versions(self) -> dict:
        (version,), = self.admin_sql("SELECT VERSION()")
        info = self.redis().info("server")
        return {"mysql": version, "redis": info.get("redis_version")}


class EndOffsets:
    """Sums a topic's end offsets (records Kafka acknowledged) with a group-less consumer."""

    def __init__(self, bootstrap: str, topic: str):
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                       enable_auto_commit=False)
        parts = wait_for(lambda: self._consumer.partitions_for_topic(topic), 30,
                         f"metadata of {topic}")
        self._tps = [TopicPartition(topic, p) for p in sorted(parts)]

    def ends(self) -> dict[TopicPartition, int]:
        return self._consumer.end_offsets(self._tps)

    def total(self) -> int:
        return sum(self.ends().values())

    def close(self) -> None:
        self._consumer.close()


def topic_events(bootstrap: str, topic: str, start: dict[TopicPartition, int] | None = None,
                 on_event=None) -> tuple[int, int, set[str]]:
    """Read a topic to its end: (records, change events in them, distinct event ids).

    Packed records hold several events; this is how a benchmark checks that exactly
    the rows it wrote arrived, once each, whatever the packing. ``start``: the offsets to
    read from (default: the beginning); ``on_event(record, event)`` sees every event.
    """
    offsets = EndOffsets(bootstrap, topic)
    try:
        ends = offsets.ends()
    finally:
        offsets.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             max_partition_fetch_bytes=8 * 1024 * 1024)
    records = events = 0
    ids: set[str] = set()
    try:
        consumer.assign(list(ends))
        consumer.seek_to_beginning()
        for tp, offset in (start or {}).items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} to its end took over 120s")
            for batch in consumer.poll(timeout_ms=500, max_records=5000).values():
                for r in batch:
                    records += 1
                    for event in decode_record(r.value):
                        events += 1
                        ids.add(event.id)
                        if on_event is not None:
                            on_event(r, event)
    finally:
        consumer.close()
    return records, events, ids


# -- isolation --------------------------------------------------------------------------
class Sandbox:
    """One benchmark's isolated world, named by a random suffix; ``cleanup()`` removes it."""

    def __init__(self, stack: Stack, label: str):
        self.stack = stack
        self.suffix = uuid.uuid4().hex[:8]
        self.label = label
        self.db = f"bench_{label}_{self.suffix}"
        self.prefix = f"bench:{self.suffix}:"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"cachesync-bench-{label}-"))
        self.topics: list[str] = []
        self.groups: list[str] = []
        self.tailer_names: list[str] = []
        self.procs: list[subprocess.Popen] = []
        # the checkout whose `cachesync` spawn() runs (None: this one); see baseline_tree()
        self.tree: Path | None = None
        self._schema = False
        self._count = 0

    # -- resources ------------------------------------------------------------------
    def create_schema(self, *ddl: str) -> None:
        with self.stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{self.db}`")
            self._schema = True
            # Tailer.run's preflight runs as the cachesync user, which may only read
            # the schemas granted to it (like tests/support.py's Lab).
            cur.execute(f"GRANT SELECT ON `{self.db}`.* TO cachesync@'127.0.0.1'")
            for statement in ddl:
                cur.execute(f"USE `{self.db}`")
                cur.execute(statement)

    def new_topic(self, partitions: int = 3) -> str:
        name = f"bench.{self.suffix}.{self._next()}"
        admin = self.stack.kafka_admin()
        try:
            admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}})
            self.topics.append(name)
            admin.wait_for_topics([name], timeout_ms=30000)
        finally:
            admin.close()
        return name

    def new_group(self) -> str:
        self.groups.append(f"bench-{self.suffix}-{self._next()}")
        return self.groups[-1]

    def new_tailer_name(self) -> str:
        self.tailer_names.append(f"bench-{self.suffix}-{self._next()}")
        return self.tailer_names[-1]

    @staticmethod
    def new_server_id() -> int:
        """A replica server_id no other replica uses (two readers with one id kick each other)."""
        return random.randint(1_000_000_000, 4_000_000_000)

    def _next(self) -> str:
        self._count += 1
        return str(self._count)

    # -- configuration --------------------------------------------------------------
    def write_config(self, tables: dict, *, topic: str, group: str | None = None,
                     tailer: dict | None = None, consumer: dict | None = None,
                     kafka: dict | None = None, metrics: dict | None = None) -> Path:
        """A cachesync YAML file; connection settings come from the devstack environment."""
        group = group or self.new_group()
        doc = {"kafka": {"topic": topic, "dead_letter_topic": f"{topic}.dlq", "group_id": group,
                         **(kafka or {})},
               "tailer": {"name": self.new_tailer_name(), "server_id": self.new_server_id(),
                          **(tailer or {})},
               "tables": tables}
        if consumer:
            doc["consumer"] = consumer
        if metrics:
            doc["metrics"] = metrics
        # the dead-letter topic would be auto-created on first use; register it for deletion
        self.topics.append(f"{topic}.dlq")
        path = self.tmp / f"config-{self._next()}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def settings(self, path: Path):
        return config.load(path, self.stack.environ)

    # -- child processes --------------------------------------------------------------
    def spawn(self, command: str, config_path: Path,
              env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> subprocess.Popen:
        """``cachesync <command> [args]``; ``env`` overrides settings (they win over the file)."""
        out = open(self.tmp / f"{command}-{len(self.procs)}.log", "w")
        python = str(self.tree / ".venv" / "bin" / "python") if self.tree else sys.executable
        proc = subprocess.Popen([python, "-m", "cachesync", command, "--config",
                                 str(config_path), *args], cwd=self.tree or ROOT,
                                env={**self.stack.environ, **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc.log_path = out.name
        self.procs.append(proc)
        return proc

    @staticmethod
    def proc_log(proc, chars: int = 3000) -> str:
        with open(proc.log_path) as f:
            return f.read()[-chars:]

    def stop_proc(self, proc, timeout: float = 20) -> int | None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return proc.returncode

    # -- cleanup ----------------------------------------------------------------------
    def cleanup(self) -> None:
        for proc in self.procs:
            _quietly(lambda p=proc: self.stop_proc(p))
        _quietly(self._drop_mysql)
        _quietly(self._drop_kafka)
        _quietly(self._drop_redis)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _drop_mysql(self) -> None:
        with self.stack.admin() as conn, conn.cursor() as cur:
            if self._schema:
                cur.execute(f"REVOKE SELECT ON `{self.db}`.* FROM cachesync@'127.0.0.1'")
                cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
            cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                        "'cachesync' AND table_name IN ('cachesync_checkpoint', 'cachesync_dedup', "
                        "'cachesync_dedup_done')")
            if cur.fetchone()[0] == 3:
                for name in self.tailer_names:
                    cur.execute("DELETE FROM cachesync.cachesync_checkpoint WHERE name = %s", (name,))
                for group in self.groups:   # the dedup namespace is the group id
                    for table in ("cachesync_dedup", "cachesync_dedup_done"):
                        cur.execute(f"DELETE FROM cachesync.{table} WHERE ns = %s", (group,))

    def _drop_kafka(self) -> None:
        admin = self.stack.kafka_admin()
        try:
            existing = set(admin.list_topics())
            topics = [t for t in dict.fromkeys(self.topics) if t in existing]
            if topics:
                admin.delete_topics(topics, timeout_ms=30000, raise_errors=False)
            if self.groups:
                result = admin.delete_groups(self.groups)   # {group: "OK" | error class name}
                left = [g for g, err in result.items() if err not in ("OK", "GroupIdNotFoundError")]
                if left:
                    # A member that did not leave (a child process that exited without
                    # closing its consumer) keeps the group until its session times out;
                    # the broker then drops the empty group on its own.
                    log(f"consumer group(s) {left} still have a member; left to expire")
        finally:
            admin.close()

    def _drop_redis(self) -> None:
        """The sandbox's cache keys and what cachesync keeps beside them: their lease and
        version companions, the groups' dedup records, retention and table-scan records
        (they carry TTLs of days), the table fences of the sandbox's database."""
        globs = [self.prefix + "*", *(f"{p}{{*}}{self.prefix}*" for p in (LEASE_PREFIX,
                                                                          VERSION_PREFIX)),
                 *(f"{p}{group}:*" for group in self.groups
                   for p in (DEDUP_PREFIX, TABLE_JOB_PREFIX)),
                 *(dedup_retention_key(group) for group in self.groups),
                 f"{TABLE_FENCE_PREFIX}{self.db}.*"]
        r = self.stack.redis()
        try:
            for glob in globs:
                batch = []
                for key in r.scan_iter(match=glob, count=5000):
                    batch.append(key)
                    if len(batch) >= 5000:
                        r.unlink(*batch)
                        batch = []
                if batch:
                    r.unlink(*batch)
        finally:
            r.close()


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as e:
        log(f"cleanup step failed: {type(e).__name__}: {e}")
