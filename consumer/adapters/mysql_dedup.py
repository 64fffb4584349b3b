"""The dedup table in MySQL: batched claims with a lease, confirmed after the cache is updated."""

from __future__ import annotations

import datetime
import uuid
from collections import OrderedDict
from typing import Mapping, Sequence

import pymysql

from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.ports import chunks
from cachesync.runtime.mysql import MySQLParams, Session, ensure_state_tables
from cachesync.schema.errors import FatalError

# Bounds the size of one statement; a batch of N ids costs ceil(N / this) round trips.
CLAIM_CHUNK = 1000
MSG_ID_MAX = 64                 # cachesync_dedup.msg_id VARCHAR(64) CHARACTER SET ascii
ACCESS_DENIED = (1227,)     # ER_SPECIFIC_ACCESS_DENIED_ERROR: "you need ... privilege(s)"
HELD_MAX = 16                   # claims remembered until their confirm (one per batch in flight)

def _joined(q: str = "") -> str:
    """An id row and its claim's confirmation, if any; ``q`` qualifies the tables."""
    return (f"{q}cachesync_dedup d LEFT JOIN {q}cachesync_dedup_done c "
            "ON c.ns = d.ns AND c.claim_token = d.claim_token")


_JOINED = _joined()
_IS_DONE = "(d.status = 'done' OR c.claim_token IS NOT NULL)"


def _fits(msg_id: str) -> bool:
    """Whether the msg_id column holds ``msg_id`` as it is."""
    return len(msg_id) <= MSG_ID_MAX and msg_id.isascii()


def _lease_end(lease_s: float) -> str:
    return f"NOW(6) + INTERVAL {int(lease_s * 1_000_000)} MICROSECOND"


def rows_sql(schema: str = "") -> str:
    """A derived table of the dedup records as a reader sees them: ``ns, msg_id, status,
    claim_token, claimed_until, done_at``, with status and done_at taken from the
    confirmed claim where the id's own row still says 'claimed'. ``schema`` qualifies
    the tables (the state database) for connections that have another default."""
    q = f"`{schema}`." if schema else ""
    return (f"(SELECT d.ns, d.msg_id, IF({_IS_DONE}, 'done', 'claimed') AS status, "
            "d.claim_token, d.claimed_until, "
            "IF(d.status = 'done', d.done_at, c.done_at) AS done_at "
            f"FROM {_joined(q)}) AS cachesync_dedup_rows")


# What an account needs to keep its own writes out of the binlog (SET sql_log_bin = 0).
LOG_BIN_GRANT = ("BINLOG ADMIN (MariaDB 10.5.2+; SUPER before) or SESSION_VARIABLES_ADMIN "
                 "(MySQL 8.0.14+)")


def unlog_session(conn) -> None:
    """The session's writes stay out of the binlog (so off the replicas); raises FatalError
    naming the grant when the account may not."""
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
    except pymysql.err.OperationalError as e:
        if e.args and e.args[0] in ACCESS_DENIED:
            raise FatalError(f"consumer.dedup_mysql_log_bin is false but MySQL refused "
                             f"SET sql_log_bin = 0: the account needs {LOG_BIN_GRANT}, or set "
                             f"it true (or use consumer.dedup_store: redis): {e.args[-1]}") from e
        raise


def _unlogged_state_tables(conn) -> None:
    unlog_session(conn)
    ensure_state_tables(conn)


