"""MySQL checks: binlog settings and grants (the tailer's preflight functions), the
account's other grants, GTID mode, binlog retention against the checkpoint, changes of
mapped tables the binlog would not carry (``producer_outbox.unlogged_changes.risks``)."""

from __future__ import annotations

from cachesync.runtime.config import Settings
from cachesync.doctor.check import FAIL, GRANT_LINE, PASS, WARN, Check, guard
from cachesync.fk_report import RULES_GRANT, cascading_keys, what_cachesync_does
from cachesync.runtime.grants import STATE_PRIVILEGES, missing
from cachesync.producer_outbox.binlog.settings import DEGRADED
from cachesync.producer_outbox.binlog.preflight import (REPLICA_VARIABLES, REQUIRED_PRIVILEGES,
                                                        REQUIRED_VARIABLES, global_privileges,
                                                        problems, read_server_info)
from cachesync.runtime.mysql import binlog_status
from cachesync.producer_outbox.unlogged_changes.risks import read_risks


def mysql_checks(settings: Settings, connect, state_connect) -> list[Check]:
    """Binlog settings, grants, GTID mode, binlog retention against the checkpoint's age.

    ``connect`` reaches the server the binlog is read from; ``state_connect`` the one holding
    the checkpoint (``mysql.host``: they differ with ``tailer.source_hosts``).
    """
    conn = connect(database=None)
    try:
        info = read_server_info(conn)
        out = [_settings_check(info, settings), *shaping_checks(info), _grants_check(info),
               *_account_checks(info, settings)]
        # each on its own: a missing grant must not hide the other findings
        out += guard("gtid", lambda: [_gtid_check(conn, info)])
        out += guard("fk-cascade", lambda: fk_cascade_checks(conn, settings))
        out += guard("binlog-retention", lambda: [_retention_check(
            conn, settings, lambda: _checkpoint(state_connect, settings))])
        out += guard("unlogged-changes", lambda: unlogged_checks(conn, info, settings))
    finally:
        conn.close()
    return out


def fk_cascade_checks(conn, settings: Settings) -> list[Check]:
    """One WARN per foreign key that cascades into a mapped table (what cachesync does about
    it, and the cost), or one PASS."""
    found, logged = cascading_keys(conn, settings.tables)
    if not found:
        return [Check("fk-cascade", PASS, "no foreign key cascades into a mapped table")]
    return [Check("fk-cascade", PASS if logged is True else WARN,
                  what_cachesync_does(fk, tables, logged, settings.tables),
                  "" if fk.rules_known else RULES_GRANT) for fk, tables in found]


def _settings_check(info, settings: Settings) -> Check:
    found = [p for p in problems(info, bool(settings.tailer.source_hosts))
             if not p.startswith(GRANT_LINE)]
    required = {**REQUIRED_VARIABLES, **(REPLICA_VARIABLES if settings.tailer.source_hosts else {})}
    shown = ", ".join(f"{k}={info.variables.get(k)}" for k in required)
    if found:
        return Check("binlog-settings", FAIL, "; ".join(found),
                     "set them in my.cnf under [mysqld] and restart the server")
    return Check("binlog-settings", PASS, shown)


def shaping_checks(info) -> list[Check]:
    """What cachesync does about each binlog-shaping setting (the preflight's report, which
    the tailer logs at start): a degraded one is a WARN, the others PASS saying what happens."""
    return [Check("binlog-shaping", WARN if r.outcome == DEGRADED else PASS, r.line(),
                  f"change {r.name} (my.cnf, [mysqld])" if r.outcome == DEGRADED else "")
            for r in info.binlog_settings()]


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
    return settings.tables.keyed_schemas() - {settings.mysql.state_db}


def unlogged_checks(conn, info, settings: Settings) -> list[Check]:
    """A WARN for each way the mapped tables may change without binlog events (binlog
    filters excluding a mapped schema, accounts that may set sql_log_bin=0), else PASS."""
    risks = read_risks(conn, info.flavor, mapped_databases(settings), binlog_status)
    if not risks:
        return [Check("unlogged-changes", PASS, "no binlog filter excludes a mapped schema; no "
                      "account whose grants the cachesync user can read may SET sql_log_bin=0 "
                      "(without SELECT ON mysql.* it reads only its own)")]
    return [Check("unlogged-changes", WARN, r.line(), r.fix) for r in risks]


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


def _checkpoint(connect, settings: Settings):
    """The tailer's checkpoint row (log_file, gtid, age in s), None if there is none yet."""
    conn = connect(database=None)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT log_file, gtid, TIMESTAMPDIFF(SECOND, updated_at, NOW()) "
                            f"FROM `{settings.mysql.state_db}`.cachesync_checkpoint "
                            f"WHERE name = %s", (settings.tailer.name,))
                return cur.fetchone()
            except Exception:          # no state database yet: nothing has run
                return None
    finally:
        conn.close()


def _retention_check(conn, settings: Settings, read_checkpoint) -> Check:
    v = _variables(conn, ["binlog_expire_logs_seconds", "expire_logs_days"])
    retention = float(v.get("binlog_expire_logs_seconds") or 0) or \
        float(v.get("expire_logs_days") or 0) * 86400
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
    conn.commit()
    row = read_checkpoint()
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
