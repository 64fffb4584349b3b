"""The MySQL dedup store out of the binlog (consumer.dedup_mysql_log_bin: false), on the real
MariaDB: its rows never reach the binlog where the account may say so, and an account that may
not is stopped with the grant it needs."""

from __future__ import annotations

import secrets
import uuid

import pytest

from cachesync.consumer.adapters.mysql_dedup import MySQLDedupStore
from cachesync.runtime.mysql import MySQLParams
from cachesync.schema.errors import FatalError

pytestmark = pytest.mark.integration


def _params(stack, user: str, password: str) -> MySQLParams:
    env = stack.env
    return MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]), user,
                       password, database="cachesync")


def _cachesync_params(stack) -> MySQLParams:
    with open(stack.env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        return _params(stack, stack.env["CACHESYNC_MYSQL_USER"], f.read().strip())


@pytest.fixture
def binlog_admin(stack):
    """An account with the dedup store's grants plus BINLOG ADMIN (dropped afterwards)."""
    user, password = f"csnolog{uuid.uuid4().hex[:6]}", secrets.token_hex(12)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.* "
                    f"TO '{user}'@'127.0.0.1'")
        cur.execute(f"GRANT BINLOG ADMIN ON *.* TO '{user}'@'127.0.0.1'")
    yield _params(stack, user, password)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP USER '{user}'@'127.0.0.1'")


def _dedup_events_since(stack, start: tuple[str, int]) -> int:
    """Table map events of cachesync_dedup* in the binlog after ``start`` (file, position)."""
    found = 0
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall() if row[0] >= start[0]]
        for name in files:
            if name == start[0]:
                cur.execute(f"SHOW BINLOG EVENTS IN '{name}' FROM {start[1]}")
            else:
                cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
            found += sum(1 for row in cur.fetchall()
                         if row[2] == "Table_map" and "cachesync_dedup" in row[5])
    return found


def _position(stack) -> tuple[str, int]:
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


def _claim_and_confirm(params: MySQLParams, log_bin: bool) -> None:
    store = MySQLDedupStore(params, f"nolog-{uuid.uuid4().hex[:8]}", log_bin=log_bin)
    try:
        ids = [f"m{i}" for i in range(20)]
        token, states = store.claim(ids, lease_s=30)
        store.confirm(token, ids)
        assert store.counts() == {"claimed": 0, "done": 20}
    finally:
        store.close()


def test_with_log_bin_off_the_claims_and_confirms_never_reach_the_binlog(stack, binlog_admin):
    start = _position(stack)
    _claim_and_confirm(binlog_admin, log_bin=False)
    assert _dedup_events_since(stack, start) == 0
    # the same account with log_bin on (the default) writes them: the check above can see them
    _claim_and_confirm(binlog_admin, log_bin=True)
    assert _dedup_events_since(stack, start) > 0


def test_an_account_that_may_not_turn_the_binlog_off_is_stopped_naming_the_grant(stack):
    store = MySQLDedupStore(_cachesync_params(stack), f"nolog-{uuid.uuid4().hex[:8]}",
                            log_bin=False)
    try:
        with pytest.raises(FatalError, match="BINLOG ADMIN"):
            store.claim(["a"], lease_s=30)
    finally:
        store.close()
