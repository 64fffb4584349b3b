"""``lint``'s checks of changes the binlog does not carry as the cache needs them.

* ``unlogged-changes``: binlog filters that exclude a mapped schema, accounts that may set
  ``sql_log_bin=0`` (``producer_outbox.unlogged_changes.risks``);
* ``period-key``: an update-mode table with an application-time period under a ``WITHOUT
  OVERLAPS`` key (MariaDB): several rows share the other key columns, so a template
  without the period's start or end column renders one key for all of them, and an
  ``UPDATE ... FOR PORTION OF`` (which splits a row) would cache one of them under it.
"""

from __future__ import annotations

from cachesync.producer_outbox.binlog.preflight import server_flavor
from cachesync.runtime.mysql import binlog_status
from cachesync.producer_outbox.unlogged_changes.risks import read_risks
from cachesync.producer_outbox.decode.versioning import overlap_periods
from cachesync.schema.mapping import MappingSet


def unlogged_findings(conn, mappings: MappingSet, finding) -> list:
    """One finding per way the mapped tables may change without binlog events."""
    return [finding("unlogged-changes", "(server)", f"{r.line()}; fix: {r.fix}")
            for r in read_risks(conn, server_flavor(conn), mappings.keyed_schemas(),
                                binlog_status)]


def period_findings(conn, mappings: MappingSet, finding) -> list:
    """The update-mode templates that leave out the period of a WITHOUT OVERLAPS key."""
    out = []
    for m in mappings.tables.values():
        if not m.updates or not m.keys:
            continue
        for name, start, end in overlap_periods(_create_table(conn, m.db, m.name)):
            for t in m.keys:
                if not {start.lower(), end.lower()} & {f.lower() for f in t.fields}:
                    out.append(finding("period-key", m.table, (
                        f"update mode: {t.text!r} leaves out the period {name} ({start}, "
                        f"{end}) of a WITHOUT OVERLAPS key: rows of several periods share "
                        f"the key, and UPDATE ... FOR PORTION OF {name} splits a row into "
                        f"several; put {{{start}}} or {{{end}}} in the template, or use "
                        "delete mode")))
    return out


def _create_table(conn, db: str, table: str) -> str:
    """SHOW CREATE TABLE's text ('' for a table that is missing or not readable: the
    missing-table check names it)."""
    import pymysql
    try:
        with conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE `{db.replace('`', '``')}`.`{table.replace('`', '``')}`")
            row = cur.fetchone()
    except pymysql.err.MySQLError:
        return ""
    return row[1] if row else ""
