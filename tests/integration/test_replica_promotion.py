"""MariaDB failover on the real pair: the tailer reads the replica (tailer.source_hosts) while
its state is on the primary; the primary is lost, the replica promoted, and the tailer
restarted against the new primary resumes from its GTID checkpoint.

Writes go on through the whole fault (to the primary, then, after the promotion, to the new
one). At the end every row of the new primary is in Redis as update mode renders it (and no
other key is), no transaction was published under two ids, and a value written after the
promotion replaced the one cached before it (its fenced write was not refused).
The timings belong to the failover benchmark (bench/failover.py).
"""

from __future__ import annotations

import json
import threading

import pymysql
import pytest

from cachesync.schema.event import decode
from cachesync.schema.gtid import parse_gtid
from cachesync.schema.keys import version_key
from tests.support import spawn, stack_command, wait_for
from tests.support.variants import secret, start

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"], "mode": "update"}}


class Server:
    """The admin account on one server of the pair (the primary, or the replica by port)."""

    def __init__(self, env: dict[str, str], port: int):
        self._env, self.port = env, port

    def connect(self, db: str | None = None, autocommit: bool = True):
        return pymysql.connect(host="127.0.0.1", port=self.port, database=db,
                               user=self._env["DEVSTACK_MYSQL_ADMIN_USER"],
                               password=secret(self._env, "DEVSTACK_MYSQL_ADMIN_PASSWORD_FILE"),
                               autocommit=autocommit, connect_timeout=2)

    def query(self, statement: str, params=(), db: str | None = None):
        with self.connect(db) as conn, conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall()


class FailoverWriter(threading.Thread):
    """Inserts a row and updates an earlier one per transaction, on ``target`` (switched by the
    test); a lost connection is retried on whatever ``target`` is then. ``committed`` counts
    the transactions whose commit returned."""

    def __init__(self, db: str, target: Server):
        super().__init__(daemon=True)
        self.db, self.target = db, target
        self.committed = 0
        self._stop_writing = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._stop_writing.is_set():
            try:
                with self.target.connect(self.db, autocommit=False) as conn:
                    while not self._stop_writing.is_set():
                        with conn.cursor() as cur:
                            cur.execute("INSERT INTO users VALUES (%s, %s)", (n, f"v{n}"))
                            cur.execute("UPDATE users SET name = %s WHERE id = %s",
                                        (f"v{n}-again", n // 2))
                        conn.commit()
                        self.committed += 1
                        n += 1
            except pymysql.err.MySQLError:
                n += 1                      # the id may have committed: never reuse it
                self._stop_writing.wait(0.05)   # the server is down: retry on the next target

    def stop(self) -> None:
        self._stop_writing.set()
        self.join(30)


def cached(lab) -> dict[str, dict]:
    keys = sorted(k.decode() for k in lab.redis.scan_iter(match=f"{lab.prefix}user:*", count=1000))
    return {k: json.loads(v) for k, v in zip(keys, lab.redis.mget(keys)) if v is not None}


def rows(server: Server, lab) -> dict[str, dict]:
    return {f"{lab.prefix}user:{i}": {"id": i, "name": name}
            for i, name in server.query("SELECT id, name FROM users", db=lab.db)}


def domain_seq(server: Server) -> int:
    """The newest sequence number of GTID domain 0 in the server's binlog."""
    (pos,), = server.query("SELECT @@gtid_binlog_pos")
    return next(parse_gtid(g).ordinal for g in pos.split(",") if g.startswith("0-"))


@pytest.fixture
def pair(lab):
    """(lab, primary, replica), the replica following the primary; the primary is started
    again afterwards (the test stops it), the promoted replica rebuilt by the next `up`."""
    env = start("mariadb-replica")
    primary = Server(env, int(env["CACHESYNC_MYSQL_PORT"]))
    replica = Server(env, int(env["DEVSTACK_MYSQL_REPLICA_PORT"]))
    try:
        yield lab, primary, replica
    finally:
        stack_command("up", "mariadb")
        # `up` resets the cachesync account's grants; lab.close() revokes the lab's one
        lab.sql(f"GRANT SELECT ON {lab.db}.* TO cachesync@'127.0.0.1'")


def test_the_tailer_reads_the_replica_and_resumes_on_the_promoted_replica(pair):
    lab, primary, replica = pair
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
    wait_for(lambda: replica.query("SHOW TABLES FROM " + lab.db), 60,
             what="the table on the replica")
    cfg = lab.write_config(USERS, tailer={"source_hosts": f"127.0.0.1:{replica.port}"},
                           consumer={"dedup_store": "redis"})      # the consumer outlives the primary
    reading_replica = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    writer = FailoverWriter(lab.db, primary)
    writer.start()
    try:
        wait_for(lambda: len(cached(lab)) > 300, 60, what="rows cached through the replica")
        before = cached(lab)
        key = next(iter(before))
        old_version = lab.redis.get(version_key(key))
        seq_before = domain_seq(replica)

        stack_command("down", "mariadb")                    # the primary is lost
        stack_command("promote", "mariadb-replica")
        writer.target = replica
        lab.kill9(reading_replica)
        # restarted with the new primary as mysql.host and as the source
        tailer = spawn(lab, cfg, "tail", env={"CACHESYNC_MYSQL_PORT": str(replica.port),
                                              "CACHESYNC_TAILER_SOURCE_HOSTS": ""})
        mark = writer.committed
        wait_for(lambda: writer.committed > mark + 300, 60, what="writes on the new primary")
        row_id = before[key]["id"]
        replica.query("UPDATE users SET name = 'after promotion' WHERE id = %s", (row_id,),
                      db=lab.db)
        wait_for(lambda: (cached(lab).get(key) or {}).get("name") == "after promotion", 60,
                 what="the value written after the promotion in Redis")
    finally:
        writer.stop()

    # MariaDB continued the domain's sequence: versions after the promotion are newer
    assert domain_seq(replica) > seq_before
    assert lab.redis.get(version_key(key)) > old_version
    # every row of the new primary cached as it is there, and nothing else
    truth = rows(replica, lab)
    wait_for(lambda: cached(lab) == truth, 120, interval=0.5,
             what="Redis to hold exactly the new primary's rows")

    # the Redis dedup store outlived the primary: what the restarted tailer published again
    # (the same ids) was skipped, every change applied once. A re-publish to one partition
    # can still be in flight when the others show every row: the tailer stops (it drains)
    tailer.terminate()
    assert tailer.wait(60) == 0, lab.log(tailer)[-5000:]
    events = lab.settled_records(engine)
    distinct = {d.event.id for d in events}
    assert engine.stats.applied == len(distinct)
    assert engine.stats.duplicates == len(events) - len(distinct)

    ids: dict[tuple[str, int], set[str]] = {}
    records = lab.topic_events()
    for record in records:
        event = decode(record.value)
        ids.setdefault((event.source.position, event.source.row_index), set()).add(event.id)
    assert all(len(found) == 1 for found in ids.values()), "a change published under two ids"
    by_origin: dict[int, list[int]] = {}
    for position, _ in ids:
        gtid = parse_gtid(position)
        by_origin.setdefault(gtid.server_id, []).append(gtid.ordinal)
    assert set(by_origin) == {1, 2}, "published the primary's transactions and the new primary's"
    # the new primary (server 2) continued domain 0's numbering after the old one's
    assert max(by_origin[1]) < min(by_origin[2])
    print(f"{len(records)} records for {len(ids)} row changes, {writer.committed} transactions "
          f"committed; domain 0 seq_no {seq_before} before the promotion, "
          f"{domain_seq(replica)} at the end")
