"""In-memory adapters: same contracts as the real ones, for unit tests and --dry-run."""

from __future__ import annotations

import json
import time
import uuid
from typing import Iterator, Mapping, Sequence

from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.table_jobs import JobState
from cachesync.consumer.core.writes import (APPLIED, BACKWARDS, KIND_DELETE, CacheWrite, fence,
                                            fence_by_table)
from cachesync.schema.keys import INTERNAL_PREFIX, LEASE_HOLD
from cachesync.consumer.ports import WriteResult


class MemoryDedupStore:
    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.rows: dict[str, tuple[str, str, float]] = {}   # id -> (status, token, until)

    def claim(self, ids: Sequence[str], lease_s: float,
              commit_ts: Mapping[str, float] | None = None) -> tuple[str, Mapping[str, ClaimState]]:
        token, now, states = uuid.uuid4().hex, self._clock(), {}
        for msg_id in ids:
            status, owner, until = self.rows.get(msg_id, ("free", "", 0.0))
            if status == "done":
                states[msg_id] = ClaimState.DONE
            elif status == "claimed" and until > now and owner != token:
                states[msg_id] = ClaimState.BUSY
            else:
                self.rows[msg_id] = ("claimed", token, now + lease_s)
                states[msg_id] = ClaimState.OWNED
        return token, states

    def confirm(self, token: str, ids: Sequence[str]) -> None:
        for msg_id in ids:
            status, owner, until = self.rows.get(msg_id, ("free", "", 0.0))
            if status == "claimed" and owner == token:
                self.rows[msg_id] = ("done", token, self._clock())   # done: until = done at

    def purge(self, retention_s: float, limit: int) -> int:
        cutoff = self._clock() - retention_s
        old = [i for i, (status, _, at) in self.rows.items() if status == "done" and at < cutoff]
        for msg_id in old[:limit]:
            del self.rows[msg_id]
        return min(len(old), limit)


    def counts(self) -> dict[str, int]:
        found = {"claimed": 0, "done": 0}
        for status, _, _ in self.rows.values():
            found[status] += 1
        return found


