"""The dedup store on Redis (``consumer.dedup_store: redis``): same contract as MySQL's.

One string per message id, ``cachesync:dedup:<ns>:{<tag>}<id>`` (schema.keys.dedup_key:
one of 64 hash slots per namespace), holding ``c <token>
<until_ms>`` while claimed and ``d <done_ms>`` once done. Claims and confirms are
Lua scripts over a whole chunk (one pipelined round trip; on a Redis Cluster one script
call per slot a batch uses), timed by Redis's clock.
Every record carries the retention as its TTL, so done records expire on their
own; ``purge`` removes those written under a longer retention than today's. It SCANs the
whole keyspace for them, which on a large cache takes minutes: so the writers keep the
longest retention in use at ``cachesync:dedup-retention:<ns>``, and the purge scans only
while that is longer than its own (after the retention was shortened, until the records
written under the longer one expired).

Choose it when MySQL round trips dominate and the Redis holding it is durable
(AOF): a Redis that loses its data forgets which messages were applied, and
replays them (harmless for deletes and fenced writes, but no longer deduplicated).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Callable, Mapping, Sequence

import redis

from cachesync.consumer.adapters.redis_cache import redis_call
from cachesync.consumer.adapters.redis_cluster import (ReplicaWait, is_cluster, mget, per_slot,
                                                       queue_script, queue_unlink, run_pipeline)
from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.ports import chunks
from cachesync.schema import resource_text
from cachesync.schema.keys import DEDUP_PREFIX, dedup_key, dedup_retention_key

CLAIM_CHUNK = 1000
SCAN_COUNT = 1000
# how often a writer renews the namespace's longest retention (one script call, beside a claim)
RETENTION_RENEW_S = 60.0
WHAT = "Redis (dedup store)"
_STATES = {b"owned": ClaimState.OWNED, b"done": ClaimState.DONE, b"busy": ClaimState.BUSY}


class RedisDedupStore:
    def __init__(self, url: str, namespace: str, retention_s: float,
                 client: redis.Redis | None = None, wait: ReplicaWait | None = None,
                 leases: Callable[[Sequence[str]], list[str]] | None = None,
                 fill_hold_ms: int = 0):
        """``leases``: the fill-lease keys of cache keys (RedisCache.leases), when the cache
        is on this store's Redis server: then ``claim_unlink`` is offered (not on a cluster,
        where one script cannot reach every key); ``fill_hold_ms``: how long it holds their
        leases (RedisCache.fill_hold_ms)."""
        self._hold_ms = fill_hold_ms
        self._client = client or redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._wait = wait           # redis.wait_replicas, after every pipeline that writes
        self._namespace = namespace
        self._prefix = f"{DEDUP_PREFIX}{namespace}:"
        self._cluster = is_cluster(self._client)
        self._retention_ms = max(1, int(retention_s * 1000))
        self._claim = self._client.register_script(resource_text("lua/dedup_claim.lua"))
        self._confirm = self._client.register_script(resource_text("lua/dedup_confirm.lua"))
        # (ids, token) of the last claim if it failed: its retry keeps the token, so the
        # records its scripts did write (a WAIT short of replicas, a reply lost) are its own
        # again instead of busy for a whole lease, as in the MySQL stores
        self._failed: tuple[tuple[str, ...], str] | None = None
        self._retention = self._client.register_script(resource_text("lua/dedup_retention.lua"))
        self._renewed_at: float | None = None     # time.monotonic() of the last renewal
        self._leases = None if self._cluster else leases
        self._unlink = self._client.register_script(resource_text("lua/dedup_unlink.lua"))
        self._unlink_here = OwnConnectionScript(self._client, self._unlink)

    @property
    def unlinks(self) -> bool:
        """True when ``claim_unlink`` can invalidate the cache (it shares this server)."""
        return self._leases is not None

    def claim_unlink(self, changes: Sequence[tuple[str, Sequence[str]]]
                     ) -> tuple[Mapping[str, ClaimState], int]:
        """Claim each ``(id, cache keys)``, UNLINK the keys (and hold or UNLINK their fill
        leases) of those that are ours and confirm them, in one script call per CLAIM_CHUNK ids (one
        pipelined round trip): ``(state per id, cache keys that existed)``. OWNED means
        applied and confirmed; DONE a duplicate; BUSY untouched. Raises RetryableError /
        FatalError; a retry after a lost reply finds the ids applied by the first call DONE."""
        changes = list(dict((i, keys) for i, keys in changes).items())
        calls = []
        for part in chunks(changes, CLAIM_CHUNK):
            keys, args = [], [self._retention_ms, self._hold_ms]
            for msg_id, cache_keys in part:
                leases = self._leases(list(cache_keys))      # a list: named in one call
                keys += [dedup_key(self._namespace, msg_id), *cache_keys, *leases]
                args += [len(cache_keys), len(leases)]
            calls.append((part, keys, args))

        def run():
            self._renew_retention()
            if len(calls) == 1 and self._wait is None:
                # at the head of the binlog every batch is one small call: sent alone, without
                # a pipeline around it (redis-py's Script loads itself again after NOSCRIPT)
                (_, keys, args), = calls
                answers = [self._unlink_here(keys, args)]
            else:
                answers = run_pipeline(self._client, lambda pipe: [
                    queue_script(pipe, self._unlink, keys, args) for _, keys, args in calls],
                    [self._unlink], self._wait)
            states = {i: _STATES[a] for (part, _, _), answer in zip(calls, answers)
                      for (i, _), a in zip(part, answer)}
            return states, sum(int(answer[-1]) for answer in answers)
        return redis_call(run, WHAT)

    def claim(self, ids: Sequence[str], lease_s: float,
              commit_ts: Mapping[str, float] | None = None) -> tuple[str, Mapping[str, ClaimState]]:
        """Claim ``ids`` (``commit_ts`` is not needed here); raises RetryableError /
        FatalError."""
        failed, self._failed = self._failed, None
        token = failed[1] if failed is not None and failed[0] == tuple(ids) else uuid.uuid4().hex
        parts = self._script_parts(list(dict.fromkeys(ids)))
        args = [token, max(1, int(lease_s * 1000)), self._retention_ms]

        def run():
            self._renew_retention()
            answers = run_pipeline(self._client, lambda pipe: [
                queue_script(pipe, self._claim, keys, args) for _, keys in parts],
                [self._claim], self._wait)
            return {i: _STATES[a] for (part, _), answer in zip(parts, answers)
                    for i, a in zip(part, answer)}
        try:
            return token, redis_call(run, WHAT)
        except Exception:
            self._failed = (tuple(ids), token)
            raise

    def confirm(self, token: str, ids: Sequence[str]) -> None:
        parts = self._script_parts(list(ids))
        redis_call(lambda: run_pipeline(self._client, lambda pipe: [
            queue_script(pipe, self._confirm, keys, [token, self._retention_ms])
            for _, keys in parts], [self._confirm], self._wait), WHAT)

    def done_at(self, ids: Sequence[str]) -> dict[str, float]:
        """Unix time (Redis's clock) each of ``ids`` was marked done; an id not done yet (or
        expired) is absent. One MGET; raises RetryableError / FatalError."""
        keys = [dedup_key(self._namespace, i) for i in ids]

        def run():
            return {i: int(record[2:]) / 1000 for i, record in zip(ids, mget(self._client, keys))
                    if record and record.startswith(b"d ")}
        return redis_call(run, WHAT, self._client)

    def _script_parts(self, ids: list[str]) -> list[tuple[list[str], list[str]]]:
        """``(ids, their record keys)`` per script call: up to CLAIM_CHUNK ids of one slot."""
        keyed = [(i, dedup_key(self._namespace, i)) for i in ids]
        return [([i for i, _ in part], [k for _, k in part])
                for group in per_slot(keyed, self._cluster, key=lambda pair: pair[1])
                for part in chunks(group, CLAIM_CHUNK)]

    def _renew_retention(self) -> None:
        """Record this writer's retention as the namespace's longest, at most once per
        RETENTION_RENEW_S (before the records it speaks for are written)."""
        now = time.monotonic()
        if self._renewed_at is not None and now - self._renewed_at < RETENTION_RENEW_S:
            return
        lives_ms = self._retention_ms + int(2 * RETENTION_RENEW_S * 1000)
        self._retention(keys=[dedup_retention_key(self._namespace)],
                        args=[self._retention_ms, lives_ms])
        self._renewed_at = now

    def purge(self, retention_s: float, limit: int) -> int:
        """Delete up to ``limit`` done records older than ``retention_s``: a SCAN of the
        keyspace, only while some writer's records may outlive ``retention_s``."""
        def run():
            longest = self._client.get(dedup_retention_key(self._namespace))
            if longest is None or int(longest) <= retention_s * 1000:
                return 0        # every record expires before it is that old
            seconds, micros = self._client.time()
            cutoff_ms = seconds * 1000 + micros // 1000 - int(retention_s * 1000)
            deleted = 0
            batch: list[bytes] = []
            for key in self._scan():
                batch.append(key)
                if len(batch) >= SCAN_COUNT:
                    deleted += self._purge_keys(batch, cutoff_ms, limit - deleted)
                    batch = []
                    if deleted >= limit:
                        return deleted
            if batch:
                deleted += self._purge_keys(batch, cutoff_ms, limit - deleted)
            return deleted
        return redis_call(run, WHAT, self._client)

    def counts(self) -> dict[str, int]:
        """This namespace's records by status (a SCAN: for ``status``, not the hot path)."""
        def run():
            found = {"claimed": 0, "done": 0}
            for keys in chunks(list(self._scan()), SCAN_COUNT):
                for record in mget(self._client, keys):
                    if record:
                        found["done" if record.startswith(b"d ") else "claimed"] += 1
            return found
        return redis_call(run, WHAT, self._client)

    def _scan(self):
        return self._client.scan_iter(match=_glob_escape(self._prefix) + "*", count=SCAN_COUNT)

    def _purge_keys(self, keys: list[bytes], cutoff_ms: int, room: int) -> int:
        old = []
        for key, record in zip(keys, mget(self._client, keys)):
            if record and record.startswith(b"d ") and int(record[2:]) < cutoff_ms:
                old.append(key)
        old = old[:room]
        if old:     # done records never change back: no race
            run_pipeline(self._client, lambda pipe: [
                queue_unlink(pipe, group) for group in per_slot(old, self._cluster)],
                wait=self._wait)
        return len(old)

    def close(self) -> None:
        self._unlink_here.close()
        self._client.close()


