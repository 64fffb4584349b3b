"""Changes the server makes without writing them to the binlog, as far as they can be seen.

No binlog reader can see these; cachesync names them at start (WARNING and
``cachesync_tailer_unlogged_change_risks``), in ``lint`` and in ``doctor``:

* server-side binlog filters (``binlog_do_db``, ``binlog_ignore_db``, reported by SHOW
  BINARY/MASTER LOG STATUS): a mapped schema they exclude never reaches the binlog;
* sessions with ``sql_log_bin=0``: nothing in the binlog or the server's settings shows
  them. What can be seen is who may do it: the accounts holding a privilege that allows
  setting it (SUPER; MariaDB BINLOG ADMIN; MySQL SYSTEM_VARIABLES_ADMIN or
  SESSION_VARIABLES_ADMIN), as far as the cachesync user can read other accounts' grants
  (information_schema.USER_PRIVILEGES; privileges held through roles are not listed).

``filter_risks`` and ``log_bin_risks`` are pure; ``read_risks`` asks the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

BINLOG_FILTER, SQL_LOG_BIN = "binlog_filter", "sql_log_bin"
LOG_BIN_PRIVILEGES = {
    "mariadb": ("SUPER", "BINLOG ADMIN"),
    "mysql": ("SUPER", "SYSTEM_VARIABLES_ADMIN", "SESSION_VARIABLES_ADMIN"),
}


@dataclass(frozen=True)
class UnloggedRisk:
    """Changes of mapped tables that may never reach the binlog, and why."""

    kind: str            # BINLOG_FILTER | SQL_LOG_BIN
    detail: str
    fix: str
    certain: bool = True  # False: only possible (an account could, nothing shows it did)

    def line(self) -> str:
        return f"{self.kind}: {self.detail}"


def excluded_schemas(do_db: str, ignore_db: str, schemas: Iterable[str]) -> list[str]:
    """The ``schemas`` that comma-separated ``binlog_do_db`` / ``binlog_ignore_db`` lists
    keep out of the binlog (a do list logs only what it names)."""
    do = {s.strip().lower() for s in (do_db or "").split(",") if s.strip()}
    ignore = {s.strip().lower() for s in (ignore_db or "").split(",") if s.strip()}
    return sorted({s for s in schemas if (do and s.lower() not in do) or s.lower() in ignore})


def filter_risks(do_db: str, ignore_db: str, schemas: Iterable[str]) -> list[UnloggedRisk]:
    """A risk for the mapped ``schemas`` the server's binlog filters exclude."""
    excluded = excluded_schemas(do_db, ignore_db, schemas)
    if not excluded:
        return []
    return [UnloggedRisk(BINLOG_FILTER, f"the server's binlog filters (binlog_do_db="
                         f"{do_db or '-'}, binlog_ignore_db={ignore_db or '-'}) keep "
                         f"{', '.join(excluded)} out of the binlog: no change of its mapped "
                         "tables reaches cachesync, their keys stay stale until their TTL",
                         "remove the filter from my.cnf ([mysqld]) and restart the server, "
                         "or map tables of other schemas only")]


def log_bin_risks(flavor: str, grantees: Iterable[str], others_visible: bool) -> list[UnloggedRisk]:
    """A risk naming the accounts that may turn binary logging off for their session
    (``grantees``: those found holding one of LOG_BIN_PRIVILEGES); ``others_visible``: whether
    the cachesync user could read the grants of any account but its own (without SELECT ON
    mysql.* it reads only its own, and the risk says so)."""
    names = sorted(set(grantees))
    privileges = " or ".join(LOG_BIN_PRIVILEGES[flavor])
    if not names:
        return []
    seen = "" if others_visible else " (of the accounts whose grants the cachesync user can read)"
    return [UnloggedRisk(SQL_LOG_BIN, f"{len(names)} account(s){seen} hold {privileges} and "
                         f"may SET sql_log_bin=0: their changes would never reach the binlog, "
                         f"and nothing shows whether they did: {', '.join(names[:10])}"
                         + (" ..." if len(names) > 10 else ""),
                         "keep those privileges to administrators who never write mapped "
                         "tables with binary logging off", certain=False)]


def read_risks(conn, flavor: str, schemas: Iterable[str], binlog_status) -> list[UnloggedRisk]:
    """Every risk for the mapped ``schemas`` on the server of ``conn``; ``binlog_status(cur)``
    returns SHOW BINARY/MASTER LOG STATUS's row (file, position, do_db, ignore_db, ...)."""
    with conn.cursor() as cur:
        row = binlog_status(cur)
        out = filter_risks(row[2] or "", row[3] or "", schemas) if row and len(row) > 3 else []
        privileges = LOG_BIN_PRIVILEGES[flavor]
        cur.execute("SELECT DISTINCT grantee FROM information_schema.user_privileges WHERE "
                    f"privilege_type IN ({', '.join(['%s'] * len(privileges))})", privileges)
        grantees = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT COUNT(*) FROM information_schema.user_privileges "
                    "WHERE grantee <> CONCAT(\"'\", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), "
                    "\"'@'\", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), \"'\")")
        others_visible = cur.fetchone()[0] > 0
    conn.commit()
    return out + log_bin_risks(flavor, grantees, others_visible)
