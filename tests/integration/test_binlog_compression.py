"""MariaDB's compressed binlog (log_bin_compress=ON) read by `cachesync tail`, on both readers.

log_bin_compress is a global dynamic variable: the test turns it on (with the smallest
log_bin_compress_min_len, so that short events are compressed too) and restores both
values after. The binlog is checked to really hold the compressed event types, then an
UPDATE's old and new keys must be invalidated and a compressed TRUNCATE must empty the table.
"""

from __future__ import annotations

import pytest

from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}


@pytest.fixture
def compressing(stack):
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.log_bin_compress, @@GLOBAL.log_bin_compress_min_len")
        before = cur.fetchone()
        cur.execute("SET GLOBAL log_bin_compress = ON, GLOBAL log_bin_compress_min_len = 10")
    try:
        yield
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress = %s, GLOBAL log_bin_compress_min_len = %s",
                        before)


def binlog_position(lab):
    return lab.sql("SHOW MASTER STATUS")[0][:2]


def events_since(lab, start) -> list[tuple[str, str]]:
    """(event type, info) of the binlog from ``start`` on, as the server describes them."""
    rows = lab.sql(f"SHOW BINLOG EVENTS IN '{start[0]}' FROM {int(start[1])}")
    return [(row[2], str(row[5])) for row in rows]


def wait_gone(lab, *keys: str) -> None:
    wait_for(lambda: not lab.cached(*keys), 60, interval=0.2, what=f"keys {keys} invalidated")


@pytest.mark.parametrize("reader", ["fast", "library"])
def test_compressed_row_and_query_events_are_decoded(compressing, lab, reader):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(64))")
    lab.sql("INSERT INTO users VALUES (1, 'old@example.com'), (2, 'two@example.com')")
    cfg = lab.write_config(USERS, tailer={"reader": reader})
    tailer = lab.start_tailer(cfg)
    lab.start_engine(cfg)
    [settings] = [line for line in lab.log(tailer).splitlines() if "binlog settings: " in line]
    assert "log_bin_compress=ON" in settings and "binlog setting " not in lab.log(tailer)
    start = binlog_position(lab)
    lab.cache("user:1", "user:email:old@example.com", "user:email:new@example.com")
    lab.sql("UPDATE users SET email = 'new@example.com' WHERE id = 1")
    wait_gone(lab, "user:1", "user:email:old@example.com", "user:email:new@example.com")

    lab.cache("user:2", "user:email:two@example.com")
    lab.sql("TRUNCATE TABLE users")
    wait_gone(lab, "user:2", "user:email:two@example.com")
    seen = events_since(lab, start)
    assert any(kind.startswith("Update_rows_compressed") for kind, _ in seen), seen
    assert ("Query_compressed", f"use `{lab.db}`; TRUNCATE TABLE users") in seen, seen
