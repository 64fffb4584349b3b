"""Ports the engines depend on; each has a real adapter and an in-memory one."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Protocol, Sequence

from cachesync.consumer.core.dedup import ClaimState
from cachesync.consumer.core.offsets import Record
from cachesync.consumer.core.writes import CacheWrite


class WriteResult(NamedTuple):
    applied: int
    refused: int          # fenced: Redis held a newer version
    backwards: tuple[str, ...] = ()   # keys invalidated: the version column went backwards


class DedupStore(Protocol):
    def claim(self, ids: Sequence[str], lease_s: float,
              commit_ts: Mapping[str, float] | None = None) -> tuple[str, Mapping[str, ClaimState]]:
        """Claim ids in one round trip; returns (claim token, state per id). ``commit_ts``:
        each id's source commit time, for a store that keys its records by time."""

    def confirm(self, token: str, ids: Sequence[str]) -> None:
        """Mark ids claimed under ``token`` as done."""

    def purge(self, retention_s: float, limit: int) -> int:
        """Delete up to ``limit`` done records older than ``retention_s``; returns how many."""

    def counts(self) -> Mapping[str, int]:
        """Records of the namespace by status: ``{"claimed": n, "done": n}``."""


class CacheWriter(Protocol):
    def delete(self, keys: Sequence[str]) -> int:
        """Delete keys (pipelined); returns how many existed."""

    def write(self, writes: Sequence[CacheWrite]) -> WriteResult:
        """Fenced writes (update mode); a write older than the stored version is refused."""

    def take_leases(self, keys: Sequence[str], token: str, lease_ms: int) -> list[str]:
        """Take the fill lease of each key that holds no value (``read_through``'s SET NX on
        a miss); returns the keys whose lease is now ``token``'s (a cached key, or one another
        reader holds the lease of, is left alone)."""

    def fill_leased(self, writes: Sequence[CacheWrite], token: str) -> WriteResult:
        """Write each value whose key's lease is still ``token``'s and drop the lease
        (``read_through``'s fill_if_lease); refused when an invalidation voided the lease."""

    def release_leases(self, keys: Sequence[str], token: str) -> None:
        """Give back those of ``token``'s leases that will not be filled."""

    def invalidate_table(self, mapping, fence_version: str | None = None,
                         progress=None, keep_newer: str | None = None, pace=None,
                         scan_count: int = ...) -> int:
        """Delete every key the table's templates can produce; ``fence_version`` (update
        mode) turns later writes of older rows of the table into deletes. Returns how many
        keys existed. ``pace(seconds, examined)`` after each round trip of the scan may
        sleep (``consumer.core.scan_pace``); ``scan_count``: keys examined per SCAN call."""


class CacheReader(Protocol):
    """What the operator surface reads from the cache: the consistency monitor, ``audit``,
    ``lint`` and the readiness probes. Every failure is a CachesyncError (RetryableError when
    the cache is unreachable, FatalError when it refuses the credentials or a command)."""

    def read(self, mapping, keys: Sequence[str]) -> list:
        """What the cache holds at ``keys`` of ``mapping``, in order: for an update-mode
        ``hash`` table a dict of bytes per key (empty when absent), else bytes or None."""

    def ping(self) -> None:
        """Return once the cache answers; raises RetryableError when it does not."""

    def scan(self, template) -> Iterator[str]:
        """The cached keys ``template`` renders (never cachesync's own), on every server of
        a cluster; SCAN, never KEYS."""

    def without_ttl(self, keys: Sequence[str]) -> list[str]:
        """Those of ``keys`` that exist and have no TTL."""

    def close(self) -> None:
        """Release the connections."""


class Source(Protocol):
    def poll(self, max_records: int, timeout_s: float) -> list[Record]: ...

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None: ...


class DeadLetters(Protocol):
    def send(self, record: Record, reason: str, detail: str) -> None: ...

    def flush(self) -> None: ...


class Adapters(Protocol):
    """The adapters an engine builds where it runs, from ``settings`` (the application's
    factory, picklable: a Spark task builds its own on an executor), so that an engine never
    imports the application that configures it."""

    settings: Any

    def mappings(self) -> Any: ...

    def cache(self) -> CacheWriter: ...

    def cache_reader(self, timeout_s: float) -> CacheReader: ...

    def dedup(self) -> DedupStore: ...

    def table_jobs(self) -> Any: ...

    def dead_letters(self) -> DeadLetters: ...

    def mysql(self, database: str) -> Any:
        """The MySQL connection parameters (``.connect()``) of ``database``."""

    def replace_settings(self, settings) -> "Adapters":
        """The same factory over other settings."""


def chunks(items: Sequence, size: int) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
