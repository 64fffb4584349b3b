"""Start-up checks for the binlog tailer: server settings and privileges.

Each failed check says exactly which setting or grant is missing and how to fix it,
because "no events arrive" is the worst way to find out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


from cachesync.producer_outbox.binlog.settings import SETTING_NAMES, SettingReport, settings_report
from cachesync.schema.errors import FatalError

REQUIRED_VARIABLES = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
}
# Required of a server read through tailer.source_hosts (a replica, or one that may become
# one): without it a replica's binlog holds none of the primary's transactions, and the
# tailer would publish nothing for them.
REPLICA_VARIABLES = {"log_slave_updates": "ON"}
# MariaDB reports REPLICATION CLIENT as BINLOG MONITOR, REPLICATION SLAVE as REPLICATION REPLICA.
REQUIRED_PRIVILEGES = {
    "REPLICATION SLAVE": ("REPLICATION SLAVE", "REPLICATION REPLICA", "ALL PRIVILEGES"),
    "REPLICATION CLIENT": ("REPLICATION CLIENT", "BINLOG MONITOR", "ALL PRIVILEGES"),
}


@dataclass(frozen=True)
class ServerInfo:
    flavor: str          # "mariadb" | "mysql"
    server_id: int
    server_uuid: str | None
    variables: dict[str, str]
    grants: tuple[str, ...]

    @property
    def identity(self) -> str:
        """Stable server identity used in message ids."""
        return self.server_uuid or f"{self.flavor}:{self.server_id}"

    def binlog_settings(self) -> list[SettingReport]:
        """Each binlog-shaping setting of this server and what cachesync does about it."""
        return settings_report(self.flavor, self.variables)


def problems(info: ServerInfo, replica: bool = False) -> list[str]:
    """Every reason the tailer cannot run against this server (empty when all is well);
    ``replica``: the server is read as a (possible) replica, see REPLICA_VARIABLES."""
    out = []
    required = {**REQUIRED_VARIABLES, **(REPLICA_VARIABLES if replica else {})}
    for name, expected in required.items():
        actual = info.variables.get(name)
        if actual is None:
            out.append(f"server variable {name} is unknown to this server (need {expected}; "
                       f"MariaDB >= 10.5 or MySQL >= 8.0 required)")
        elif actual.upper() != expected:
            out.append(f"server variable {name}={actual}, need {name}={expected} "
                       f"(set it in my.cnf under [mysqld])")
    granted = global_privileges(info.grants)
    for privilege, spellings in REQUIRED_PRIVILEGES.items():
        if not granted.intersection(spellings):
            out.append(f"the cachesync user lacks {privilege}: "
                       f"GRANT {privilege} ON *.* TO <user>")
    return out


_GLOBAL_GRANT = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.IGNORECASE)


def global_privileges(grants: tuple[str, ...]) -> set[str]:
    """Privileges granted ON *.* (replication grants are global; db-level ones don't count)."""
    out: set[str] = set()
    for line in grants:
        match = _GLOBAL_GRANT.match(line)
        if match:
            out.update(p.strip().upper() for p in match.group(1).split(","))
    return out


def flavor_of(version: str) -> str:
    """"mariadb" or "mysql", from ``SELECT VERSION()``."""
    return "mariadb" if "mariadb" in version.lower() else "mysql"


def server_flavor(conn) -> str:
    """The flavor of the server of ``conn`` (one query)."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        return flavor_of(cur.fetchone()[0])


def read_server_info(conn) -> ServerInfo:
    """Query variables and grants over an open pymysql connection."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@server_id")
        version, server_id = cur.fetchone()
        flavor = flavor_of(version)
        uuid = None
        if flavor == "mysql":
            cur.execute("SELECT @@server_uuid")
            uuid = cur.fetchone()[0]
        names = ", ".join(f"'{n}'" for n in {**REQUIRED_VARIABLES, **REPLICA_VARIABLES,
                                             **dict.fromkeys(SETTING_NAMES)})
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        variables = {k.lower(): str(v) for k, v in cur.fetchall()}
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = tuple(row[0] for row in cur.fetchall())
    conn.commit()
    return ServerInfo(flavor, int(server_id), uuid, variables, grants)


def check_server(connect, replica: bool = False) -> ServerInfo:
    """Read the server's settings and this user's grants; raises FatalError listing every
    problem (``replica``: also REPLICA_VARIABLES). ``connect(database=None)``: no default
    database, so that a missing grant on the state database cannot mask the replication
    grants it is checking."""
    conn = connect(database=None)
    try:
        info = read_server_info(conn)
    finally:
        conn.close()
    found = problems(info, replica)
    if found:
        raise FatalError("the MySQL server is not ready for cachesync:\n  - " + "\n  - ".join(found))
    return info


