"""Deterministic message ids and versions derived from source positions.

A tailer that crashes and re-reads the binlog from its checkpoint produces the
same ids for the same rows, so the consumer's dedup table drops the re-publish.
"""

from __future__ import annotations

import hashlib
import os
import time

# Rows within one transaction get the low bits of the version; 2**24 rows per
# transaction is far above any sane transaction and keeps versions < 2**63.
ROW_INDEX_BITS = 24
MAX_ROWS_PER_TXN = 1 << ROW_INDEX_BITS


def binlog_message_id(server: str, position: str, row_index: int) -> str:
    """Id of the row at ``row_index`` of the transaction starting at ``position``."""
    material = f"{server}|{position}|{row_index}".encode("utf-8")
    return hashlib.blake2b(material, digest_size=16).hexdigest()


def table_event_id(server: str, position: str, index: int, partition: int) -> str:
    """Id of the copy, sent to ``partition``, of the table-level event at ``index`` of the
    transaction at ``position`` (each partition gets a copy, each applied once)."""
    material = f"{server}|{position}|table:{index}|p{partition}".encode("utf-8")
    return hashlib.blake2b(material, digest_size=16).hexdigest()


def binlog_version(txn_ordinal: int, row_index: int) -> int:
    """A version that grows with commit order: transaction ordinal, then row index.

    ``txn_ordinal`` is the GTID sequence number (MariaDB) or, without GTIDs,
    ``file_number << 32 | position``; raises ValueError past the row budget.
    """
    if row_index >= MAX_ROWS_PER_TXN:
        raise ValueError(f"transaction has more than {MAX_ROWS_PER_TXN} rows")
    return (txn_ordinal << ROW_INDEX_BITS) | row_index


def file_pos_ordinal(log_file: str, log_pos: int) -> int:
    """Ordinal of a file+pos position: ``mysql-bin.000012``, 345 -> (12 << 32) | 345."""
    suffix = log_file.rsplit(".", 1)[-1]
    if not suffix.isdigit():
        raise ValueError(f"binlog file name without a numeric suffix: {log_file!r}")
    return (int(suffix) << 32) | log_pos


def new_time_ordered_id(now_ns: int | None = None) -> str:
    """A UUIDv7-style id (48-bit ms timestamp + 80 random bits) as 32 hex chars.

    Used for outbox event ids: sortable by creation time, unique without coordination.
    """
    ms = (now_ns if now_ns is not None else time.time_ns()) // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | (0x7 << 76) | (rand & ((1 << 76) - 1))
    return f"{value:032x}"
