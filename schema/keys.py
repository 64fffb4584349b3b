"""Kafka key rules: every change of one row lands in one partition, in commit order."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from cachesync.schema.slots import SLOTS, companion, companions, key_slot, slot_tags
from cachesync.schema.values import canonical_text

_ESCAPES = str.maketrans({"\\": "\\\\", ",": "\\,"})


NULL_TEXT = "\\N"      # a NULL in the key of a table without a primary key (``\`` is escaped)


def pk_text(pk: Iterable[tuple[str, Any]]) -> str:
    """Canonical text of a (possibly composite) primary key: values in column order. A table
    without a primary key is keyed by all its columns, some of which may be NULL: ``\\N``,
    which no value renders (a value's backslash is escaped)."""
    return ",".join(NULL_TEXT if v is None else canonical_text(v).translate(_ESCAPES)
                    for _, v in pk)


def kafka_key(db: str, table: str, pk: Iterable[tuple[str, Any]]) -> str:
    """``db.table:pk`` - the partitioning key of a row's changes."""
    return f"{db}.{table}:{pk_text(pk)}"


INTERNAL_PREFIX = "cachesync:"      # cachesync's own keys; never a cache key it deletes
LEASE_PREFIX = "cachesync:lease:"
VERSION_PREFIX = "cachesync:ver:"
# How what an invalidation leaves in a key's fill lease for redis.fill_hold_ms starts (then a
# value of its own): no reader's token, so read_through finds the lease taken (take_lease.lua)
# and fills only while that same hold lasts (fill_if_held.lua)
LEASE_HOLD = "hold:"


def lease_key(key: str) -> str:
    """The fill-lease companion of a cache key, ``cachesync:lease:{<tag>}<key>`` in the key's
    hash slot (schema.slots); every invalidation deletes it too, or holds it
    (LEASE_HOLD, ``redis.fill_hold_ms``)."""
    return companion(LEASE_PREFIX, key)


def lease_keys(keys: Sequence[str]) -> list:
    """``[lease_key(k) for k in keys]``, named in one call (compiled when built)."""
    return companions(LEASE_PREFIX, keys)


def version_key(key: str) -> str:
    """Where update mode keeps the version of the value (or tombstone) at ``key``, in its
    hash slot: ``cachesync:ver:{<tag>}<key>``."""
    return companion(VERSION_PREFIX, key)


def legacy_lease_key(key: str) -> str:
    """The old, untagged lease name ``cachesync:lease:<key>`` (another slot): an upgraded
    single-node consumer voids it too while ``redis.legacy_companion_keys`` is on."""
    return _legacy(LEASE_PREFIX, key)


def legacy_version_key(key: str) -> str:
    """The old, untagged version name ``cachesync:ver:<key>``: still read (never written) while
    ``redis.legacy_companion_keys`` is on, so an upgrade cannot lose a newer version."""
    return _legacy(VERSION_PREFIX, key)


def _legacy(prefix: str, key):
    return (prefix.encode() + key) if isinstance(key, bytes) else prefix + key


def companion_owner(name: bytes, prefix: str) -> bytes | None:
    """The cache key a companion ``name`` (``<prefix>{<tag>}<key>``) belongs to, or None when
    ``name`` is not one (a legacy name, or the tag is not the key's own)."""
    head = prefix.encode() + b"{"
    end = name.find(b"}", len(head))
    if not name.startswith(head) or end < 0:
        return None
    key = name[end + 1:]
    return key if companion(prefix, key) == name else None


DEDUP_PREFIX = "cachesync:dedup:"
# The Redis dedup store spreads a namespace's records over this many hash slots, evenly spaced
# (so over every master of a cluster); a batch's claims take one script call per slot used.
DEDUP_SLOTS = 64


def dedup_key(namespace: str, message_id: str) -> str:
    """``cachesync:dedup:<ns>:{<tag>}<id>``: the Redis dedup record of a message id, in one of
    DEDUP_SLOTS slots chosen by the id's own hash."""
    slot = key_slot(message_id) % DEDUP_SLOTS * (SLOTS // DEDUP_SLOTS)
    return f"{DEDUP_PREFIX}{namespace}:{{{slot_tags()[slot]}}}{message_id}"


DEDUP_RETENTION_PREFIX = "cachesync:dedup-retention:"


def dedup_retention_key(namespace: str) -> str:
    """``cachesync:dedup-retention:<ns>``: the longest retention (ms) the namespace's Redis
    dedup records may carry (schema/lua/dedup_retention.lua)."""
    return DEDUP_RETENTION_PREFIX + namespace


TABLE_FENCE_PREFIX = "cachesync:table:"


def table_fence_key(table: str) -> str:
    """Where update mode keeps the source version of a table's newest table-level event."""
    return TABLE_FENCE_PREFIX + table


TABLE_JOB_PREFIX = "cachesync:tablejob:"


def table_job_key(namespace: str, job_id: str) -> str:
    """``cachesync:tablejob:<ns>:<job id>``: the state of one table-level event's scan, shared
    by the consumers of a group (consumer.core.table_jobs.job_id)."""
    return f"{TABLE_JOB_PREFIX}{namespace}:{job_id}"
