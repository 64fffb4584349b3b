"""``cachesync doctor``: everything that can be checked before running, each a PASS, WARN
or FAIL with the fix. ``tail`` and ``consume`` run the same checks at start and log what
is not PASS; the server's settings and grants stay the tailer's preflight
(``producer_outbox.preflight``), whose functions these checks reuse.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Callable

from kafka.errors import (CoordinatorLoadInProgressError, CoordinatorNotAvailableError,
                          GroupIdNotFoundError, NotCoordinatorError)

from cachesync.config import Settings
from cachesync.grants import STATE_PRIVILEGES, missing
from cachesync.producer_outbox.preflight import (REQUIRED_PRIVILEGES, global_privileges,
                                                 problems, read_server_info)

log = logging.getLogger("cachesync.doctor")

COORDINATOR_NOT_READY = (CoordinatorNotAvailableError, CoordinatorLoadInProgressError,
                         NotCoordinatorError, GroupIdNotFoundError)

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
LEVELS = {PASS: 0, WARN: 1, FAIL: 2}
EXIT_CODES = {PASS: 0, WARN: 5, FAIL: 6}
MAX_SKEW_S = 1.0           # clocks further apart than this skew lag figures and leases
GRANT_LINE = "the cachesync user lacks"     # how preflight.problems names a missing grant


@dataclass(frozen=True)
class Check:
    name: str
    level: str           # PASS | WARN | FAIL
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.level:<4} {self.name:<18} {self.detail}" + (
            f"\n     {'':<18} fix: {self.fix}" if self.fix else "")

    def to_dict(self) -> dict:
        return asdict(self)


def worst(checks: list[Check]) -> str:
    return max((c.level for c in checks), key=LEVELS.__getitem__, default=PASS)


# ---- MySQL ---------------------------------------------------------------------------
def mysql_checks(settings: Settings, connect) -> list[Check]:
    """Binlog settings, grants, GTID mode, binlog retention against the checkpoint's age."""
    conn = connect(database=None)
    try:
        info = read_server_info(conn)
        out = [_settings_check(info, settings), _grants_check(info),
               *_account_checks(info, settings)]
        # each on its own: a missing grant must not hide the other findings
        out += _guard("gtid", lambda: [_gtid_check(conn, info)])
        out += _guard("binlog-retention", lambda: [_retention_check(conn, settings)])
    finally:
        conn.close()
    return out


def _settings_check(info, settings: Settings) -> Check:
    found = [p for p in problems(info, bool(settings.tailer.source_hosts))
             if not p.startswith(GRANT_LINE)]
    shown = ", ".join(f"{k}={v}" for k, v in sorted(info.variables.items()))
    if found:
        return Check("binlog-settings", FAIL, "; ".join(found),
                     "set them in my.cnf under [mysqld] and restart the server")
    return Check("binlog-settings", PASS, shown)


def _grants_check(info) -> Check:
    granted = global_privileges(info.grants)
    missing = [p for p, spellings in REQUIRED_PRIVILEGES.items() if not granted & set(spellings)]
    if missing:
        return Check("grants", FAIL, f"the cachesync user lacks {', '.join(missing)}",
                     f"GRANT {', '.join(missing)} ON *.* TO <cachesync user>")
    return Check("grants", PASS, "REPLICATION SLAVE and REPLICATION CLIENT granted")


def _account_checks(info, settings: Settings) -> list[Check]:
    """The account's other grants: its own state database (checkpoints, dedup, locks), and
    SELECT on the mapped tables (lint, init, the consistency monitor and audit read them)."""
    state = settings.mysql.state_db
    out = []
    lacking = missing(info.grants, state, STATE_PRIVILEGES)
    if lacking:
        out.append(Check("grants-state", FAIL, f"the cachesync user lacks {', '.join(lacking)} "
                         f"on its state database `{state}`",
                         f"GRANT {', '.join(STATE_PRIVILEGES)} ON `{state}`.* TO <cachesync user>"))
    else:
        out.append(Check("grants-state", PASS, f"{', '.join(STATE_PRIVILEGES)} on `{state}`"))
    unread = sorted(db for db in mapped_databases(settings)
                    if missing(info.grants, db, ["SELECT"])
                    and not _tables_readable(info.grants, settings, db))
    if unread:
        out.append(Check("grants-tables", WARN, f"no SELECT on {', '.join(unread)}: lint, init, "
                         "the consistency monitor and audit cannot read the mapped tables",
                         "; ".join(f"GRANT SELECT ON `{db}`.* TO <cachesync user>" for db in unread)))
    else:
        out.append(Check("grants-tables", PASS, "SELECT on the mapped tables"))
    return out


