"""Spark rows of the Kafka source -> the engines' transport-neutral Record (no pyspark import)."""

from __future__ import annotations

from typing import Any

from cachesync.consumer.core.offsets import Record

# What every Spark job selects from the Kafka source (includeHeaders=true). The timestamp
# is taken as epoch millis in SQL: PySpark would turn it into a naive local datetime.
KAFKA_SELECT = ("topic", "partition", "offset", "key", "value", "headers",
                "unix_millis(timestamp) AS timestamp_ms")


def to_record(row: Any) -> Record:
    """Convert one row selected with KAFKA_SELECT; binary columns arrive as bytearray.

    Fields are taken by position (KAFKA_SELECT's order; a header is a (key, value) struct):
    a Row looks a name up in its field list on every access, a cost paid per record."""
    topic, partition, offset, key, value, headers, timestamp_ms = row
    headers = tuple((h[0], bytes(h[1]) if h[1] is not None else b"") for h in (headers or ()))
    return Record(topic, int(partition), int(offset), _bytes(key), _bytes(value), headers,
                  int(timestamp_ms or 0))


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)

