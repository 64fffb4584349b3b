"""Redis cache writer: pipelined deletes and fenced writes, errors classified as retryable."""

from __future__ import annotations

import itertools
import random
import time
import uuid
from typing import Callable, Sequence

import redis

from cachesync.consumer.core.writes import APPLIED, BACKWARDS, CacheWrite, fence_by_table
from cachesync.consumer.ports import WriteResult, chunks
from cachesync.schema import resource_text
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.consumer.adapters.redis_cluster import (ReplicaWait, is_cluster, masters, per_slot,
                                                       queue_script, queue_unlink, refresh,
                                                       run_pipeline)
from cachesync.schema.keys import (INTERNAL_PREFIX, LEASE_HOLD, LEASE_PREFIX, companion_owner,
                                   lease_key, lease_keys, legacy_lease_key, legacy_version_key,
                                   table_fence_key, version_key)
from cachesync.schema.mapping import TableMapping

# Keys per pipeline round trip: large enough to amortise the RTT, small enough
# that one slow batch does not hold Redis for long.
PIPELINE_CHUNK = 2000
# Fenced writes per script call: one call runs atomically, so keep it short.
WRITE_CHUNK = 200
# Keys SCAN examines per call during a table-level invalidation: on the devstack 5,000 took
# 25 % less time than 1,000 to find 100k keys among 600k, and holds Redis a few ms a call.
SCAN_COUNT = 5000
# The version key outlives its value a little, so the value can never be
# unfenced while it is still readable.
VERSION_MARGIN_MS = 1000