class OwnConnectionScript:
    """A Lua script called on a connection of its own, for the one call per batch at the head
    of the binlog: redis-py's command path around it (the pool's checkout with its readiness
    check, the retry wrapper, the observability hooks) cost about 65 µs of CPU per call on a
    2-core host, against 16 µs for sending the command and reading its reply.

    One caller at a time uses the connection; a call made while another is in progress (and
    every call on a Redis Cluster client, which has no single pool) goes through redis-py's
    usual path. A reply that could not be read whole (a lost connection, a
    timeout) closes the connection: the call is made once more on a new one, as redis-py's
    own retry would (the scripts this serves are safe to run twice), and a second failure is
    raised as redis-py raises it (``redis_call`` maps it). A script the server no longer
    holds (a restarted or flushed Redis) is loaded again.
    """

    def __init__(self, client: redis.Redis, script):
        self._pool, self._script = getattr(client, "connection_pool", None), script
        self._conn = None
        self._busy = threading.Lock()

    def __call__(self, keys: Sequence, args: Sequence):
        if self._pool is None or not self._busy.acquire(blocking=False):
            return self._script(keys=keys, args=args)
        try:
            try:
                return self._call(keys, args)
            except (redis.ConnectionError, redis.TimeoutError):
                return self._call(keys, args)     # on a new connection (see the class)
        finally:
            self._busy.release()

    def _call(self, keys: Sequence, args: Sequence):
        if self._conn is None:
            conn = self._pool.make_connection()
            # connect() as the pool's checkout does: a sentinel-managed connection asks the
            # sentinels for the master there (a send on an unconnected one would not)
            conn.connect()
            self._conn = conn
        conn = self._conn
        try:
            try:
                return self._evalsha(conn, keys, args)
            except redis.exceptions.NoScriptError:
                conn.send_command("SCRIPT", "LOAD", self._script.script)
                self._script.sha = conn.read_response()
                return self._evalsha(conn, keys, args)
        except redis.ResponseError:
            raise                           # a whole reply: the connection is fine
        except BaseException:
            self._conn = None               # a reply maybe half read: never reused
            conn.disconnect()
            raise

    def _evalsha(self, conn, keys: Sequence, args: Sequence):
        conn.send_command("EVALSHA", self._script.sha, len(keys), *keys, *args)
        return conn.read_response()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.disconnect()


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
