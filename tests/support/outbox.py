"""Outbox writers and order checks shared by the relay's and the binlog outbox's tests."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict

from cachesync.producer_outbox.outbox import emit
from tests.support import wait_for


class Writers:
    """N threads emitting events per aggregate in transactions; ~1 in 5 rolls back.

    ``shared``: every writer picks among the same ``aggregates`` (the aggregate's row lock
    serialises its events); else each writer has its own. ``late``: the share of
    transactions held open up to 50 ms before their commit, so commits leave seq order.
    An event's ``n`` is its aggregate's count of committed events before it.
    """

    def __init__(self, lab, n: int, aggregates: int = 4, shared: bool = False,
                 late: float = 0.0):
        self.lab, self.n, self.aggs, self.shared, self.late = lab, n, aggregates, shared, late
        self.committed: dict[str, tuple[str, int]] = {}   # event id -> (aggregate, n)
        self.rolled_back: set[str] = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(w,)) for w in range(n)]
        self.lock = threading.Lock()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _write(self, w: int) -> None:
        rng = random.Random(w)
        with self.lab.stack.admin(self.lab.db, autocommit=False) as conn:
            while not self.stop.is_set():
                agg = f"a{rng.randrange(self.aggs)}" if self.shared else f"w{w}-{rng.randrange(self.aggs)}"
                n = self._bump(conn, agg)
                event_id = emit(conn, "board", agg, "bumped", {"n": n},
                                keys=[f"{self.lab.prefix}board:{agg}"])
                if rng.random() < 0.2:
                    conn.rollback()
                    self.rolled_back.add(event_id)
                    continue
                if rng.random() < self.late:
                    time.sleep(rng.uniform(0, 0.05))    # later seqs of others commit first
                conn.commit()
                with self.lock:
                    self.committed[event_id] = (agg, n)
                time.sleep(rng.uniform(0, 0.01))

    @staticmethod
    def _bump(conn, agg: str) -> int:
        """Lock the aggregate's row (it serialises the aggregate's events); its count so far."""
        with conn.cursor() as cur:
            cur.execute("INSERT INTO scores VALUES (%s, 0) ON DUPLICATE KEY UPDATE "
                        "points = points + 1", (_row_id(agg),))
            cur.execute("SELECT points FROM scores WHERE id = %s", (_row_id(agg),))
            return cur.fetchone()[0]


def _row_id(agg: str) -> int:
    return int.from_bytes(agg.encode()[:7].ljust(7, b"\0"), "big")


def assert_first_deliveries_in_aggregate_order(records, committed) -> None:
    """Per aggregate (one Kafka key, one partition, offset order), first deliveries ascend."""
    seen, order = set(), defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        event_id = dict(r.headers)["id"].decode()
        if event_id not in seen:
            seen.add(event_id)
            agg, n = committed[event_id]
            order[agg].append(n)
    for agg, ns in order.items():
        assert ns == sorted(ns), f"aggregate {agg} delivered out of order: {ns}"


def seven_events_five_old(lab, column: str) -> None:
    """Emit 7 outbox events, then date the first 5 of them 2 hours back in ``column``
    (``published_at`` or ``created_at``): what a purge with a 1-hour retention takes."""
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        for i in range(7):
            emit(conn, "board", i, "bumped", {"i": i})
        conn.commit()
    lab.sql(f"UPDATE cachesync_outbox SET {column} = NOW(6) - INTERVAL 2 HOUR WHERE seq <= "
            "(SELECT s FROM (SELECT MIN(seq) + 4 AS s FROM cachesync_outbox) m)")


def purge_only(lab, cfg) -> str:
    """Run ``cachesync relay --purge-only``; its stderr (it must exit 0)."""
    purge = subprocess.run([sys.executable, "-m", "cachesync", "relay", "--config", cfg,
                            "--purge-only"], env={**os.environ, **lab.stack.env},
                           capture_output=True, text=True, timeout=60)
    assert purge.returncode == 0, purge.stderr
    return purge.stderr


def emit_one_commit_one_rollback(lab, payload: dict) -> str:
    """Cache three keys; emit an event for two of them and commit, then one for the third and
    roll back; wait until the committed event's keys are gone. Returns its id."""
    lab.cache("leaderboard:1", "page:home", "page:other")
    with lab.stack.admin(lab.db, autocommit=False) as conn:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO scores VALUES (1, 10)")
        event_id = emit(conn, "leaderboard", 1, "score_changed", payload,
                        keys=[lab.prefix + "leaderboard:1", lab.prefix + "page:home"])
        conn.commit()
        emit(conn, "leaderboard", 1, "score_changed", {}, keys=[lab.prefix + "page:other"])
        conn.rollback()                       # rolled back: publishes nothing
    wait_for(lambda: not lab.cached("leaderboard:1", "page:home"), 60,
             what="the explicit keys to be invalidated")
    return event_id