def _tables_readable(grants, settings: Settings, db: str) -> bool:
    """Every exact entry of ``db`` is readable through table-level grants (none: False)."""
    tables = [m for m in settings.tables.tables.values() if m.db == db and m.keys]
    return bool(tables) and all(not missing(grants, db, ["SELECT"], m.name) for m in tables)


def mapped_databases(settings: Settings) -> set[str]:
    """The databases of exact entries and of glob patterns whose database part is literal
    (the live tables of others are only visible with SELECT on them)."""
    dbs = {m.db for m in settings.tables.tables.values() if m.keys}
    dbs |= {p.glob[0] for p, _ in settings.tables.patterns
            if p.glob is not None and not set("*?[") & set(p.glob[0])}
    dbs |= {m.db for m in settings.tables.resolved()}
    return dbs - {settings.mysql.state_db}


def _variables(conn, names) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ("
                    + ", ".join(["%s"] * len(names)) + ")", list(names))
        return {k: str(v) for k, v in cur.fetchall()}


def _gtid_check(conn, info) -> Check:
    if info.flavor == "mariadb":
        strict = _variables(conn, ["gtid_strict_mode"]).get("gtid_strict_mode", "OFF")
        if strict.upper() != "ON":
            return Check("gtid", WARN, f"gtid_strict_mode={strict}: versions of update-mode "
                         "tables may not grow across a failover",
                         "SET GLOBAL gtid_strict_mode=ON (and in my.cnf)")
        return Check("gtid", PASS, "MariaDB GTIDs, gtid_strict_mode=ON")
    mode = _variables(conn, ["gtid_mode"]).get("gtid_mode", "OFF")
    if mode.upper() != "ON":
        return Check("gtid", WARN, f"gtid_mode={mode}: checkpoints are file:pos, which do "
                     "not survive a failover to a replica",
                     "gtid_mode=ON and enforce_gtid_consistency=ON in my.cnf")
    return Check("gtid", PASS, "gtid_mode=ON")


def _retention_check(conn, settings: Settings) -> Check:
    v = _variables(conn, ["binlog_expire_logs_seconds", "expire_logs_days"])
    retention = float(v.get("binlog_expire_logs_seconds") or 0) or \
        float(v.get("expire_logs_days") or 0) * 86400
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
        try:
            cur.execute(f"SELECT log_file, gtid, TIMESTAMPDIFF(SECOND, updated_at, NOW()) FROM "
                        f"`{settings.mysql.state_db}`.cachesync_checkpoint WHERE name = %s",
                        (settings.tailer.name,))
            row = cur.fetchone()
        except Exception:          # no state database yet: nothing has run
            row = None
    conn.commit()
    kept = "kept forever" if not retention else f"kept {retention / 86400:g} d"
    if row is None:
        return Check("binlog-retention", PASS, f"binlogs {kept}; no checkpoint yet (first "
                     "start reads from the current position)")
    log_file, gtid, age = row[0], row[1], float(row[2] or 0)
    if not gtid and log_file and log_file not in files:
        return Check("binlog-retention", FAIL, f"the checkpoint's binlog {log_file} is purged "
                     f"(oldest kept: {files[0] if files else 'none'})",
                     "cachesync resync (invalidates the mapped tables, restarts from now)")
    if retention and age > retention:
        return Check("binlog-retention", FAIL, f"the checkpoint is {age / 3600:.1f} h old, "
                     f"binlogs are {kept}: its position is likely purged", "cachesync resync")
    if retention and age > retention / 2:
        return Check("binlog-retention", WARN, f"the checkpoint is {age / 3600:.1f} h old, "
                     f"binlogs are {kept}", "start the tailer, or raise binlog_expire_logs_seconds")
    return Check("binlog-retention", PASS, f"binlogs {kept}; checkpoint {age:.0f} s old")


