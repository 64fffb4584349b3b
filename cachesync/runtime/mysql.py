"""MySQL connection helpers shared by the tailer, the checkpoint store and the dedup store."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Callable

import pymysql

from cachesync.runtime.library_adapter import TlsContextConnection
from cachesync.schema import resource_text
from cachesync.schema.errors import FatalError, RetryableError

# Client-side error codes that mean "the server went away / is unreachable".
_TRANSIENT_CODES = {2002, 2003, 2006, 2013, 2055, 1205, 1213, 1040, 1053}
# Access denied, unknown database, no privilege: configuration, not weather.
_FATAL_CODES = {1044, 1045, 1049, 1142, 1143, 1227, 1370}


class _Connection(TlsContextConnection):
    """pymysql's connection, with one TLS context per process for its PREFERRED mode.

    Given no TLS option, pymysql (1.1 on) still tries TLS when the server offers it, without
    verifying the certificate, and builds a new SSLContext for that on every connection,
    which loads the system's CA bundle it then does not use: 25-40 ms of CPU per connection,
    more than the connection itself, and a tailer's start opens about ten. The context is
    built as pymysql builds it, once. A connection with TLS options (mysql.ssl_*) builds its
    own.
    """

    _preferred: ssl.SSLContext | None = None

    def ssl_context(self, sslp):
        if sslp != {}:
            return super().ssl_context(sslp)
        if _Connection._preferred is None:       # a race builds two equal contexts: harmless
            _Connection._preferred = super().ssl_context(sslp)
        return _Connection._preferred


@dataclass(frozen=True)
class MySQLParams:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str | None = None
    connect_timeout: float = 5.0
    # pymysql's TLS arguments (tls_options); empty: the driver's default, unverified TLS
    # when the server offers it, else plain text
    tls: tuple[tuple[str, object], ...] = ()

    def client_options(self) -> dict:
        """pymysql keyword arguments for the account and TLS (also the binlog stream's)."""
        return dict(host=self.host, port=self.port, user=self.user, password=self.password,
                    **dict(self.tls))

    def connect(self, **overrides) -> pymysql.connections.Connection:
        """Open a connection; raises RetryableError or FatalError, never a bare pymysql error."""
        kwargs = dict(self.client_options(), database=self.database,
                      connect_timeout=self.connect_timeout, autocommit=False, charset="utf8mb4")
        kwargs.update(overrides)
        try:
            return _Connection(**kwargs)
        except pymysql.err.MySQLError as e:
            raise classify(e) from e


def classify(error: pymysql.err.MySQLError) -> Exception:
    """Map a pymysql error to RetryableError / FatalError (others are returned unchanged)."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    if isinstance(getattr(error, "original_exception", None), ssl.SSLCertVerificationError):
        # a CA or host name that does not match stays wrong: retrying cannot fix it
        return FatalError(f"MySQL's TLS certificate failed verification (mysql.ssl_ca, "
                          f"mysql.ssl_verify_identity): {error.original_exception}")
    if code in _FATAL_CODES:
        return FatalError(f"MySQL refused: {error.args[1] if len(error.args) > 1 else error}")
    if code in _TRANSIENT_CODES or isinstance(error, pymysql.err.OperationalError):
        return RetryableError(f"MySQL unavailable: {error}")
    return error


def ensure_state_tables(conn: pymysql.connections.Connection) -> None:
    """Create cachesync's own tables if missing (idempotent)."""
    execute_script(conn, resource_text("sql/cachesync.sql"))


def execute_script(conn: pymysql.connections.Connection, sql: str) -> None:
    """Run a ``;``-separated SQL file (``--`` comment lines allowed) and commit."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    with conn.cursor() as cur:
        for statement in "\n".join(lines).split(";"):
            if statement.strip():
                cur.execute(statement)
    conn.commit()


class Session:
    """One lazily opened connection that runs units of work.

    ``run(work)`` calls ``work(cursor)`` in one transaction, commits and returns its
    result. Any MySQL error drops the connection (the next call reconnects) and is raised
    as RetryableError or FatalError. ``setup(conn)`` runs once per new connection.

    ``autocommit``: the connection commits each statement on its own, and ``run`` opens
    its transaction with BEGIN; ``run_each(work)`` then runs work's statements without
    one, each committed as it returns: a unit of one statement costs one round trip
    instead of two (statement, COMMIT).
    """

    def __init__(self, connect: Callable[..., pymysql.connections.Connection],
                 setup: Callable[[pymysql.connections.Connection], None] | None = None,
                 autocommit: bool = False):
        self._connect = connect
        self._setup = setup
        self._autocommit = autocommit
        self._conn: pymysql.connections.Connection | None = None

    def run(self, work):
        return self._run(work, transaction=True)

    def run_each(self, work):
        """``work(cursor)`` with each statement its own transaction (``autocommit``; without
        it, the same as ``run``)."""
        return self._run(work, transaction=not self._autocommit)

    def _run(self, work, transaction: bool):
        try:
            conn = self._connection()
            if transaction and self._autocommit:
                conn.begin()
            with conn.cursor() as cur:
                result = work(cur)
            if transaction:
                conn.commit()
            return result
        except pymysql.err.MySQLError as e:
            self.close()
            raise classify(e) from e
        except BaseException:
            self.close()       # nothing half done stays open on the connection
            raise

    def _connection(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            conn = self._connect(autocommit=True) if self._autocommit else self._connect()
            if self._setup is not None:
                try:
                    self._setup(conn)
                except BaseException:
                    close_quietly(conn)     # e.g. a failed grant check: not kept, not leaked
                    raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        close_quietly(self._conn)
        self._conn = None


def close_quietly(conn: pymysql.connections.Connection | None) -> None:
    """Close ``conn`` if there is one; a broken connection has nothing left to release."""
    if conn is not None:
        try:
            conn.close()
        except pymysql.err.Error:
            pass


_ER_PARSE_ERROR = 1064


def binlog_status(cur):
    """(file, position, do_db, ignore_db, ...) of the server's binlog: SHOW BINARY LOG STATUS
    (MySQL >= 8.2; 8.4 removed SHOW MASTER STATUS), else SHOW MASTER STATUS (MariaDB, older
    MySQL)."""
    try:
        cur.execute("SHOW BINARY LOG STATUS")
    except pymysql.err.ProgrammingError as e:
        if not e.args or e.args[0] != _ER_PARSE_ERROR:
            raise
        cur.execute("SHOW MASTER STATUS")
    return cur.fetchone()
