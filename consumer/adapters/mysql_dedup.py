"""The dedup table in MySQL: batched claims with a lease, confirmed after the cache is updated."""

from __future__ import annotations

import uuid
from typing import Mapping, Sequence

from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.ports import chunks
from cachesync.producer_outbox.mysql import MySQLParams, Session, ensure_state_tables

# Bounds the size of one statement; a batch of N ids costs ceil(N / this) round trips.
CLAIM_CHUNK = 1000
MSG_ID_MAX = 64                 # cachesync_dedup.msg_id VARCHAR(64) CHARACTER SET ascii


class MySQLDedupStore:
    """``cachesync_dedup`` rows keyed by (namespace, message id).

    A claim inserts new ids and takes over expired claims in one statement; the
    row's ``claim_token`` then tells whose claim it is. Done rows are never
    re-claimed: they are the duplicates the idempotent receiver drops.
    """

    def __init__(self, params: MySQLParams, namespace: str):
        self._session = Session(params.connect, setup=ensure_state_tables)
        self._ns = namespace

    def claim(self, ids: Sequence[str], lease_s: float) -> tuple[str, Mapping[str, ClaimState]]:
        """Claim in one transaction; raises RetryableError / FatalError."""
        token = uuid.uuid4().hex

        def work(cur):
            states: dict[str, ClaimState] = {}
            for part in chunks(list(dict.fromkeys(ids)), CLAIM_CHUNK):
                states.update(self._claim_chunk(cur, token, part, lease_s))
            return states
        return token, self._session.run(work)

    def _claim_chunk(self, cur, token: str, ids: Sequence[str], lease_s: float) -> dict[str, ClaimState]:
        # ns, token and lease are the same for every row: escaped once, not once per id
        # (a '%' in them is doubled: the statement is still formatted with the ids)
        def esc(value: str) -> str:
            return cur.connection.escape(value).replace("%", "%%")
        row = (f"({esc(self._ns)}, %s, 'claimed', {esc(token)}, "
               f"NOW(6) + INTERVAL {int(lease_s * 1_000_000)} MICROSECOND)")
        values = ", ".join([row] * len(ids))
        columns = "INTO cachesync_dedup (ns, msg_id, status, claim_token, claimed_until)"
        if all(len(i) <= MSG_ID_MAX and i.isascii() for i in ids):
            # The common case is a batch of new ids. IGNORE skips the rows that exist
            # and the count says how many were added: all of them means every id is
            # ours, with no second statement. IGNORE would also truncate an over-long
            # or non-ASCII id into another one, hence the check above.
            if cur.execute(f"INSERT IGNORE {columns} VALUES {values}", list(ids)) == len(ids):
                return dict.fromkeys(ids, ClaimState.OWNED)
        # Some ids existed (the rows just added are ours and stay as they are). Take over
        # only expired claims. Both assignments test the same condition on
        # the old row and claimed_until comes last, so the result does not depend on
        # whether the server evaluates assignments in order or simultaneously.
        expired = "status = 'claimed' AND claimed_until < NOW(6)"
        cur.execute(
            f"INSERT {columns} VALUES {values} ON DUPLICATE KEY UPDATE "
            f"claim_token = IF({expired}, VALUES(claim_token), claim_token), "
            f"claimed_until = IF({expired}, VALUES(claimed_until), claimed_until)", list(ids))
        # Every id has a row now; only those not claimed under ``token`` come back (usually
        # none), so a batch of new ids costs no result rows to transfer and parse.
        marks = ", ".join(["%s"] * len(ids))
        cur.execute(f"SELECT msg_id, status FROM cachesync_dedup WHERE ns = %s "
                    f"AND msg_id IN ({marks}) AND NOT (status = 'claimed' AND claim_token = %s)",
                    [self._ns, *ids, token])
        out = dict.fromkeys(ids, ClaimState.OWNED)
        for msg_id, status in cur.fetchall():
            out[msg_id] = ClaimState.DONE if status == "done" else ClaimState.BUSY
        return out

    def confirm(self, token: str, ids: Sequence[str]) -> None:
        """Mark ids claimed under ``token`` done; raises RetryableError / FatalError."""
        def work(cur):
            for part in chunks(list(ids), CLAIM_CHUNK):
                marks = ", ".join(["%s"] * len(part))
                cur.execute("UPDATE cachesync_dedup SET status = 'done', done_at = NOW(6) "
                            f"WHERE ns = %s AND claim_token = %s AND msg_id IN ({marks})",
                            [self._ns, token, *part])
        self._session.run(work)

    def purge(self, retention_s: float, limit: int) -> int:
        """Delete up to ``limit`` of this namespace's done records older than the retention.

        Uses the (ns, status, done_at) index; each call is one short transaction, so
        a purge of millions of rows never holds long locks.
        """
        def work(cur):
            return cur.execute("DELETE FROM cachesync_dedup WHERE ns = %s AND status = 'done' "
                               "AND done_at < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s",
                               [self._ns, int(retention_s * 1_000_000), int(limit)])
        return self._session.run(work)

    def counts(self) -> dict[str, int]:
        """This namespace's records by status (index range scan on (ns, status))."""
        def work(cur):
            cur.execute("SELECT status, COUNT(*) FROM cachesync_dedup WHERE ns = %s "
                        "GROUP BY status", (self._ns,))
            return cur.fetchall()
        found = {"claimed": 0, "done": 0}
        found.update({status: int(n) for status, n in self._session.run(work)})
        return found

    def close(self) -> None:
        self._session.close()
