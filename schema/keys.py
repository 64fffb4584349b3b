"""Kafka key rules: every change of one row lands in one partition, in commit order."""

from __future__ import annotations

from typing import Any, Iterable

from cachesync.schema.values import canonical_text

_ESCAPES = str.maketrans({"\\": "\\\\", ",": "\\,"})


def pk_text(pk: Iterable[tuple[str, Any]]) -> str:
    """Canonical text of a (possibly composite) primary key: values in column order."""
    return ",".join(canonical_text(v).translate(_ESCAPES) for _, v in pk)


def kafka_key(db: str, table: str, pk: Iterable[tuple[str, Any]]) -> str:
    """``db.table:pk`` - the partitioning key of a row's changes."""
    return f"{db}.{table}:{pk_text(pk)}"


INTERNAL_PREFIX = "cachesync:"      # cachesync's own keys; never a cache key it deletes
LEASE_PREFIX = "cachesync:lease:"


def lease_key(key: str) -> str:
    """The fill-lease companion of a cache key; every invalidation deletes it too."""
    return LEASE_PREFIX + key


VERSION_PREFIX = "cachesync:ver:"


def version_key(key: str) -> str:
    """Where update mode keeps the version of the value (or tombstone) at ``key``."""
    return VERSION_PREFIX + key


TABLE_FENCE_PREFIX = "cachesync:table:"


def table_fence_key(table: str) -> str:
    """Where update mode keeps the source version of a table's newest table-level event."""
    return TABLE_FENCE_PREFIX + table