# ---- Kafka ---------------------------------------------------------------------------
def topic_checks(settings: Settings, admin) -> list[Check]:
    """Each topic exists, has partitions, and keeps records no longer than the dedup store
    keeps ids (or a redelivered record older than its id would be applied twice)."""
    from cachesync.topics import describe_topics, topic_names
    out = []
    dedup_ms = settings.consumer.dedup_retention_s * 1000
    for t in describe_topics(admin, topic_names(settings)):
        if not t.exists:
            out.append(Check("topic", FAIL, f"{t.name} does not exist",
                             "cachesync topics create (or kafka.create_topics: true)"))
        elif dedup_ms and (t.retention_ms == -1 or (t.retention_ms or 0) >= dedup_ms):
            out.append(Check("topic", WARN, f"{t.describe()}: longer than "
                             f"consumer.dedup_retention_s ({settings.consumer.dedup_retention_s:g} s)",
                             "lower the topic's retention.ms or raise consumer.dedup_retention_s"))
        else:
            out.append(Check("topic", PASS, t.describe()))
    return out


def group_check(settings: Settings, admin) -> Check:
    """The consumer group's state and its lag (end offsets minus committed): a lag with no
    member consuming is a WARN."""
    from kafka import KafkaConsumer, TopicPartition
    from cachesync.kafka_security import client_security
    group, topic = settings.kafka.group_id, settings.kafka.topic
    try:
        state = admin.describe_groups([group])[group]["group_state"]
        committed = admin.list_group_offsets(group)[group]
    except COORDINATOR_NOT_READY:
        return Check("consumer-group", WARN, f"no group coordinator yet for {group}: nothing "
                     "has consumed from this broker", "start `cachesync consume`")
    mine = {tp: o.offset for tp, o in committed.items() if tp.topic == topic and o.offset >= 0}
    if not mine:
        return Check("consumer-group", PASS, f"group {group} has not consumed {topic} yet (a "
                     "first start begins at the earliest offset)")
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers,
                             **client_security(settings.kafka))
    try:
        ends = consumer.end_offsets(list(mine))
    finally:
        consumer.close()
    lag = sum(max(0, ends[tp] - off) for tp, off in mine.items())
    if lag and state in ("Empty", "Dead"):
        return Check("consumer-group", WARN, f"group {group} has no member ({state}) and "
                     f"{lag} record(s) of {topic} wait: nothing applies them to Redis",
                     "start `cachesync consume` (or `cachesync run`)")
    return Check("consumer-group", PASS, f"group {group} {state}, lag {lag} record(s) over "
                 f"{len(mine)} partition(s)")


# ---- Redis and clocks ------------------------------------------------------------------
def redis_check(settings: Settings, client) -> list[Check]:
    """Reachable, writable (a master), its mode, and its clock."""
    info = client.info()
    mode = "cluster" if settings.redis.cluster else (
        "sentinel" if settings.redis.sentinels else info.get("redis_mode", "standalone"))
    role = info.get("role", "?")
    out = []
    if role != "master":
        out.append(Check("redis", FAIL, f"Redis answers as a {role}: writes are refused",
                         "point redis.url at the master (or use redis.sentinels)"))
    else:
        out.append(Check("redis", PASS, f"{mode}, {role}, version {info.get('redis_version')}, "
                         f"maxmemory-policy {info.get('maxmemory_policy', '?')}"))
    seconds, micros = client.time()
    out.append(skew_check("redis", seconds + micros / 1e6, time.time()))
    return out


def mysql_clock(connect) -> float:
    conn = connect(database=None)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
            return float(cur.fetchone()[0])
    finally:
        conn.close()


def skew_check(what: str, theirs: float, ours: float) -> Check:
    skew = theirs - ours
    if abs(skew) > MAX_SKEW_S:
        return Check("clock-skew", WARN, f"{what}'s clock is {skew:+.2f} s from this host's: lag "
                     "figures and lease expiries are off by as much", "run NTP (chrony) on both")
    return Check("clock-skew", PASS, f"{what} {skew:+.3f} s")


# ---- first start -----------------------------------------------------------------------
SAMPLE_SCAN_CALLS = 10      # SCAN calls per template and node: a bounded sample, never all keys
SAMPLE_SCAN_COUNT = 1000


def first_start_check(settings: Settings, has_checkpoint: bool, client) -> Check:
    """On a first start (no checkpoint), keys the mapping renders already in Redis were
    cached before cachesync watched: they may be stale until `cachesync resync`."""
    if has_checkpoint:
        return Check("first-start", PASS, f"tailer {settings.tailer.name} has a checkpoint")
    templates = {t.glob: t.text for m in settings.tables.entries for t in m.keys}
    for glob, text in templates.items():
        found = sample_keys(client, glob)
        if found:
            return Check("first-start", WARN, f"first start of tailer {settings.tailer.name}, "
                         f"but Redis already holds mapped keys (e.g. {found[0]!r} of {text!r}): "
                         "they were cached before cachesync watched and may be stale",
                         "stop writers' caching or accept misses, then run `cachesync resync` "
                         "before `cachesync tail`")
    return Check("first-start", PASS, "first start; no mapped key found in a sample of Redis")


