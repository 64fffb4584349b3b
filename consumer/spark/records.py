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
    columns become bytes) and zipped, nothing per field by name; the headers from their
    flattened key and value columns, not one dict per header."""
    for batch in batches:
        topic, partition, offset, key, value, headers, timestamp_ms = batch.columns
        for row in zip(topic.to_pylist(), partition.to_pylist(), offset.to_pylist(),
                       key.to_pylist(), value.to_pylist(), _headers(headers),
                       timestamp_ms.fill_null(0).to_pylist()):
            yield Record(*row)


def _headers(column) -> list[tuple]:
    """Each row's headers as Record holds them, ``((key, value), ...)`` with a null value
    read as b"" (as to_record does), from a list<struct<key, value>> column."""
    flat = column.flatten()           # every row's headers in row order (a null row has none)
    pairs = [(k, b"" if v is None else v)
             for k, v in zip(flat.field("key").to_pylist(), flat.field("value").to_pylist())]
    lengths = column.value_lengths().to_pylist()          # None for a null list
    if len(pairs) == len(lengths) and None not in lengths and all(n == 1 for n in lengths):
        return [(pair,) for pair in pairs]                # the usual: the id header alone
    out, at = [], 0
    for n in lengths:
        out.append(tuple(pairs[at:at + (n or 0)]))
        at += n or 0
    return out
