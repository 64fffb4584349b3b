"""``cachesync resync``: recover from a lost binlog position by invalidating the mapped tables.

Order matters: the current position is read first, then every key of the tables is
removed (the table-level mechanism), and only then is the position stored as the
checkpoint. A change committed during the invalidation is after the stored position,
so the tailer publishes it; nothing between the lost checkpoint and now can stay cached.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable

from cachesync.runtime.config import Settings
from cachesync.consumer.core.writes import padded
from cachesync.producer_outbox.binlog.reading import LostPositionError
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint, MySQLCheckpointStore
from cachesync.schema.gtid import GtidState
from cachesync.schema.ids import binlog_version, file_pos_ordinal
from cachesync.schema.mapping import MappingSet, TableMapping
from cachesync.supervisor import RestartingTailer
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.wiring import build_cache, mappings as configured_mappings, mysql_params, source_params

log = logging.getLogger(__name__)


@dataclass
class ResyncReport:
    position: Checkpoint
    removed: dict[str, int] = field(default_factory=dict)     # table -> keys removed
    checkpoint_stored: bool = False

    def to_dict(self) -> dict:
        return {"position": self.position.describe(), "removed": self.removed,
                "checkpoint_stored": self.checkpoint_stored}


def resync(settings: Settings, tables: tuple[str, ...] = (),
           on_table: Callable[[str, int], None] = lambda table, removed: None) -> ResyncReport:
    """Invalidate every key of the mapped tables (or of ``tables``) and, when all of them
    were, store the position read before as the tailer's checkpoint.

    Raises FatalError (server not ready), RetryableError (MySQL or Redis unavailable).
    """
    mappings = configured_mappings(settings)
    resync_tables(settings, tables, mappings)       # a usage error before any server is asked
    # a tailer only for its preflight and position query: no publisher, no checkpoint store
    # the position is the binlog source's (tailer.source_hosts): the checkpoint is read there
    reader = Tailer(source_params(settings), None, None, mappings,
                    TailerOptions(settings.kafka.topic, settings.tailer))
    position = reader.current_position()
    reader.match_existing()           # the tables of pattern entries, as they exist now
    chosen = resync_tables(settings, tables, mappings)
    fence = padded(binlog_version(position_ordinal(position), 0))
    report = ResyncReport(position)
    cache = build_cache(settings)     # the one Redis factory: Sentinel and Cluster too
    try:
        for mapping in chosen:
            removed = cache.invalidate_table(mapping, fence if mapping.updates else None)
            report.removed[mapping.table] = removed
            on_table(mapping.table, removed)
    finally:
        cache.close()
    if not tables:          # a subset leaves the other tables' gap: the checkpoint stays
        store = MySQLCheckpointStore(mysql_params(settings).connect, settings.tailer.name)
        try:
            store.save(position)
        finally:
            store.close()
        report.checkpoint_stored = True
    log.warning("resync: %d key(s) removed from %d table(s); checkpoint %s",
                sum(report.removed.values()), len(report.removed),
                f"stored at {position.describe()}" if report.checkpoint_stored else "unchanged")
    return report


def resync_tables(settings: Settings, names: tuple[str, ...],
                  mappings: MappingSet | None = None) -> list[TableMapping]:
    """The mapped tables to invalidate (those with key templates): exact entries and the
    tables patterns matched so far (``MappingSet.known``); raises ValueError for a name
    that is not mapped. Shards whose templates are the same are invalidated once."""
    mappings = mappings or configured_mappings(settings)
    chosen = {m.table: m for m in mappings.resolved()} | dict(mappings.tables)
    if names:
        found = {n: chosen.get(n) or (mappings.get(*n.split(".", 1)) if "." in n else None)
                 for n in names}
        unknown = [n for n, m in found.items() if m is None]
        if unknown:
            raise ValueError(f"not a mapped table: {', '.join(unknown)} (mapped: "
                             f"{', '.join(sorted(m.table for m in settings.tables.entries))})")
        chosen = found
    once: dict = {}
    for m in chosen.values():
        if m.keys:
            once.setdefault((tuple(t.text for t in m.keys), m.mode), []).append(m)
    # shards rendering the same keys: one scan, reported under their tables: entry
    return [group[0] if len(group) == 1 else dataclasses.replace(group[0], table=group[0].pattern)
            for group in once.values()]


def position_ordinal(position: Checkpoint) -> int:
    """The transaction ordinal of a position, as the tailer numbers versions: the GTID
    state's place in the history (GtidState.ordinal), else the file:pos ordinal."""
    if position.gtid:
        return GtidState.parse(position.gtid).ordinal
    return file_pos_ordinal(position.log_file, position.log_pos)


class ResyncingTailer:
    """A RestartingTailer that, with tailer.on_lost_position: resync, recovers from a lost
    position (every mapped table invalidated, checkpoint at the current position) and goes
    on tailing; it runs inside the active term, so the resync happens under the tailer lock.
    Raises LostPositionError with on_lost_position: fail (exit 3)."""

    def __init__(self, settings, supervisor: RestartingTailer):
        self._settings, self._supervisor = settings, supervisor

    @property
    def last(self):
        return self._supervisor.last

    def run(self) -> None:
        while True:
            try:
                self._supervisor.run()
                return
            except LostPositionError as e:
                if self._settings.tailer.on_lost_position != "resync":
                    raise
                log.warning("%s; tailer.on_lost_position is resync: running it now", e)
                resync(self._settings)

    def stop(self) -> None:
        self._supervisor.stop()