class MySQLDedupStore:
    """``cachesync_dedup`` rows keyed by (namespace, message id).

    A claim inserts new ids and takes over expired claims; the row's
    ``claim_token`` then tells whose claim it is. The confirm of a whole claim is
    one ``cachesync_dedup_done`` row for its token (an UPDATE of every id cost as
    much as the claim itself); a confirm of only some of a claim's ids marks those
    rows done one by one. Done ids are never re-claimed: they are the duplicates
    the idempotent receiver drops.
    """

    def __init__(self, params: MySQLParams, namespace: str, log_bin: bool = True):
        # autocommit: the common claim (new ids only) and the confirm of a whole claim are
        # one statement each, committed in one round trip (run_each)
        setup = ensure_state_tables if log_bin else _unlogged_state_tables
        self._session = Session(params.connect, setup=setup, autocommit=True)
        self._ns = namespace
        # token -> (its mark, the ids it owns): what a confirm of the whole claim needs
        self._held: OrderedDict[str, tuple[str, frozenset[str]]] = OrderedDict()
        # (ids, token, mark) of the last claim if it failed: its retry keeps token and mark
        self._failed: tuple[tuple[str, ...], str, str] | None = None

    def claim(self, ids: Sequence[str], lease_s: float,
              commit_ts: Mapping[str, float] | None = None) -> tuple[str, Mapping[str, ClaimState]]:
        """Claim ``ids`` (``commit_ts`` is not needed here); raises RetryableError / FatalError.

        New ids are inserted as claimed under a new token, each chunk's INSERT committed on
        its own: a row it added is this claim's for the lease whatever happens next. Only a
        chunk where some ids existed goes on, in one transaction, to take over expired
        claims and to read whose the others are. A claim of the same ids right after one
        that failed (the applier's retry) keeps that one's token, so the rows it committed
        before failing are its own, not another claim's to wait out.
        """
        failed, self._failed = self._failed, None
        if failed is not None and failed[0] == tuple(ids):
            token, mark = failed[1:]
        else:
            # The claim's mark, written to each id row's done_at and, on confirm, to the
            # claim's done row: the purge finds a claim's ids by it. Only ever compared
            # for equality, so the client's clock is good enough.
            token = uuid.uuid4().hex
            mark = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
        parts = list(chunks(list(dict.fromkeys(ids)), CLAIM_CHUNK))
        # an id the column cannot hold fails its INSERT: then no chunk's rows stay behind
        plain = all(_fits(i) for i in ids)
        insert = self._session.run_each if plain else self._session.run
        try:
            all_new = insert(lambda cur: [self._insert(cur, token, mark, part, lease_s, plain)
                                          for part in parts])
            states: dict[str, ClaimState] = {}
            for part, new in zip(parts, all_new):
                states.update(dict.fromkeys(part, ClaimState.OWNED) if new else self._session.run(
                    lambda cur, p=part: self._take_over(cur, token, mark, p, lease_s)))
        except Exception:
            self._failed = (tuple(ids), token, mark)
            raise
        owned = frozenset(i for i, state in states.items() if state is ClaimState.OWNED)
        if owned:
            self._held[token] = (mark, owned)
            while len(self._held) > HELD_MAX:
                self._held.popitem(last=False)
        return token, states

    def _insert(self, cur, token: str, mark: str, ids: Sequence[str], lease_s: float,
                plain: bool) -> bool:
        """Insert the rows of the ids that have none, claimed under ``token``; whether every
        id was new (then every one is ours). ``plain``: every id ``_fits`` the column."""
        # ns, token, mark and lease are the same for every row: escaped once, not once
        # per id (a '%' in them is doubled: the statement is still formatted with the ids)
        def esc(value: str) -> str:
            return cur.connection.escape(value).replace("%", "%%")
        row = (f"({esc(self._ns)}, %s, 'claimed', {esc(token)}, {_lease_end(lease_s)}, "
               f"{esc(mark)})")
        values = ", ".join([row] * len(ids))
        columns = "INTO cachesync_dedup (ns, msg_id, status, claim_token, claimed_until, done_at)"
        if plain:
            # The common case is a batch of new ids. IGNORE skips the rows that exist
            # and the count says how many were added: all of them means every id is
            # ours, with no second statement. IGNORE would also truncate an over-long
            # or non-ASCII id into another one, hence the check above.
            return cur.execute(f"INSERT IGNORE {columns} VALUES {values}", list(ids)) == len(ids)
        # the new rows, strictly (an id the column cannot hold is an error)
        cur.execute(f"INSERT {columns} VALUES {values} ON DUPLICATE KEY UPDATE msg_id = msg_id",
                    list(ids))
        return False

    def _take_over(self, cur, token: str, mark: str, ids: Sequence[str],
                   lease_s: float) -> dict[str, ClaimState]:
        """Every id has a row: take over the expired claims that were never confirmed;
        whose each id is (the rows inserted under ``token`` stay as they are)."""
        marks = ", ".join(["%s"] * len(ids))
        cur.execute(f"UPDATE {_JOINED} SET d.claim_token = %s, "
                    f"d.claimed_until = {_lease_end(lease_s)}, d.done_at = %s "
                    f"WHERE d.ns = %s AND d.msg_id IN ({marks}) AND d.status = 'claimed' "
                    "AND d.claimed_until < NOW(6) AND c.claim_token IS NULL",
                    [token, mark, self._ns, *ids])
        # Only those not claimed under ``token`` come back (usually none), so no result
        # rows to transfer and parse for ours. A locking read: a plain one would see the
        # transaction's snapshot, where a row another consumer added since is missing and
        # would pass for ours.
        cur.execute(f"SELECT d.msg_id, {_IS_DONE} FROM {_JOINED} WHERE d.ns = %s "
                    f"AND d.msg_id IN ({marks}) AND d.claim_token <> %s LOCK IN SHARE MODE",
                    [self._ns, *ids, token])
        out = dict.fromkeys(ids, ClaimState.OWNED)
        for msg_id, done in cur.fetchall():
            out[msg_id] = ClaimState.DONE if done else ClaimState.BUSY
        return out

    def confirm(self, token: str, ids: Sequence[str]) -> None:
        """Mark ids claimed under ``token`` done; raises RetryableError / FatalError.

        All the ids the claim owns: one done row for the token (IGNORE: a retried
        confirm whose first commit went through finds it there). Some of them, or a
        token this store did not hand out: each row still held under ``token``.
        """
        held = self._held.get(token)
        if held is not None and held[1] == frozenset(ids):
            self._session.run_each(lambda cur: cur.execute(
                "INSERT IGNORE INTO cachesync_dedup_done (ns, claim_token, claimed_at, done_at) "
                "VALUES (%s, %s, %s, NOW(6))", [self._ns, token, held[0]]))
            del self._held[token]
            return

        def work(cur):
            for part in chunks(list(ids), CLAIM_CHUNK):
                marks = ", ".join(["%s"] * len(part))
                cur.execute("UPDATE cachesync_dedup SET status = 'done', done_at = NOW(6) "
                            f"WHERE ns = %s AND claim_token = %s AND msg_id IN ({marks})",
                            [self._ns, token, *part])
        self._session.run(work)

    def done_at(self, ids: Sequence[str]) -> dict[str, float]:
        """Unix time (the server's clock) each of ``ids`` was marked done; an id not done yet
        (or purged) is absent. Raises RetryableError / FatalError."""
        def work(cur):
            found = {}
            for part in chunks(list(ids), CLAIM_CHUNK):
                marks = ", ".join(["%s"] * len(part))
                cur.execute(f"SELECT msg_id, UNIX_TIMESTAMP(done_at) FROM {rows_sql()} "
                            f"WHERE ns = %s AND status = 'done' AND msg_id IN ({marks})",
                            [self._ns, *part])
                found.update((msg_id, float(at)) for msg_id, at in cur.fetchall())
            return found
        return self._session.run(work)

    def purge(self, retention_s: float, limit: int) -> int:
        """Delete up to ``limit`` of this namespace's done records older than the retention.

        Ids confirmed one by one go first, through the (ns, status, done_at) index; then
        confirmed claims, oldest first: each claim's ids by their mark on the same
        index, and the claim's done row once none is left. One short transaction per
        call, so a purge of millions of records never holds long locks.
        """
        cutoff = f"NOW(6) - INTERVAL {int(retention_s * 1_000_000)} MICROSECOND"

        def work(cur):
            removed = cur.execute("DELETE FROM cachesync_dedup WHERE ns = %s AND status = 'done' "
                                  f"AND done_at < {cutoff} LIMIT %s", [self._ns, int(limit)])
            while removed < limit:
                cur.execute("SELECT claim_token, claimed_at FROM cachesync_dedup_done "
                            f"WHERE ns = %s AND done_at < {cutoff} ORDER BY done_at LIMIT 100",
                            [self._ns])
                claims = cur.fetchall()
                for token, claimed_at in claims:
                    left = limit - removed
                    gone = cur.execute("DELETE FROM cachesync_dedup WHERE ns = %s AND "
                                       "status = 'claimed' AND done_at = %s AND claim_token = %s "
                                       "LIMIT %s", [self._ns, claimed_at, token, left])
                    removed += gone
                    if gone == left:
                        return removed      # the claim may hold more: the next call goes on
                    cur.execute("DELETE FROM cachesync_dedup_done WHERE ns = %s AND "
                                "claim_token = %s", [self._ns, token])
                if len(claims) < 100:
                    break
            return removed
        return self._session.run(work)

    def counts(self) -> dict[str, int]:
        """This namespace's records by status (the ids and their claims' done rows)."""
        def work(cur):
            cur.execute(f"SELECT IF({_IS_DONE}, 'done', 'claimed'), COUNT(*) FROM {_JOINED} "
                        "WHERE d.ns = %s GROUP BY 1", (self._ns,))
            return cur.fetchall()
        found = {"claimed": 0, "done": 0}
        found.update({status: int(n) for status, n in self._session.run(work)})
        return found

    def close(self) -> None:
        self._session.close()
