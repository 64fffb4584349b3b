"""The MySQL dedup store's compact layout: 16-byte time-ordered ids, windows dropped whole.

The classic layout (mysql_dedup.py) keys a record by its message id, a random hash: once
the table outgrows the buffer pool every claim reads and writes a random cold page, and the
purge deletes every row again (each delete in the binlog). Here a record's key starts with
the message's commit time, so new records go to the right edge of the index and a copy of
an old message finds its record by primary key; the table is partitioned by windows of that
time and the purge drops a window with one ``ALTER TABLE ... DROP PARTITION``.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections import OrderedDict
from typing import Mapping, Sequence

import pymysql

from cachesync.runtime.grants import missing
from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.ports import chunks
from cachesync.runtime.mysql import MySQLParams, Session, execute_script
from cachesync.schema import resource_text
from cachesync.schema.errors import FatalError

TABLE = "cachesync_dedup_compact"
DONE_TABLE = "cachesync_dedup_compact_done"
CLAIM_CHUNK = 1000              # ids per statement, as in the classic layout
HELD_MAX = 16                   # claims remembered until their confirm
WINDOWS_AHEAD = 3               # windows kept created past the current one
NS_MAX = 64                     # ns VARBINARY(64); a longer namespace is stored as its hash
TIME_BYTES = 6                  # milliseconds since the epoch, big-endian: until year 10889
HASH_BYTES = 10
MAX_PARTITION = "pmax"
# What partition maintenance needs on the state database, beyond the classic layout's grants.
COMPACT_GRANT = "ALTER, DROP"
_NO_PRIVILEGE = (1142, 1227, 1044)   # ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED, ER_DBACCESS


def commit_ms(commit_ts: float | None) -> int:
    """The commit time in ms as the key stores it; 0 for a time that is missing or not a
    time (such records sort first and go with the oldest window)."""
    if commit_ts is None or not math.isfinite(commit_ts) or commit_ts <= 0:
        return 0
    return min(int(commit_ts * 1000), (1 << (8 * TIME_BYTES)) - 1)


def record_id(msg_id: str, commit_ts: float | None) -> bytes:
    """The record's 16-byte key: commit time (ms), then the message id's hash."""
    digest = hashlib.blake2b(msg_id.encode("utf-8", "surrogatepass"), digest_size=HASH_BYTES)
    return commit_ms(commit_ts).to_bytes(TIME_BYTES, "big") + digest.digest()


def new_token(floor_ms: int, now_ms: int | None = None) -> bytes:
    """A claim token: max(now, ``floor_ms``) in ms, then random bytes."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return max(now_ms, floor_ms).to_bytes(TIME_BYTES, "big") + os.urandom(16 - TIME_BYTES)


def namespace_bytes(namespace: str) -> bytes:
    raw = namespace.encode("utf-8", "surrogatepass")
    return raw if len(raw) <= NS_MAX else b"#" + hashlib.blake2b(raw, digest_size=31).digest()


# -- windows (pure) --------------------------------------------------------------------------

def partition_name(end_s: int) -> str:
    """The window ending at ``end_s`` (exclusive, seconds since the epoch)."""
    return f"w{end_s}"


def window_end(name: str) -> int | None:
    """The end of a window partition named by ``partition_name``; None for any other."""
    return int(name[1:]) if name.startswith("w") and name[1:].isdigit() else None


def boundary(end_s: int) -> str:
    """The RANGE COLUMNS bound of the window ending at ``end_s``: keys before that time."""
    return f"0x{end_s * 1000:0{2 * TIME_BYTES}x}{'00' * (16 - TIME_BYTES)}"


def partition_clause(end_s: int) -> str:
    return f"PARTITION {partition_name(end_s)} VALUES LESS THAN ({boundary(end_s)})"


