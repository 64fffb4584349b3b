"""Two clusters into one topic: the main MariaDB and the ``mariadb-twin`` variant, both on GTID
domain 0 and server id 1, each write a transaction with the same GTID (0-1-N). Two tailers,
one per cluster (``source.id`` east and west), publish into one topic consumed by one engine:
both changes are applied, neither is dropped as the other's duplicate."""

from __future__ import annotations

import dataclasses

import pymysql
import pytest

from tests.support import spawn, wait_for
from tests.support.variants import secret, start

pytestmark = pytest.mark.integration

USERS_DDL = "CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL)"
TABLES = {"users": {"keys": ["user:{id}"]}}


def twin_admin(env: dict[str, str], database=None):
    return pymysql.connect(host=env["DEVSTACK_MYSQL_TWIN_HOST"],
                           port=int(env["DEVSTACK_MYSQL_TWIN_PORT"]),
                           user=env["DEVSTACK_MYSQL_ADMIN_USER"],
                           password=secret(env, "DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"),
                           database=database, autocommit=True)


def seq_no(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT @@gtid_domain_id, @@server_id, @@gtid_binlog_pos")
        domain, server, pos = cur.fetchone()
    assert (domain, server) == (0, 1)
    mine = [p for p in (pos or "").split(",") if p.startswith("0-")]
    return int(mine[0].rsplit("-", 1)[1]) if mine else 0


def write_with_gtid(conn, seq: int, statement: str) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION gtid_seq_no = %s", (seq,))
        cur.execute(statement)


@pytest.fixture
def twin(lab):
    env = start("mariadb-twin")
    conn = twin_admin(env)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {lab.db}")
        cur.execute(f"CREATE DATABASE {lab.db}")
        cur.execute(f"GRANT SELECT ON {lab.db}.* TO cachesync@'127.0.0.1'")
        cur.execute(f"USE {lab.db}")
        cur.execute(USERS_DDL)
        cur.execute("INSERT INTO users VALUES (1, 'a'), (2, 'b')")
    yield env, conn
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {lab.db}")
    conn.close()


def start_west(lab, env) -> None:
    """The second tailer: reads the twin (tailer.source_hosts), keeps its state on the main."""
    name = f"tailer-{lab.suffix}-west"
    cfg = lab.write_config(TABLES, name="west.yaml", tailer={
        "name": name, "server_id": 90000 + int(lab.suffix[4:8], 16) % 9000 + 1,
        "source_hosts": f"127.0.0.1:{env['DEVSTACK_MYSQL_TWIN_PORT']}"})
    proc = spawn(lab, cfg, "tail", env={"CACHESYNC_SOURCE_ID": "west"})

    def stored():
        assert proc.poll() is None, lab.log(proc)
        return lab.sql("SELECT 1 FROM cachesync.cachesync_checkpoint WHERE name = %s", (name,))
    wait_for(stored, 60, what=f"the west tailer's start checkpoint:\n{lab.log(proc)}")


def test_equal_gtids_of_two_clusters_are_both_applied(lab, twin, monkeypatch):
    env, twin_conn = twin
    lab.sql(USERS_DDL)
    lab.sql("INSERT INTO users VALUES (1, 'a'), (2, 'b')")
    east = lab.write_config(TABLES)
    monkeypatch.setattr(lab, "stack", dataclasses.replace(
        lab.stack, env={**lab.stack.env, "CACHESYNC_SOURCE_ID": "east"}))
    lab.start_tailer(east)
    start_west(lab, env)
    engine = lab.start_engine(east)
    lab.cache("user:1", "user:2")

    with lab.stack.admin(lab.db) as main_conn:
        seq = max(seq_no(main_conn), seq_no(twin_conn)) + 10
        write_with_gtid(main_conn, seq, "UPDATE users SET email = 'east' WHERE id = 1")
    twin_conn.select_db(lab.db)
    write_with_gtid(twin_conn, seq, "UPDATE users SET email = 'west' WHERE id = 2")

    wait_for(lambda: not lab.cached("user:1", "user:2"),
             what="both clusters' updates applied (one would be taken for the other's duplicate)")
    updates = [d.event for d in lab.topic_events() if d.event.op == "update"]
    assert sorted((e.source.position, e.pk) for e in updates) == [
        (f"0-1-{seq}", (("id", 1),)), (f"0-1-{seq}", (("id", 2),))]
    assert len({e.id for e in updates}) == 2
    assert engine.stats.duplicates == 0