def sample_keys(client, glob: str) -> list[str]:
    """Keys matching ``glob`` among a bounded number of SCAN steps of each master."""
    nodes = ([client.get_redis_connection(n) for n in client.get_primaries()]
             if hasattr(client, "get_primaries") else [client])
    for node in nodes:
        cursor = 0
        for _ in range(SAMPLE_SCAN_CALLS):
            cursor, keys = node.scan(cursor, match=glob, count=SAMPLE_SCAN_COUNT)
            if keys:
                return [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in keys]
            if not cursor:
                break
    return []


def has_checkpoint(connect, settings: Settings) -> bool:
    conn = connect(database=None)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT 1 FROM `{settings.mysql.state_db}`.cachesync_checkpoint "
                            "WHERE name = %s", (settings.tailer.name,))
                return cur.fetchone() is not None
            except Exception:       # no state database yet: nothing has run
                return False
    finally:
        conn.close()


# ---- settings --------------------------------------------------------------------------
def unsafe_settings(settings: Settings) -> list[str]:
    """Settings that load but work against each other (the documented safe ranges)."""
    k, c = settings.kafka, settings.consumer
    out = []
    if c.claim_lease_s * 1000 >= k.session_timeout_ms:
        out.append(f"consumer.claim_lease_s ({c.claim_lease_s:g} s) is not below "
                   f"kafka.session_timeout_ms ({k.session_timeout_ms} ms): a partition's new "
                   "owner waits out the lease, stalling failover")
    if c.dedup_retention_s and c.dedup_retention_s <= k.topic_retention_s:
        out.append(f"consumer.dedup_retention_s ({c.dedup_retention_s:g} s) is not above "
                   f"kafka.topic_retention_s ({k.topic_retention_s:g} s): a redelivered record "
                   "older than its dedup record is applied twice")
    return out


def settings_check(settings: Settings) -> Check:
    found = unsafe_settings(settings)
    if found:
        return Check("settings", WARN, "; ".join(found), "change the settings named")
    return Check("settings", PASS, "within the documented safe ranges")


# ---- all -------------------------------------------------------------------------------
def run_checks(settings: Settings, role: str = "all") -> list[Check]:
    """Every check for ``role`` (all, tail, consume; direct: tail's and Redis's, no Kafka);
    a service that does not answer is a FAIL naming it, never an exception."""
    from cachesync import wiring
    from cachesync.topics import admin_client
    out: list[Check] = [settings_check(settings)]
    params = wiring.mysql_params(settings)
    if role in ("all", "tail", "direct"):
        out += _guard("mysql", lambda: mysql_checks(settings, wiring.source_params(settings).connect))
    out += _guard("clock-skew", lambda: [skew_check("mysql", mysql_clock(params.connect),
                                                    time.time())])

    def kafka() -> list[Check]:
        admin = admin_client(settings)
        try:
            found = topic_checks(settings, admin)
            return found + ([group_check(settings, admin)] if role in ("all", "consume") else [])
        finally:
            admin.close()
    if role != "direct":
        out += _guard("kafka", kafka)
    def redis_checks() -> list[Check]:
        client = wiring.redis_client(settings, 5)
        try:
            found = redis_check(settings, client) if role != "tail" else []
            if role != "consume":
                found.append(first_start_check(
                    settings, has_checkpoint(params.connect, settings), client))
            return found
        finally:
            client.close()
    out += _guard("redis", redis_checks)
    return out


def _guard(name: str, run: Callable[[], list[Check]]) -> list[Check]:
    try:
        return run()
    except Exception as e:        # an unreachable service is a finding, not a crash
        return [Check(name, FAIL, f"{type(e).__name__}: {e}",
                      f"check that {name} is reachable with the configured address and credentials")]


def start_checks(settings: Settings, role: str) -> None:
    """At tail/consume start: create topics if configured, then log each check that is not
    PASS (the tailer's preflight still refuses a server that is not ready)."""
    from cachesync.topics import ensure_topics
    if role != "direct":
        ensure_topics(settings)
    for check in run_checks(settings, role):
        if check.level != PASS:
            log.warning("doctor: %s %s: %s%s", check.level, check.name, check.detail,
                        f" (fix: {check.fix})" if check.fix else "")