def windows_to_add(ends: Sequence[int], now_s: float, window_s: int,
                   retention_s: float) -> list[int]:
    """Window ends to create so that the current window and WINDOWS_AHEAD more exist;
    none older than the retention (after a long stop the first new one spans the gap)."""
    first = (int(max(now_s - retention_s, 0)) // window_s + 1) * window_s
    last = (int(now_s) // window_s + 1 + WINDOWS_AHEAD) * window_s
    newest = max(ends, default=0)
    return [e for e in range(first, last + 1, window_s) if e > newest]


def windows_to_drop(ends: Sequence[int], now_s: float, retention_s: float) -> list[int]:
    """The windows whose every commit time is past the retention."""
    return [e for e in sorted(ends) if e <= now_s - retention_s]


def _check_grants(conn) -> None:
    """Stop at start, not at the first purge, when the account may not drop or add windows."""
    with conn.cursor() as cur:
        cur.execute("SELECT DATABASE()")
        db = cur.fetchone()[0]
        cur.execute("SHOW GRANTS")
        lines = [row[0] for row in cur.fetchall()]
    lacking = missing(lines, db, COMPACT_GRANT.split(", "))
    if lacking:
        raise FatalError(f"consumer.dedup_mysql_layout is compact: the account needs "
                         f"{', '.join(lacking)} on `{db}` to drop and add its time windows "
                         f"(GRANT {COMPACT_GRANT} ON `{db}`.* TO ...), or use the rows layout")


class CompactMySQLDedupStore:
    """Dedup records in ``cachesync_dedup_compact``, partitioned by commit-time windows.

    Same contract as MySQLDedupStore: new ids are inserted as claimed under a new token
    (one autocommitted INSERT IGNORE when all are new); a batch with known ids takes over
    expired claims and reads whose the others are; the confirm of a whole claim is one
    done row for its token. A record lives until its commit time's window is dropped:
    the retention counts from the commit, not from the confirm.
    """

    def __init__(self, params: MySQLParams, namespace: str, window_s: float = 3600.0,
                 log_bin: bool = True):
        self._window_s = max(1, int(window_s))
        self._log_bin = log_bin
        self._session = Session(params.connect, setup=self._setup, autocommit=True)
        self._ns = namespace_bytes(namespace)
        # token -> {id: record key} of the ids the claim owns: what its confirm needs
        self._held: OrderedDict[bytes, dict[str, bytes]] = OrderedDict()
        self._failed: tuple[tuple[str, ...], bytes] | None = None

    # -- setup -----------------------------------------------------------------------------

    def _setup(self, conn) -> None:
        if not self._log_bin:
            from cachesync.consumer.adapters.mysql_dedup import unlog_session
            unlog_session(conn)
        now = time.time()
        ends = windows_to_add((), now, self._window_s, 0)
        parts = ", ".join([partition_clause(e) for e in ends]
                          + [f"PARTITION {MAX_PARTITION} VALUES LESS THAN (MAXVALUE)"])
        execute_script(conn, resource_text("sql/dedup_compact.sql").replace("{partitions}", parts))
        _check_grants(conn)

    # -- claim / confirm -------------------------------------------------------------------

    def claim(self, ids: Sequence[str], lease_s: float,
              commit_ts: Mapping[str, float] | None = None
              ) -> tuple[bytes, Mapping[str, ClaimState]]:
        """Claim ``ids`` (``commit_ts``: each one's commit time; ids without one are kept
        as time 0, with the oldest window); raises RetryableError / FatalError."""
        times = commit_ts or {}
        unique = list(dict.fromkeys(ids))
        keys = {i: record_id(i, times.get(i)) for i in unique}
        failed, self._failed = self._failed, None
        if failed is not None and failed[0] == tuple(ids):
            token = failed[1]       # a retry owns the rows its failed attempt committed
        else:
            token = new_token(max((commit_ms(times.get(i)) for i in unique), default=0))
        parts = list(chunks(unique, CLAIM_CHUNK))
        try:
            all_new = self._session.run_each(
                lambda cur: [self._insert(cur, token, [keys[i] for i in p], lease_s)
                             for p in parts])
            states: dict[str, ClaimState] = {}
            for part, new in zip(parts, all_new):
                states.update(dict.fromkeys(part, ClaimState.OWNED) if new else self._session.run(
                    lambda cur, p=part: self._take_over(cur, token, p, keys, lease_s)))
        except Exception:
            self._failed = (tuple(ids), token)
            raise
        owned = {i: keys[i] for i, s in states.items() if s is ClaimState.OWNED}
        if owned:
            self._held[token] = owned
            while len(self._held) > HELD_MAX:
                self._held.popitem(last=False)
        return token, states

    def _insert(self, cur, token: bytes, keys: Sequence[bytes], lease_s: float) -> bool:
        """Insert the records that do not exist; whether every one was new."""
        until = f"NOW(6) + INTERVAL {int(lease_s * 1_000_000)} MICROSECOND"
        rows = ", ".join([f"(%s, %s, %s, {until})"] * len(keys))
        args = [v for k in keys for v in (self._ns, k, token)]
        return cur.execute(f"INSERT IGNORE INTO {TABLE} (ns, id, claim_token, claimed_until) "
                           f"VALUES {rows}", args) == len(keys)

    def _take_over(self, cur, token: bytes, part: Sequence[str], keys: Mapping[str, bytes],
                   lease_s: float) -> dict[str, ClaimState]:
        """Take over the expired, unconfirmed claims among ``part``; whose each one is."""
        wanted = [keys[i] for i in part]
        marks = ", ".join(["%s"] * len(wanted))
        joined = (f"{TABLE} d LEFT JOIN {DONE_TABLE} c "
                  "ON c.ns = d.ns AND c.claim_token = d.claim_token")
        cur.execute(f"UPDATE {joined} SET d.claim_token = %s, "
                    f"d.claimed_until = NOW(6) + INTERVAL {int(lease_s * 1_000_000)} MICROSECOND "
                    f"WHERE d.ns = %s AND d.id IN ({marks}) AND d.claimed_until < NOW(6) "
                    "AND c.claim_token IS NULL", [token, self._ns, *wanted])
        # a locking read: a plain one sees the snapshot, where a row another consumer added
        # since is missing and would pass for ours
        cur.execute(f"SELECT d.id, c.claim_token IS NOT NULL FROM {joined} WHERE d.ns = %s "
                    f"AND d.id IN ({marks}) AND d.claim_token <> %s LOCK IN SHARE MODE",
                    [self._ns, *wanted, token])
        by_key = {keys[i]: i for i in part}
        out = dict.fromkeys(part, ClaimState.OWNED)
        for key, done in cur.fetchall():
            out[by_key[bytes(key)]] = ClaimState.DONE if done else ClaimState.BUSY
        return out

    def confirm(self, token, ids: Sequence[str]) -> None:
        """Mark ids claimed under ``token`` done: all the claim owns, one done row; some of
        them, those rows move to a new token that is confirmed. Raises RetryableError /
        FatalError."""
        if not isinstance(token, bytes) or len(token) != 16:
            return                  # not a token this layout hands out: nothing is its
        insert_done = f"INSERT IGNORE INTO {DONE_TABLE} (ns, claim_token) VALUES (%s, %s)"
        held = self._held.get(token, {})
        if held and held.keys() == set(ids):
            self._session.run_each(lambda cur: cur.execute(insert_done, [self._ns, token]))
            del self._held[token]
            return
        # an id this store's claims did not hand out under ``token`` is nobody's to confirm
        keys = [held[i] for i in ids if i in held]
        if not keys:
            return
        done = new_token(int.from_bytes(token[:TIME_BYTES], "big"))

        def work(cur):
            cur.execute(insert_done, [self._ns, done])
            for part in chunks(keys, CLAIM_CHUNK):
                marks = ", ".join(["%s"] * len(part))
                cur.execute(f"UPDATE {TABLE} SET claim_token = %s WHERE ns = %s AND "
                            f"claim_token = %s AND id IN ({marks})", [done, self._ns, token, *part])
        self._session.run(work)

    # -- windows ---------------------------------------------------------------------------

    def purge(self, retention_s: float, limit: int) -> int:
        """Drop the windows past the retention and create the next ones; returns about how
        many records went (the server's row estimate: counting would read them). ``limit``
        does not apply: a window goes whole, at the cost of one DDL statement."""
        now = time.time()

        def work(cur):
            # DDL commits on its own: no transaction around it
            dropped = self._maintain(cur, TABLE, now, retention_s)
            self._maintain(cur, DONE_TABLE, now, retention_s)    # claims: not records
            return dropped
        return self._session.run_each(work)

    def _maintain(self, cur, table: str, now: float, retention_s: float) -> int:
        cur.execute("SELECT PARTITION_NAME, TABLE_ROWS FROM information_schema.PARTITIONS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", [table])
        rows = {name: int(n or 0) for name, n in cur.fetchall()}
        ends = [e for e in map(window_end, rows) if e is not None]
        add = windows_to_add(ends, now, self._window_s, retention_s)
        drop = windows_to_drop(ends, now, retention_s)
        try:
            if add:
                parts = ", ".join([partition_clause(e) for e in add]
                                  + [f"PARTITION {MAX_PARTITION} VALUES LESS THAN (MAXVALUE)"])
                cur.execute(f"ALTER TABLE {table} REORGANIZE PARTITION {MAX_PARTITION} "
                            f"INTO ({parts})")
            if drop:
                names = ", ".join(partition_name(e) for e in drop)
                cur.execute(f"ALTER TABLE {table} DROP PARTITION {names}")
        except pymysql.err.OperationalError as e:
            if e.args and e.args[0] in _NO_PRIVILEGE:
                raise FatalError(f"the compact dedup layout drops and adds partitions of "
                                 f"{table}: the account needs {COMPACT_GRANT} on the state "
                                 f"database: {e.args[-1]}") from e
            raise
        return sum(rows[partition_name(e)] for e in drop)

    def counts(self) -> dict[str, int]:
        """This namespace's records by status."""
        def work(cur):
            cur.execute(f"SELECT c.claim_token IS NOT NULL, COUNT(*) FROM {TABLE} d "
                        f"LEFT JOIN {DONE_TABLE} c ON c.ns = d.ns AND c.claim_token = "
                        "d.claim_token WHERE d.ns = %s GROUP BY 1", [self._ns])
            return cur.fetchall()
        found = {"claimed": 0, "done": 0}
        for done, n in self._session.run(work):
            found["done" if done else "claimed"] += int(n)
        return found

    def close(self) -> None:
        self._session.close()
