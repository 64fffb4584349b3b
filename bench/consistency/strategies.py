"""The write-path strategies the lab compares: what the writer does about the cache.

App strategies send their cache calls themselves, around the commit, and their readers do
plain cache-aside (GET; on a miss read the row, SET it). cachesync strategies only commit:
the real `cachesync tail` + `consume` invalidate (or write, in update mode) from the binlog,
and readers fill through ``cachesync.client.read_through``. Each cachesync strategy has its
own table, so one tailer and one consumer serve all three with their own mapping.
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
)
BY_NAME = {s.name: s for s in STRATEGIES}
APP = tuple(s.name for s in STRATEGIES if not s.cachesync)
CACHESYNC = tuple(s.name for s in STRATEGIES if s.cachesync)


def key_template(prefix: str, table: str) -> str:
    return f"{prefix}{table}:{{id}}"


def tables_config(db: str, prefix: str) -> dict:
    """cachesync's ``tables`` section: the cachesync strategies' tables and the probe table."""
    tables = {f"{db}.{s.table}": {"keys": [key_template(prefix, s.table)], **s.mapping}
              for s in STRATEGIES if s.cachesync}
    tables[f"{db}.probe"] = {"keys": [key_template(prefix, "probe")]}
    return tables


def decode(cached: bytes | str) -> int:
    """The row's ``v`` from a cached value: a reader's fill (the number) or update mode's
    JSON ``{"v": ...}``. Raises ValueError on anything else (the lab must not guess)."""
    text = cached.decode() if isinstance(cached, bytes) else cached
    if text.startswith("{"):
        return int(json.loads(text)["v"])
    return int(text)
