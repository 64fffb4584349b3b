"""Offsets to commit after a batch: one past the last record of each partition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Record:
    """A transport-neutral Kafka record (the adapter converts from kafka-python's)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


def commit_offsets(records: Iterable[Record]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): next offset}`` for a fully processed batch."""
    out: dict[tuple[str, int], int] = {}
    for r in records:
        tp = (r.topic, r.partition)
        out[tp] = max(out.get(tp, 0), r.offset + 1)
    return out