class MemoryCache:
    """Values and versions; the same fencing rule as fenced_write.lua. Also the CacheReader
    twin: a key written through ``write`` has a TTL (``ttls``, never counted down), one put in
    ``data`` directly (an application's SET) has none."""

    def __init__(self, fill_hold_ms: int = 0):
        self.fill_hold_ms = fill_hold_ms      # as RedisCache's; a held lease never runs out here
        self.data: dict[str, object] = {}
        self.ttls: dict[str, float] = {}     # key -> the TTL its last write gave it
        self.versions: dict[str, str] = {}
        self.deleted: list[str] = []
        self.table_fences: dict[str, str] = {}
        self.table_scans = 0           # invalidate_table calls (one scan of the keyspace each)
        self.leases: dict[str, str] = {}     # key -> the token holding its fill lease

    def fence_table(self, mapping, fence_version: str) -> None:
        self.table_fences[mapping.table] = max(fence_version,
                                               self.table_fences.get(mapping.table, ""))

    def invalidate_table(self, mapping, fence_version: str | None = None, progress=None,
                         keep_newer: str | None = None, pace=None, scan_count: int = 0) -> int:
        """Every key a template of ``mapping`` renders (the same match as the Redis adapter),
        but those whose version is newer than ``keep_newer``."""
        if fence_version is not None:
            self.fence_table(mapping, fence_version)
        keys = [k for k in self.data if not k.startswith(INTERNAL_PREFIX)
                and any(t.regex.fullmatch(k) for t in mapping.keys)
                and not (keep_newer is not None and k in self.versions
                         and self.versions[k].rsplit("/", 1)[-1] > keep_newer)]
        self.table_scans += 1
        if pace is not None:        # one "call" that examined every key
            pace(0.0, len(self.data))
        for key in [k for k in self.leases if any(t.regex.fullmatch(k) for t in mapping.keys)]:
            del self.leases[key]       # also of keys not cached: a fill in flight is refused
        removed = self.delete(keys)
        if progress is not None:
            progress(len(keys))
        return removed

    def delete(self, keys: Sequence[str]) -> int:
        self.deleted.extend(keys)
        for k in keys:
            self.ttls.pop(k, None)
            if self.fill_hold_ms:
                self.leases[k] = f"{LEASE_HOLD}{len(self.deleted)}"
            else:
                self.leases.pop(k, None)
        return sum(1 for k in keys if self.data.pop(k, None) is not None)

    def take_leases(self, keys: Sequence[str], token: str, lease_ms: int) -> list[str]:
        """As lease_take.lua: the lease of each key holding no value and no other lease."""
        taken = []
        for k in dict.fromkeys(keys):
            if k not in self.data and k not in self.leases:
                self.leases[k] = token
                taken.append(k)
        return taken

    def fill_leased(self, writes: Sequence[CacheWrite], token: str) -> WriteResult:
        """As lease_fill.lua: each value whose lease is still ``token``'s, the lease dropped."""
        applied = 0
        for w in writes:
            if self.leases.get(w.key) == token:
                self.data[w.key], self.ttls[w.key] = w.value, w.ttl_s
                del self.leases[w.key]
                applied += 1
        return WriteResult(applied, len(writes) - applied)

    def release_leases(self, keys: Sequence[str], token: str) -> None:
        for k in keys:
            if self.leases.get(k) == token:
                del self.leases[k]

    def write(self, writes: Sequence[CacheWrite]) -> WriteResult:
        applied, backwards = 0, []
        for w in fence_by_table(writes, self.table_fences):
            decision = fence(self.versions.get(w.key), w.version)
            if decision == BACKWARDS:
                self.data.pop(w.key, None)
                backwards.append(w.key)
            if decision != APPLIED:
                continue
            if w.kind == KIND_DELETE:
                self.data.pop(w.key, None)
                self.ttls.pop(w.key, None)
            else:
                self.data[w.key] = w.value
                self.ttls[w.key] = w.ttl_s
            self.leases.pop(w.key, None)      # as fenced_write.lua: a fill in flight is refused
            self.versions[w.key] = w.version
            applied += 1
        return WriteResult(applied, len(writes) - applied - len(backwards), tuple(backwards))


    def read(self, mapping, keys: Sequence[str]) -> list:
        """As Redis answers: bytes or None, or for an update-mode hash table a dict of bytes
        (empty when absent) from the stored ``[field, value, ...]`` array."""
        if mapping.updates and mapping.value_format == "hash":
            return [_hash(self.data.get(k)) for k in keys]
        return [_bytes(self.data.get(k)) for k in keys]

    def ping(self) -> None:
        pass

    def scan(self, template) -> Iterator[str]:
        """The keys ``template`` renders, as the Redis adapter matches them."""
        return iter([k for k in self.data if not k.startswith(INTERNAL_PREFIX)
                     and template.regex.fullmatch(k)])

    def without_ttl(self, keys: Sequence[str]) -> list[str]:
        return [k for k in keys if k in self.data and k not in self.ttls]

    def close(self) -> None:
        pass


def _bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _hash(value) -> dict[bytes, bytes]:
    if value is None:
        return {}
    fields = json.loads(value) if isinstance(value, (str, bytes)) else value
    if isinstance(fields, dict):
        return {_bytes(f): _bytes(v) for f, v in fields.items()}
    return {_bytes(f): _bytes(v) for f, v in zip(fields[::2], fields[1::2])}


class MemorySource:
    def __init__(self, records: Sequence[Record] = ()):
        self.records = list(records)
        self.committed: dict[tuple[str, int], int] = {}
        self._pos = 0

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        batch = self.records[self._pos:self._pos + max_records]
        self._pos += len(batch)
        return batch

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.committed.update(offsets)


class MemoryDeadLetters:
    def __init__(self):
        self.sent: list[tuple[Record, str, str]] = []

    def send(self, record: Record, reason: str, detail: str) -> None:
        self.sent.append((record, reason, detail))

    def flush(self) -> None:
        pass


class MemoryTableJobs:
    """RedisTableJobs in a dict: ``records[job]`` is ``("r", owner, until)`` or ``("d", removed)``."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.records: dict[str, tuple] = {}

    def begin(self, job: str, owner: str, lease_s: float):
        record = self.records.get(job)
        if record is not None and record[0] == "d":
            return JobState.DONE, record[1]
        if record is not None and record[1] != owner and record[2] >= self._clock():
            return JobState.WAIT, 0
        self.records[job] = ("r", owner, self._clock() + lease_s)
        return JobState.RUN, 0

    def renew(self, job: str, owner: str, lease_s: float) -> bool:
        record = self.records.get(job)
        if record is None or record[0] != "r" or record[1] != owner:
            return False
        self.records[job] = ("r", owner, self._clock() + lease_s)
        return True

    def finish(self, job: str, owner: str, removed: int) -> None:
        self.records[job] = ("d", removed)
