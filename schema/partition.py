"""Kafka's default partitioner (murmur2 of the key), for producers that pick partitions.

The tailer packs rows that share a partition into one record, so it must know each
row's partition before sending; it uses exactly the function the Java client and
kafka-python's DefaultPartitioner apply to the same key, so packed and unpacked
records of one row land in the same partition.

``murmur2`` and ``partition_for`` are the C functions of ``cachesync._speedups`` when
``make install`` built it (``ACCELERATED``), else the pure-Python ``py_murmur2`` and
``py_partition_for``; the tests hold both to the same results.
"""

from __future__ import annotations

import operator
import struct

from cachesync import speedups

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C


MAX_PARTITIONS = 2**31 - 1     # a Kafka partition count is a positive int32


def py_murmur2(data: bytes, /) -> int:
    """MurmurHash2 as org.apache.kafka.common.utils.Utils.murmur2 computes it (unsigned),
    of the bytes of any bytes-like object (TypeError for anything else, str included)."""
    if type(data) is not bytes:
        data = memoryview(data).tobytes()
    length = len(data)
    h = _SEED ^ length
    body = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:body]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        if tail >= 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        h = ((h ^ data[body]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def py_partition_for(key: bytes, partitions: int, /) -> int:
    """The partition (index into the sorted partition ids) a keyed record goes to;
    ``partitions`` is an int in 1..MAX_PARTITIONS (TypeError, ValueError otherwise)."""
    if not 0 < operator.index(partitions) <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be in 1..{MAX_PARTITIONS}")
    return (py_murmur2(key) & 0x7FFFFFFF) % partitions


# not built (no C compiler at install) or switched off: the same functions in Python
murmur2 = getattr(speedups(), "murmur2", py_murmur2)
partition_for = getattr(speedups(), "partition_for", py_partition_for)
ACCELERATED = murmur2 is not py_murmur2
