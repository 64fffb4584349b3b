"""Spark rows of the Kafka source -> the engines' transport-neutral Record (no pyspark import).

Two ways in: pickled Rows (``to_record``, any executor Python) and Arrow record batches
(``arrow_records``, executors with pyarrow: ``DataFrame.mapInArrow``), which spare the
executor's JVM pickling every row and the Python worker unpickling it into a Row.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

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


def arrow_records(batches: Iterable) -> Iterator[Record]:
    """The Records of pyarrow RecordBatches whose columns are KAFKA_SELECT's, in that order
    (each batch's rows in order). Columns are converted whole (``to_pylist``: binary
    columns become bytes, a header struct a dict) and zipped, nothing per field by name."""
    for batch in batches:
        columns = [column.to_pylist() for column in batch.columns]
        for topic, partition, offset, key, value, headers, timestamp_ms in zip(*columns):
            headers = tuple((h["key"], h["value"] if h["value"] is not None else b"")
                            for h in (headers or ()))
            yield Record(topic, partition, offset, key, value, headers, timestamp_ms or 0)
