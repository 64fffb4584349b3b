"""What each dedup store choice writes to the primary's binlog, per application row change,
and how fast the consumer applies with it.

For each choice, in one run: the application's own binlog bytes for N single-row UPDATEs
with no pipeline running (``Binlog_bytes_written``, MariaDB's global status); then the
same N UPDATEs with ``cachesync tail`` running, all of them published, and only then the
python engine started (so its keys/s is the consumer's, not the writer's); the extra bytes
are the primary's growth from the first UPDATE to the last change applied, less the
application's own. Choices:

* ``none``: no dedup claim at all (baseline only: the dedup record is part of the contract);
  what is left is the tailer's checkpoint writes, the same in every run.
* ``redis``: ``consumer.dedup_store: redis`` (the default).
* ``mysql``: ``consumer.dedup_store: mysql`` on the primary.
* ``mysql_log_bin_off``: the same with ``consumer.dedup_mysql_log_bin: false`` (an account
  with BINLOG ADMIN, created for the run).
* ``mysql_compact``: ``consumer.dedup_mysql_layout: compact`` on the primary (the run's
  account, which also has the layout's ALTER, DROP).
* ``mysql_host``: the MySQL store on a server of its own (``consumer.dedup_mysql_host``:
  the ``mariadb-twin`` variant, which must be up: ``devstack/stack.sh up mariadb-twin``).

``BENCH_DEDUP_BINLOG_CHOICES`` (comma-separated) runs some of them; ``none`` always runs.

The MySQL store's periodic purge deletes every record again later (as many binlog bytes
once more with the binlog on); it is not in these figures. A MySQL store on a server of
its own (``consumer.dedup_mysql_host``) writes nothing to the primary's binlog: the
``mysql_host`` run measures it.
Heartbeats are off (``tailer.heartbeat_interval_s: 0``): at idle they add a row per
interval whatever the store. ``python -m bench --only dedup_binlog [--quick]``.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time

from bench.common import Sandbox, Worker, log, ratio, summarize, topic_events, wait_for
from cachesync.runtime.config import Secret
from cachesync.consumer.adapters.kafka_source import KafkaSource
from cachesync.consumer.engine import PythonEngine
from cachesync.runtime.kafka_security import client_security
from cachesync.schema.keys import DEDUP_PREFIX
from cachesync.wiring import (build_cache, build_dead_letters, build_dedup, kafka_group,
                              mappings)

NAME = "dedup_binlog"
SIZES = {"full": 20_000, "quick": 2_000}
TABLE_ROWS = 1_000
ALL_CHOICES = {"none": None, "redis": {"dedup_store": "redis"},
               "mysql": {"dedup_store": "mysql"},
               "mysql_log_bin_off": {"dedup_store": "mysql", "dedup_mysql_log_bin": False},
               "mysql_compact": {"dedup_store": "mysql", "dedup_mysql_layout": "compact"},
               "mysql_host": {"dedup_store": "mysql"}}     # + dedup_mysql_host, at run time
CHOICES = {c: v for c, v in ALL_CHOICES.items() if c == "none" or c in os.environ.get(
    "BENCH_DEDUP_BINLOG_CHOICES", ",".join(ALL_CHOICES)).split(",")}
UPDATES_PER_COMMIT = 1      # single-row transactions: the dedup's share is at its largest
FIELDS = ["app_bytes_per_change", "extra_bytes_per_change", "extra_over_app", "keys_per_s"]


def run(stack, quick: bool, runs: int) -> dict:
    n = SIZES["quick" if quick else "full"]
    box = Sandbox(stack, NAME)
    account = _binlog_admin_account(stack, box)
    try:
        box.create_schema("CREATE TABLE items (id INT PRIMARY KEY, v INT NOT NULL)",
                          "INSERT INTO items SELECT seq, 0 FROM seq_0_to_%d" % (TABLE_ROWS - 1))
        sides: dict[str, list[dict]] = {c: [] for c in CHOICES}
        for i in range(runs):
            order = list(CHOICES) if i % 2 == 0 else list(reversed(CHOICES))
            for choice in order:
                result = one_run(box, choice, n, account)
                sides[choice].append(result)
                log(f"{NAME}: run {i + 1}/{runs} {choice}: "
                    f"{result['extra_bytes_per_change']:.1f} extra B/change "
                    f"({100 * result['extra_over_app']:.1f} % of the app's), "
                    f"{result['keys_per_s']:,.0f} keys/s")
        out = {"params": {"changes_per_run": n, "runs": runs, "table_rows": TABLE_ROWS,
                          "updates_per_commit": UPDATES_PER_COMMIT, "heartbeat": "off"}}
        for choice, results in sides.items():
            out[choice] = summarize(results, FIELDS)
        # the dedup store's own share: what a choice wrote beyond the no-dedup run
        none_extra = out["none"]["median"]["extra_bytes_per_change"]
        out["dedup_bytes_per_change_over_none"] = {
            c: round(out[c]["median"]["extra_bytes_per_change"] - none_extra, 1)
            for c in CHOICES if c != "none"}
        base = out["none"]["median"]["keys_per_s"]
        out["keys_per_s_over_none"] = {c: ratio(out[c]["median"]["keys_per_s"], base)
                                       for c in CHOICES if c != "none"}
        return out
    finally:
        _drop_account(stack, account)
        box.cleanup()


def one_run(box: Sandbox, choice: str, n: int, account: tuple[str, str]) -> dict:
    stack = box.stack
    app = _binlog_bytes(stack)
    _updates(box, n)
    app = _binlog_bytes(stack) - app
    topic = box.new_topic()
    cfg = box.write_config({f"{box.db}.items": {"keys": [box.prefix + "item:{id}"]}},
                           topic=topic, tailer={"heartbeat_interval_s": 0},
                           consumer=_consumer(box, choice))
    tailer = box.spawn("tail", cfg)
    try:
        wait_for(lambda: _checkpoint_of(box, cfg), 60, "the tailer's start checkpoint")
        start = _binlog_bytes(stack)
        _updates(box, n)
        wait_for(lambda: topic_events(stack.bootstrap, topic)[1] >= n, 300,
                 f"{n} changes published", interval=0.5)
        engine = _engine(box, cfg, choice, account)
        worker = Worker(engine.run, "engine")
        t0 = time.perf_counter()
        worker.start()
        try:
            wait_for(lambda: worker.check() or engine.stats.consumed >= n, 600,
                     f"{n} changes applied", interval=0.01)
            elapsed = time.perf_counter() - t0
        finally:
            engine.stop()
            worker.join(30)
            engine.close()
        worker.check()
        extra = _binlog_bytes(stack) - start - app
    finally:
        box.stop_proc(tailer)
        _drop_redis_dedup(box, box.settings(cfg).dedup_namespace)
    if engine.stats.applied != n:
        raise RuntimeError(f"{choice}: applied {engine.stats.applied} of {n}")
    return {"choice": choice, "changes": n, "app_bytes_per_change": app / n,
            "extra_bytes_per_change": extra / n, "extra_over_app": extra / app,
            "keys_per_s": n / elapsed, "elapsed_s": elapsed}


def _engine(box: Sandbox, cfg, choice: str, account: tuple[str, str]) -> PythonEngine:
    """The python engine as ``build_engine`` makes it; ``none`` without a dedup store, the
    log-bin-off and compact choices as the run's account (it may turn the binlog off and
    drop partitions)."""
    settings = box.settings(cfg)
    if choice in ("mysql_log_bin_off", "mysql_compact"):
        settings = dataclasses.replace(settings, mysql=dataclasses.replace(
            settings.mysql, user=account[0], password=Secret(account[1])))
    k = settings.kafka
    source = KafkaSource(k.bootstrap_servers, k.topic, k.group_id, group=kafka_group(settings),
                         security=client_security(k))
    dedup = None if CHOICES[choice] is None else build_dedup(settings)
    return PythonEngine(source, dedup, build_cache(settings), build_dead_letters(settings),
                        mappings(settings), options=settings.consumer)


def _consumer(box: Sandbox, choice: str) -> dict:
    """The consumer settings of ``choice``; ``mysql_host`` names the twin (raises when the
    variant is not up)."""
    consumer = dict(CHOICES[choice] or {})
    if choice == "mysql_host":
        port = box.stack.env.get("DEVSTACK_MYSQL_TWIN_PORT")
        if not port:
            raise RuntimeError("mysql_host needs the mariadb-twin variant: "
                               "`devstack/stack.sh up mariadb-twin`")
        consumer["dedup_mysql_host"] = f"127.0.0.1:{port}"
    return consumer


def _drop_redis_dedup(box: Sandbox, namespace: str) -> None:
    """The run's Redis dedup records (their TTL is the retention: days)."""
    r = box.stack.redis()
    try:
        keys = list(r.scan_iter(match=f"{DEDUP_PREFIX}{namespace}:*", count=5000))
        for i in range(0, len(keys), 5000):
            r.unlink(*keys[i:i + 5000])
    finally:
        r.close()


