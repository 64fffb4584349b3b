"""Operator tools over the dead-letter topic: list what is there, replay it.

``replay`` re-publishes dead letters to the change topic with their original
bytes and headers (the ``id`` header keeps the dedup identity, ``attempts``
counts the tries). Which letters were already replayed is remembered by a
consumer group of its own (``<group>.dlq-replay``) whose offsets are committed
only after Kafka acknowledged the re-publish, so running it twice replays
nothing twice (and the dedup table would drop a duplicate anyway).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError

from cachesync.runtime.kafka_login import refused_login_is_fatal
from cachesync.schema.errors import RetryableError

HEADER_FIELDS = ("reason", "detail", "topic", "partition", "offset", "pack_index", "attempts", "id")


@dataclass(frozen=True)
class DeadLetter:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> str:
        for k, v in self.headers:
            if k == name:
                return v.decode("utf-8", "replace")
        return ""

    def summary(self) -> dict:
        """JSON-friendly: position, the known headers, the size of the original bytes."""
        out = {"partition": self.partition, "offset": self.offset,
               "timestamp_ms": self.timestamp_ms, "bytes": len(self.value or b"")}
        out.update({name: self.header(name) for name in HEADER_FIELDS})
        return out


def read_dead_letters(bootstrap: str, topic: str, *, group: str | None = None,
                      limit: int | None = None, timeout_s: float = 30.0,
                      security: Mapping | None = None) -> list[DeadLetter]:
    """Dead letters from the start (or, with ``group``, from its committed offsets) to the end.

    ``security``: the clients' security options (kafka_security.client_security).
    """
    with _reader(bootstrap, topic, group, security) as (consumer, partitions):
        return list(_read(consumer, partitions, limit, timeout_s))


def replay_dead_letters(bootstrap: str, dlq_topic: str, target_topic: str, group: str, *,
                        accept: Callable[[DeadLetter], bool] = lambda _: True,
                        dry_run: bool = False, timeout_s: float = 60.0,
                        security: Mapping | None = None,
                        progress: Callable[[int], None] = lambda n: None,
                        total: Callable[[int], None] = lambda n: None) -> tuple[int, int]:
    """Re-publish the dead letters ``group`` has not replayed yet; returns (replayed, skipped).

    Letters ``accept`` rejects are skipped and stay in the topic, but the group moves
    past them too: replay is "everything from here on that matches". ``dry_run`` only
    counts. ``total(n)`` hears how many letters there are to read, ``progress(1)`` each
    one read. Raises RetryableError when Kafka does not acknowledge.
    """
    with _reader(bootstrap, dlq_topic, group, security) as (consumer, partitions):
        letters = list(_read(consumer, partitions, None, timeout_s, progress, total))
        chosen = [d for d in letters if accept(d)]
        if dry_run:
            return len(chosen), len(letters) - len(chosen)
        producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                                 enable_idempotence=True, client_id="cachesync-dlq-replay",
                                 **(security or {}))
        try:
            futures = [producer.send(target_topic, key=d.key, value=d.value,
                                     headers=list(d.headers)) for d in chosen]
            producer.flush(timeout=timeout_s)
            for f in futures:
                f.get(timeout=0)
        except KafkaError as e:
            raise RetryableError(f"replay not acknowledged by Kafka (nothing committed; "
                                 f"run it again): {e}") from e
        finally:
            producer.close(timeout=10)
        ends: dict[TopicPartition, int] = {}
        for d in letters:
            tp = TopicPartition(dlq_topic, d.partition)
            ends[tp] = max(ends.get(tp, 0), d.offset + 1)
        if ends:
            consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in ends.items()})
        return len(chosen), len(letters) - len(chosen)


@contextmanager
def _reader(bootstrap: str, topic: str, group: str | None, security: Mapping | None):
    """A consumer assigned to every partition of ``topic``, at ``group``'s committed
    offsets (or the beginning); closed on exit, also when positioning fails."""
    try:
        with refused_login_is_fatal(bootstrap):
            consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group,
                                     enable_auto_commit=False, auto_offset_reset="earliest",
                                     client_id="cachesync-dlq-tools", **(security or {}))
    except KafkaError as e:
        raise RetryableError(f"Kafka unavailable at {bootstrap}: {e}") from e
    try:
        try:
            ids = consumer.partitions_for_topic(topic)
        except KafkaError as e:
            raise RetryableError(f"Kafka unavailable at {bootstrap}: {e}") from e
        if not ids:
            raise RetryableError(f"dead-letter topic {topic!r} does not exist (yet)")
        partitions = [TopicPartition(topic, p) for p in sorted(ids)]
        consumer.assign(partitions)
        for tp in partitions:
            committed = consumer.committed(tp) if group else None
            if committed is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
        yield consumer, partitions
    finally:
        consumer.close()


def _read(consumer, partitions, limit: int | None, timeout_s: float,
          progress: Callable[[int], None] = lambda n: None,
          total: Callable[[int], None] = lambda n: None) -> Iterator[DeadLetter]:
    end = consumer.end_offsets(partitions)
    total(sum(max(0, end[tp] - consumer.position(tp)) for tp in partitions))
    deadline, n = time.monotonic() + timeout_s, 0
    while any(consumer.position(tp) < end[tp] for tp in partitions):
        for batch in consumer.poll(timeout_ms=200).values():
            for r in batch:
                if r.offset >= end[TopicPartition(r.topic, r.partition)]:
                    continue
                yield DeadLetter(r.partition, r.offset, r.timestamp, r.key, r.value or b"",
                                 tuple(r.headers or ()))
                progress(1)
                n += 1
                if limit is not None and n >= limit:
                    return
        if time.monotonic() > deadline:
            raise RetryableError("could not read the dead-letter topic to its end in "
                                 f"{timeout_s:.0f}s")
