"""The write-path strategies the lab compares: what the writer does about the cache.

App strategies send their cache calls themselves, around the commit, and their readers do
plain cache-aside (GET; on a miss read the row, SET it). cachesync strategies only commit:
the real `cachesync tail` + `consume` invalidate (or write, in update mode) from the binlog,
and readers fill through ``cachesync.client.read_through``. Each cachesync strategy has its
own table, so one tailer and one consumer serve them all with their own mapping, except
``cachesync_tail_replica``: its table has a second tailer and consumer of its own, whose
tailer reads the replica's binlog (``tailer.source_hosts``), as the README advises for apps
whose readers fill from a replica.
"""

from __future__ import annotations

import dataclasses
import json

TTL_S = 600
DOUBLE_DELETE_S = 0.05          # the app's delayed second delete
CACHESYNC_DOUBLE_DELETE_S = 0.3  # the consumer's `double_delete`, for replica readers
APP_TABLE = "acct"              # not in cachesync's mapping: nobody but the app touches its keys


@dataclasses.dataclass(frozen=True)
class Strategy:
    name: str
    label: str
    before: tuple[str, ...] = ()   # cache calls before the commit: "set", "del"
    after: tuple[str, ...] = ()    # after it: "set", "del", "del_later"
    table: str = APP_TABLE
    mapping: dict | None = None    # cachesync's table settings (None: an app strategy)
    replica_guard: bool = False    # replica readers' fills bound to the replica's position
    tail_replica: bool = False     # its tailer reads the replica's binlog, not the primary's

    @property
    def cachesync(self) -> bool:
        return self.mapping is not None


STRATEGIES = (
    Strategy("db_then_cache", "update DB, then SET the cache", after=("set",)),
    Strategy("cache_then_db", "SET the cache, then update DB", before=("set",)),
    Strategy("delete_then_db", "DEL, then update DB", before=("del",)),
    Strategy("db_then_delete", "update DB, then DEL (plain cache-aside)", after=("del",)),
    Strategy("double_delete", f"DEL, update DB, DEL again after {DOUBLE_DELETE_S * 1000:g} ms",
             before=("del",), after=("del_later",)),
    Strategy("cachesync", "cachesync delete mode + read_through", table="acct_cs",
             mapping={"mode": "delete"}),
    Strategy("cachesync_update", "cachesync update mode (fenced writes) + read_through",
             table="acct_up", mapping={"mode": "update", "value_columns": ["v"],
                                       "version_column": "seq", "ttl": TTL_S}),
    Strategy("cachesync_double_delete",
             f"cachesync delete mode + double_delete {CACHESYNC_DOUBLE_DELETE_S:g} s "
             "+ read_through", table="acct_dd",
             mapping={"mode": "delete", "double_delete": CACHESYNC_DOUBLE_DELETE_S}),
    Strategy("cachesync_replica_guard", "cachesync delete mode + read_through bound to the "
             "replica's position (ReplicaCaughtUp)", table="acct_rg",
             mapping={"mode": "delete"}, replica_guard=True),
    Strategy("cachesync_tail_replica", "cachesync delete mode + read_through, tailing the "
             "readers' replica (tailer.source_hosts)", table="acct_tr",
             mapping={"mode": "delete"}, tail_replica=True),
)
BY_NAME = {s.name: s for s in STRATEGIES}
APP = tuple(s.name for s in STRATEGIES if not s.cachesync)
CACHESYNC = tuple(s.name for s in STRATEGIES if s.cachesync)
# the cachesync configuration the targets judge, per kind of reader: as documented,
# an app whose readers fill from a replica has cachesync tail that replica
HEADLINE = "cachesync"
HEADLINE_REPLICA_READERS = "cachesync_tail_replica"
PROBE_TABLE = {False: "probe", True: "probe_tr"}   # each tailer's own probe rows


def headline(replica_reads: bool) -> str:
    """The cachesync strategy the targets name for a fault class (its readers' source)."""
    return HEADLINE_REPLICA_READERS if replica_reads else HEADLINE


def key_template(prefix: str, table: str) -> str:
    return f"{prefix}{table}:{{id}}"


def tables_config(db: str, prefix: str, tail_replica: bool = False) -> dict:
    """cachesync's ``tables`` section for the primary's tailer (or, with ``tail_replica``,
    the replica's): its strategies' tables and its probe table. No table is in both: the
    consumers would each apply it, and the earlier invalidation would be the one measured."""
    tables = {f"{db}.{s.table}": {"keys": [key_template(prefix, s.table)], **s.mapping}
              for s in STRATEGIES if s.cachesync and s.tail_replica == tail_replica}
    probe = PROBE_TABLE[tail_replica]
    tables[f"{db}.{probe}"] = {"keys": [key_template(prefix, probe)]}
    return tables


def decode(cached: bytes | str) -> int:
    """The row's ``v`` from a cached value: a reader's fill (the number) or update mode's
    JSON ``{"v": ...}``. Raises ValueError on anything else (the lab must not guess)."""
    text = cached.decode() if isinstance(cached, bytes) else cached
    if text.startswith("{"):
        return int(json.loads(text)["v"])
    return int(text)
