"""Spark rows of the Kafka source -> the engines' transport-neutral Record (no pyspark import)."""

from __future__ import annotations

from typing import Any

from cachesync.consumer.core.offsets import Record

# What every Spark job selects from the Kafka source (includeHeaders=true). The timestamp
# is taken as epoch millis in SQL: PySpark would turn it into a naive local datetime.
KAFKA_SELECT = ("topic", "partition", "offset", "key", "value", "headers",
                "unix_millis(timestamp) AS timestamp_ms")


def to_record(row: Any) -> Record:
    """Convert one row selected with KAFKA_SELECT; binary columns arrive as bytearray."""
    headers = tuple((h["key"], bytes(h["value"]) if h["value"] is not None else b"")
                    for h in (row["headers"] or ()))
    return Record(row["topic"], int(row["partition"]), int(row["offset"]),
                  _bytes(row["key"]), _bytes(row["value"]), headers, int(row["timestamp_ms"] or 0))


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)

