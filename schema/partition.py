"""Kafka's default partitioner (murmur2 of the key), for producers that pick partitions.

The tailer packs rows that share a partition into one record, so it must know each
row's partition before sending; it uses exactly the function the Java client and
kafka-python's DefaultPartitioner apply to the same key, so packed and unpacked
records of one row land in the same partition.
"""

from __future__ import annotations

import struct

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """MurmurHash2 as org.apache.kafka.common.utils.Utils.murmur2 computes it (unsigned)."""
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


def partition_for(key: bytes, partitions: int) -> int:
    """The partition (index into the sorted partition ids) a keyed record goes to."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