class RedisCache:
    def __init__(self, url: str, client: redis.Redis | None = None,
                 rand: random.Random | None = None, legacy_companions: bool = False,
                 wait: ReplicaWait | None = None, fill_hold_ms: int = 0):
        """``fill_hold_ms`` (``redis.fill_hold_ms``): an invalidation holds each key's fill
        lease that long instead of deleting it (``_unlink``); 0 deletes it."""
        self.fill_hold_ms = fill_hold_ms
        self._client = client or redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._wait = wait           # redis.wait_replicas, after every pipeline that writes
        self._rand = rand or random.Random()
        self._cluster = is_cluster(self._client)
        # The old untagged companions exist only where cachesync ran before the tagged
        # layout, which is a single server (it could not run on a cluster).
        self._legacy = legacy_companions and not self._cluster
        self._fenced = self._client.register_script(resource_text("lua/fenced_write.lua"))
        self._table_fence = self._client.register_script(resource_text("lua/table_fence.lua"))
        self._table_unlink = self._client.register_script(resource_text("lua/table_unlink.lua"))
        self._lease_take = self._client.register_script(resource_text("lua/lease_take.lua"))
        self._lease_fill = self._client.register_script(resource_text("lua/lease_fill.lua"))
        self._lease_release = self._client.register_script(resource_text("lua/release_lease.lua"))

    def delete(self, keys: Sequence[str]) -> int:
        """UNLINK keys and void their fill leases; raises RetryableError when Redis is
        unreachable.

        Voiding the lease refuses any read_through fill that started before this
        invalidation, so a reader that loaded the old row cannot write it back; holding it
        (``fill_hold_ms``) refuses the fills of readers that miss just after it, too.
        Returns how many cache keys (not leases) existed.
        """
        def run():
            return sum(self._unlink(part) for part in chunks(list(keys), PIPELINE_CHUNK // 2))
        return redis_call(run)

    def _unlink(self, keys: Sequence) -> int:
        """Void the leases of ``keys``, then UNLINK ``keys``, one pipeline, per slot on a
        cluster; returns how many of ``keys`` existed.

        The pipeline is not a transaction: another client's command may run between the
        two. Leases first: a fill that lands between them finds its lease voided and is
        refused. Keys first would let a fill of the old row land between them, its lease
        still valid, and stay until the TTL.

        With ``fill_hold_ms`` each lease is set to this invalidation's hold (LEASE_HOLD and a
        value of its own) for that long (one SET per lease) instead of deleted, so no reader
        takes a lease in that time, and a reader that misses then fills only until the hold
        ends (read_through): the binlog (so this invalidation) can be ahead of the commit becoming
        visible to readers (the server writes its binlog before its storage engine commits),
        and a reader that missed and read the row in between would cache the old row until
        the row's next change or its TTL."""
        hold = self.fill_hold_ms
        held = f"{LEASE_HOLD}{uuid.uuid4().hex}" if hold else None   # this invalidation's
        groups = [(group, self.leases(group)) for group in per_slot(keys, self._cluster)]

        def fill(pipe):
            for group, leases in groups:
                if hold:
                    for lease in leases:
                        pipe.execute_command("SET", lease, held, "PX", hold)
                else:
                    queue_unlink(pipe, leases)
                queue_unlink(pipe, group)
        replies = run_pipeline(self._client, fill, wait=self._wait)
        # each group's lease commands, then its keys' UNLINK: the replies that count
        ends = itertools.accumulate((len(leases) if hold else 1) + 1 for _, leases in groups)
        return sum(replies[end - 1] for end in ends)

    def leases(self, keys: Sequence) -> list:
        """The fill-lease keys an invalidation of ``keys`` deletes with them."""
        leases = lease_keys(keys)
        if self._legacy:
            leases += [legacy_lease_key(k) for k in keys]
        return leases

    def write(self, writes: Sequence[CacheWrite]) -> WriteResult:
        """Apply fenced writes (update mode); returns how many were applied and refused.

        Refused means Redis holds a newer version (or a newer delete's tombstone).
        TTLs get their jitter here: ``ttl * (1 - jitter * U[0,1))``, never longer
        than configured, so the TTL stays a bound on staleness. One script call takes the
        writes of one hash slot (all of them on a single server), up to WRITE_CHUNK.
        """
        def run():
            fenced = fence_by_table(writes, self._table_fences({w.table for w in writes}))
            parts = [part for group in per_slot(fenced, self._cluster, key=lambda w: w.key)
                     for part in chunks(group, WRITE_CHUNK)]

            def fill(pipe):
                for part in parts:
                    queue_script(pipe, self._fenced,
                                 [k for w in part for k in self._script_keys(w.key)],
                                 [a for w in part for a in self._script_args(w)])
            results = run_pipeline(self._client, fill, [self._fenced], self._wait)
            outcomes = [(w.key, int(x)) for part, result in zip(parts, results)
                        for w, x in zip(part, result)]
            applied = sum(1 for _, x in outcomes if x == APPLIED)
            backwards = tuple(key for key, x in outcomes if x == BACKWARDS)
            return WriteResult(applied, len(outcomes) - applied - len(backwards), backwards)
        return redis_call(run) if writes else WriteResult(0, 0)

    def _script_keys(self, key: str) -> list[str]:
        """fenced_write.lua's keys of one entry (with the old untagged companions during an
        upgrade)."""
        keys = [key, version_key(key), lease_key(key)]
        if self._legacy:
            keys += [legacy_version_key(key), legacy_lease_key(key)]
        return keys

    def _script_args(self, w: CacheWrite) -> list:
        ttl_ms = self._ttl_ms(w)
        return [w.kind, w.version, w.value, ttl_ms, ttl_ms + VERSION_MARGIN_MS]

    def _ttl_ms(self, w: CacheWrite) -> int:
        return max(1, int(w.ttl_s * 1000 * (1 - w.ttl_jitter * self._rand.random())))

    def take_leases(self, keys: Sequence[str], token: str, lease_ms: int) -> list[str]:
        """Take the fill lease of each key that holds no value (SET NX, as ``read_through``
        does on a miss; lease_take.lua, one call per slot); returns the keys whose lease is
        now ``token``'s. A cached key, or one another reader holds the lease of, is left alone."""
        def run():
            parts = [part for group in per_slot(list(dict.fromkeys(keys)), self._cluster)
                     for part in chunks(group, WRITE_CHUNK)]
            results = run_pipeline(self._client, lambda pipe: [
                queue_script(pipe, self._lease_take, [k for key in part for k in (key, lease_key(key))],
                             [token, lease_ms]) for part in parts], [self._lease_take], self._wait)
            return [key for part, result in zip(parts, results)
                    for key, x in zip(part, result) if int(x) == 1]
        return redis_call(run) if keys else []

    def fill_leased(self, writes: Sequence[CacheWrite], token: str) -> WriteResult:
        """Write each value (``json`` or ``hash``) whose key's lease is still ``token``'s, and
        drop the lease (``read_through``'s fill_if_lease; lease_fill.lua, one call per slot).
        Refused: an invalidation voided the lease since it was taken, or another reader took
        it over. TTLs get their jitter as in ``write``."""
        def run():
            parts = [part for group in per_slot(list(writes), self._cluster, key=lambda w: w.key)
                     for part in chunks(group, WRITE_CHUNK)]
            results = run_pipeline(self._client, lambda pipe: [
                queue_script(pipe, self._lease_fill,
                             [k for w in part for k in (w.key, lease_key(w.key))],
                             [token, *(a for w in part for a in (w.kind, w.value, self._ttl_ms(w)))])
                for part in parts],
                [self._lease_fill], self._wait)
            applied = sum(int(x) for result in results for x in result)
            return WriteResult(applied, len(writes) - applied)
        return redis_call(run) if writes else WriteResult(0, 0)

    def release_leases(self, keys: Sequence[str], token: str) -> None:
        """Give back those of ``token``'s leases that will not be filled (another reader's
        lease is left alone), so readers fill those keys again at once."""
        def run():
            run_pipeline(self._client, lambda pipe: [
                queue_script(pipe, self._lease_release, [lease_key(key)], [token]) for key in keys],
                [self._lease_release], self._wait)
        if keys:
            redis_call(run)

    def invalidate_table(self, mapping: TableMapping, fence_version: str | None = None,
                         progress: Callable[[int], None] | None = None,
                         keep_newer: str | None = None,
                         pace: Callable[[float, int], None] | None = None,
                         scan_count: int = SCAN_COUNT) -> int:
        """Delete every key the table's templates can produce, and their fill leases; returns
        how many existed. Raises RetryableError when Redis is unreachable (safe to repeat).

        SCAN by each template's glob on every master, full-matched by the template's regex
        (``user:{id}`` never takes ``user:email:x``), never a ``cachesync:`` key, UNLINKed
        in pipelined chunks. ``fence_version`` (update mode) is stored first, so a write of
        an older row that races the scan or arrives later is turned into a delete. A SCAN of
        the fill leases, run before the keys' one, removes those of the table's keys, also of keys not cached
        yet, so a ``read_through`` fill that loaded a row before the change is refused.
        ``keep_newer`` (update mode, a scan running beside the rows): a key whose stored
        version is newer than this one was written after the change, and stays.
        ``pace(seconds, examined)`` is called after each of the scan's round trips (SCAN
        calls examining ``scan_count`` keys, UNLINK pipelines examining none) and may sleep,
        so the scan leaves Redis to the row stream part of the time (``ScanPace``).
        """
        paced = _Paced(pace)

        def run():
            if fence_version is not None:
                self.fence_table(mapping, fence_version)
            removed = 0
            for node in masters(self._client):
                for template in mapping.keys:
                    # leases first: a fill whose lease predates the change is refused, and
                    # a lease taken after this pass read the row after the change
                    leases = _leases_matching(node, template, self._legacy, scan_count, paced)
                    for part in _batched(leases, PIPELINE_CHUNK):
                        paced(lambda: run_pipeline(self._client, lambda pipe: [
                            queue_unlink(pipe, group) for group in per_slot(part, self._cluster)],
                            wait=self._wait))
                    for part in _batched(template_keys(node, template, scan_count, paced),
                                         PIPELINE_CHUNK // 2):
                        removed += paced(lambda: self._unlink(part) if keep_newer is None
                                         else self._unlink_older(part, keep_newer))
                        if progress is not None:
                            progress(len(part))
            return removed
        return redis_call(run, client=self._client)

    def _unlink_older(self, keys: Sequence, fence_version: str) -> int:
        """UNLINK ``keys`` whose stored version is not newer than ``fence_version`` (one
        script call per slot on a cluster); their leases go in the lease pass."""
        groups = per_slot(keys, self._cluster)
        return sum(run_pipeline(self._client, lambda pipe: [
            queue_script(pipe, self._table_unlink,
                         [k for key in group for k in (key, version_key(key))],
                         [fence_version]) for group in groups], [self._table_unlink], self._wait))

    def fence_table(self, mapping: TableMapping, fence_version: str) -> None:
        """Store a table-level event's version (update mode): writes of the table's older rows
        become deletes from now on (the scan itself may come later)."""
        redis_call(lambda: self._table_fence(keys=[table_fence_key(mapping.table)],
                                             args=[fence_version]))

    def _table_fences(self, tables: set[str]) -> dict[str, str]:
        """The stored table-level fence of each table (one pipelined GET each)."""
        tables = sorted(t for t in tables if t)
        if not tables:
            return {}
        found = run_pipeline(self._client,
                             lambda pipe: [pipe.get(table_fence_key(t)) for t in tables])
        return {t: v.decode() for t, v in zip(tables, found) if v is not None}

    def close(self) -> None:
        self._client.close()


_INTERNAL_B = INTERNAL_PREFIX.encode()
_LEGACY_LEASE_B = LEASE_PREFIX.encode()


def _batched(items, size: int):
    """Lists of up to ``size`` items, without holding more than one list (a table can have
    millions of keys)."""
    items = iter(items)
    while part := list(itertools.islice(items, size)):
        yield part


class _Paced:
    """Runs a table scan's round trips, timed, and hands each one's time to ``pace``."""

    def __init__(self, pace: Callable[[float, int], None] | None):
        self._pace = pace

    def __call__(self, fn, examined: int = 0):
        started = time.monotonic()
        result = fn()
        if self._pace is not None:
            self._pace(time.monotonic() - started, examined)
        return result

    def scan(self, node, glob: str, count: int):
        """SCAN ``node`` for ``glob``, ``count`` keys examined per call, paced between calls."""
        cursor = 0
        while True:
            cursor, keys = self(lambda: node.scan(cursor, match=glob, count=count), count)
            yield from keys
            if not cursor:
                return


def template_keys(node, template, count: int = SCAN_COUNT, paced: _Paced = _Paced(None)):
    """Keys on ``node`` the template renders (not cachesync's own), as bytes."""
    for key in paced.scan(node, template.glob, count):
        if not key.startswith(_INTERNAL_B) and _renders(template, key):
            yield key


def _leases_matching(node, template, legacy: bool, count: int, paced: _Paced):
    """Lease keys on ``node`` of keys the template renders, as bytes (with the old untagged
    ones while ``legacy``): one SCAN, whose pattern takes both forms while ``legacy``, since
    every SCAN reads the whole keyspace (on 50,000,000 keys, minutes)."""
    glob = LEASE_PREFIX + ("*" if legacy else "{*}") + template.glob
    for name in paced.scan(node, glob, count):
        owner = companion_owner(name, LEASE_PREFIX)
        if owner is not None and _renders(template, owner):
            yield name
        elif legacy and _renders(template, name[len(_LEGACY_LEASE_B):]):
            yield name


def _renders(template, key: bytes) -> bool:
    return template.regex.fullmatch(key.decode("utf-8", "surrogateescape")) is not None


# A cluster resharding or failing over: a multi-key command or script on a slot that is
# migrating (TRYAGAIN until the move completes; redis-py retries it, then gives up with a
# ClusterError), a master down, a slot no master serves yet.
_CLUSTER_TRANSIENT = (redis.exceptions.ClusterError, redis.exceptions.TryAgainError,
                      redis.exceptions.SlotNotCoveredError)


def redis_call(fn, what: str = "Redis", client=None):
    """Run ``fn()``; refused credentials raise FatalError, an unreachable or loading
    server or a cluster mid-resharding or failover RetryableError (the engines retry
    those and never skip). ``client``: a cluster whose slot map is read again when a
    node was unreachable (calls that reach nodes directly, like the SCANs)."""
    try:
        return fn()
    except redis.AuthenticationError as e:
        raise FatalError(f"{what} refused the credentials: {e}") from e
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as e:
        if client is not None and not isinstance(e, redis.BusyLoadingError):
            refresh(client)
        raise RetryableError(f"{what} unavailable: {e}") from e
    except _CLUSTER_TRANSIENT as e:
        raise RetryableError(f"{what}: the cluster is resharding or failing over: {e}") from e
