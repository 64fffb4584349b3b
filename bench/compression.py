"""Kafka compression codecs on cachesync's own records: bytes on the wire and CPU.

The tailer packs up to ``tailer.pack_rows`` row events into one record of up to
``tailer.pack_bytes``; the producer compresses its record batches, and every consumer
decompresses them. This builds the record batches kafka-python builds (v2, one per packed
record, as ``KafkaPublisher`` sends them) for each codec from realistic row events, then
reads them back, and reports per codec: the size beside the uncompressed batch, the
producer's cost (build + compress) and the consumer's (decompress + iterate) per event.
At the head of the binlog a batch holds one small record (a read's rows of one partition),
so it also reports each codec's cost per batch of one single-row record
(``head_*_us_per_batch``): what a codec costs whatever the batch holds (zstd sets up a
compression context of some hundred kilobytes per batch).
No broker is involved; the codec's cost is what differs between the choices.
"""

from __future__ import annotations

import random
import time

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from bench.common import log
from cachesync.schema.event import ChangeEvent, Source, encode, encode_pack

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PACK_ROWS = 500                  # tailer.pack_rows default
HEAD_BATCHES = {"quick": 500, "full": 3000}     # single-record batches timed per codec
BATCH_BYTES = 1024 * 1024        # room for one packed record


def _events(n: int, rng: random.Random) -> list[bytes]:
    """Row updates of a users-like table: ids, e-mail, name, status, counters, timestamps."""
    out = []
    for i in range(n):
        uid = rng.randrange(1, 10_000_000)
        before = {"id": uid, "email": f"user{uid}@example.com", "name": f"User {uid}",
                  "status": rng.choice(["active", "idle", "locked"]),
                  "balance": rng.randrange(0, 10**7), "login_count": rng.randrange(1000),
                  "updated_at": f"2026-11-2{rng.randrange(10)} 1{rng.randrange(10)}:00:00"}
        after = {**before, "login_count": before["login_count"] + 1,
                 "updated_at": "2026-11-27 02:00:00"}
        event = ChangeEvent(id=f"mariadb:1:0-1-{1000 + i}:0", db="shop", table="users",
                            op="update", pk=(("id", uid),), before=before, after=after,
                            version=1000 + i,
                            source=Source("binlog", "mariadb:1", f"0-1-{1000 + i}",
                                          1795000000.0 + i / 1000))
        out.append(encode(event))
    return out


def _build(codec: int, records: list[bytes]) -> list[bytes]:
    batches = []
    for value in records:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=BATCH_BYTES)
        b.append(0, timestamp=None, key=b"shop.users:1", value=value, headers=[("id", b"x")])
        batches.append(bytes(b.build()))
    return batches


def _read(batches: list[bytes]) -> int:
    n = 0
    for raw in batches:
        for record in DefaultRecordBatch(bytearray(raw)):
            n += len(record.value)
    return n


def _timed(codec: int, records: list[bytes], runs: int) -> tuple[list[bytes], float, float]:
    """The batches of ``records`` (one record each) and the medians over ``runs`` of the
    seconds taken to build them and to read them back."""
    enc, dec = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        batches = _build(codec, records)
        t1 = time.perf_counter()
        assert _read(batches) == sum(len(r) for r in records)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    med = lambda xs: sorted(xs)[len(xs) // 2]     # noqa: E731
    return batches, med(enc), med(dec)


def run(stack, quick: bool, runs: int) -> dict:
    rng = random.Random(7)
    packs = 10 if quick else 40
    events = _events(PACK_ROWS * packs, rng)
    records = [encode_pack(events[i:i + PACK_ROWS]) for i in range(0, len(events), PACK_ROWS)]
    raw_bytes = sum(len(r) for r in records)
    out: dict = {"events": len(events), "records": len(records), "record_bytes": raw_bytes,
                 "codecs": {}}
    for name, codec in CODECS.items():
        batches, enc, dec = _timed(codec, records, runs)
        wire = sum(len(b) for b in batches)
        head = events[:HEAD_BATCHES["quick" if quick else "full"]]
        _, head_enc, head_dec = _timed(codec, head, runs)
        out["codecs"][name] = {"wire_bytes": wire, "ratio_vs_none": None,
                               "produce_us_per_event": round(enc / len(events) * 1e6, 2),
                               "consume_us_per_event": round(dec / len(events) * 1e6, 2),
                               "head_produce_us_per_batch": round(head_enc / len(head) * 1e6, 2),
                               "head_consume_us_per_batch": round(head_dec / len(head) * 1e6, 2)}
        log(f"compression {name}: {wire:,} bytes, {out['codecs'][name]}")
    none = out["codecs"]["none"]["wire_bytes"]
    for figures in out["codecs"].values():
        figures["ratio_vs_none"] = round(figures["wire_bytes"] / none, 3)
    return out
