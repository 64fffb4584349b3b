"""The ``flush`` header: which partitions the records sent together with a record went to.

At the head of the binlog the tailer reads every transaction that arrived since its last
read and sends them at once: one flush. Its records go to the partitions of their keys,
and a Kafka client sends one produce request per partition (librdkafka), so one flush
reaches a consumer as one fetch response per partition it touched, a fraction of a
millisecond apart. Consumed as they come, each is a batch of its own: a Redis round trip,
an offset commit and two wake-ups more per partition.

When a flush touches two partitions or more, the last record it sends to each of them
carries this header: the tailer process's ``token``, the flush's sequence number ``seq``
(rising within one process) and the partitions it touched. A consumer that polled the
header's record waits briefly for the other partitions' ends of the same flush
(``consumer.core.flushes.unfinished``) and applies the flush as one batch. The header is
a hint: a consumer that ignores it, or misses the rest, loses nothing but that batch.

Value (ASCII): ``<token>:<seq>:<partition>,<partition>,...``.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

HEADER = "flush"


class Flush(NamedTuple):
    token: str
    seq: int
    partitions: tuple[int, ...]


def mark(token: str, seq: int, partitions: Iterable[int]) -> bytes:
    """The header's value for flush ``seq`` of the process ``token`` (no ``:`` in it)."""
    return f"{token}:{seq}:{','.join(map(str, sorted(partitions)))}".encode("ascii")


def parse(value: bytes | None) -> Flush | None:
    """The flush a header value names; None for anything else (another producer's header
    of the same name must never stop a consumer)."""
    if not value:
        return None
    try:
        token, seq, parts = value.decode("ascii").split(":")
        return Flush(token, int(seq), tuple(int(p) for p in parts.split(",")))
    except (UnicodeDecodeError, ValueError):
        return None
