"""MySQL connection helpers shared by the tailer, the checkpoint store and the dedup store."""

from __future__ import annotations

from dataclasses import dataclass, field

import pymysql

from schema import resource_text
from schema.errors import FatalError, RetryableError

# Client-side error codes that mean "the server went away / is unreachable".
_TRANSIENT_CODES = {2002, 2003, 2006, 2013, 2055, 1205, 1213, 1040, 1053}
# Access denied, unknown database, no privilege: configuration, not weather.
_FATAL_CODES = {1044, 1045, 1049, 1142, 1143, 1227, 1370}


@dataclass(frozen=True)
class MySQLParams:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str | None = None
    connect_timeout: float = 5.0

    def connect(self, **overrides) -> pymysql.connections.Connection:
        """Open a connection; raises RetryableError or FatalError, never a bare pymysql error."""
        kwargs = dict(host=self.host, port=self.port, user=self.user, password=self.password,
                      database=self.database, connect_timeout=self.connect_timeout,
                      autocommit=False, charset="utf8mb4")
        kwargs.update(overrides)
        try:
            return pymysql.connect(**kwargs)
        except pymysql.err.MySQLError as e:
            raise classify(e) from e


def classify(error: pymysql.err.MySQLError) -> Exception:
    """Map a pymysql error to RetryableError / FatalError (others are returned unchanged)."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    if code in _FATAL_CODES:
        return FatalError(f"MySQL refused: {error.args[1] if len(error.args) > 1 else error}")
    if code in _TRANSIENT_CODES or isinstance(error, pymysql.err.OperationalError):
        return RetryableError(f"MySQL unavailable: {error}")
    return error


def ensure_state_tables(conn: pymysql.connections.Connection) -> None:
    """Create cachesync's own tables if missing (idempotent)."""
    with conn.cursor() as cur:
        for statement in _statements(resource_text("sql/cachesync.sql")):
            cur.execute(statement)
    conn.commit()


def _statements(sql: str) -> list[str]:
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