def _updates(box: Sandbox, n: int) -> None:
    """``n`` single-row UPDATE transactions over the table's rows, autocommitted."""
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        for i in range(n):
            cur.execute("UPDATE items SET v = v + 1 WHERE id = %s", (i % TABLE_ROWS,))


def _binlog_bytes(stack) -> int:
    (_, value), = stack.admin_sql("SHOW GLOBAL STATUS LIKE 'Binlog_bytes_written'")
    return int(value)


def _checkpoint_of(box: Sandbox, cfg) -> bool:
    name = box.settings(cfg).tailer.name
    return bool(box.stack.admin_sql("SELECT 1 FROM cachesync.cachesync_checkpoint "
                                    "WHERE name = %s", (name,)))


def _binlog_admin_account(stack, box: Sandbox) -> tuple[str, str]:
    """An account with the MySQL dedup store's grants plus BINLOG ADMIN, for this run."""
    user, password = f"bench_nolog_{box.suffix}", secrets.token_hex(12)
    stack.admin_sql(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
    stack.admin_sql(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP ON cachesync.* "
                    f"TO '{user}'@'127.0.0.1'")
    stack.admin_sql(f"GRANT BINLOG ADMIN ON *.* TO '{user}'@'127.0.0.1'")
    return user, password


def _drop_account(stack, account: tuple[str, str]) -> None:
    stack.admin_sql(f"DROP USER IF EXISTS '{account[0]}'@'127.0.0.1'")
