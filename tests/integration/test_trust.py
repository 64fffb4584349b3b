"""The trust boundary on real Kafka, Redis and MariaDB: for each rule, a malicious record on the
change topic is dead-lettered (python engine, and the Spark engine's per-partition applier),
cachesync's own keys and keys outside the allow-list survive, the allowed keys are invalidated."""

from __future__ import annotations

import logging

import pytest
import yaml
from kafka import KafkaProducer
from pyspark.sql import Row

from cachesync.consumer.spark.applier import ApplyConfig, consume_partition
from cachesync.wiring import SettingsAdapters
from cachesync.schema.event import ChangeEvent, Source, encode
from tests.support import wait_for

pytestmark = pytest.mark.integration

TABLES = {"users": {"keys": ["user:{id}"]},
          "raw": {"keys": ["{k}"]},        # the lab prefixes it; trust_config takes that off
          "board": {"explicit_keys": ["board:{n}"]}}


def trust_config(lab) -> str:
    """The lab's config, with a bare ``{k}`` template (renders any text, unprefixed)."""
    path = lab.write_config(TABLES)
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc["tables"][f"{lab.db}.raw"]["keys"] = ["{k}"]
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def outbox_event(lab, n: int, aggregate: str, keys: list[str]) -> bytes:
    return encode(ChangeEvent(f"trust-{lab.suffix}-{n}", Source("outbox", "s", str(n), 0.0, 0),
                              lab.db, aggregate, "update", (("aggregate_id", str(n)),), None,
                              {}, n, keys=tuple(keys)))


def row_event(lab, n: int, table: str, after: dict) -> bytes:
    return encode(ChangeEvent(f"trust-{lab.suffix}-{n}", Source("binlog", "s", f"0-1-{n}", 0.0),
                              lab.db, table, "insert", (("id", n),), None, after, n))


def corpus(lab) -> tuple[list[bytes], dict]:
    """Malicious records (each rule, explicit and rendered) and one legitimate event; the
    Redis keys they aim at."""
    p = lab.prefix
    targets = {"version": f"cachesync:ver:{p}user:1", "lease": f"cachesync:lease:{p}user:2",
               "session": f"{p}session:1", "other": f"{p}other:1"}
    records = [
        outbox_event(lab, 1, "board", [targets["version"]]),                # reserved, explicit
        row_event(lab, 2, "raw", {"id": 2, "k": targets["lease"]}),           # reserved, rendered
        outbox_event(lab, 3, "board", [f"{p}board:1", targets["session"]]),   # not allowed
        outbox_event(lab, 4, "unmapped", [targets["other"]]),                 # no allow-list
        outbox_event(lab, 5, "board", [f"{p}board:5"]),                       # legitimate
    ]
    return records, targets


EXPECTED_REASONS = ["key_not_allowed", "key_not_allowed", "reserved_key", "reserved_key"]


def seed(lab, targets: dict) -> None:
    for key in targets.values():
        lab.redis.set(key, b"precious", ex=600)
    lab.cache("board:1", "board:5")


def assert_refused(lab, targets: dict, tally: dict) -> None:
    """Every target survived, the allowed keys were invalidated, the refusals counted."""
    assert all(lab.redis.get(key) == b"precious" for key in targets.values())
    # the legitimate event's key, and the allowed key of the refused event 3 (salvaged)
    assert not lab.cached("board:5", "board:1")
    untrusted = {(table, reason): n for (c, table, reason), n in tally.items()
                 if c == "untrusted_keys"}
    assert untrusted == {(f"{lab.db}.board", "reserved_key"): 1,
                         (f"{lab.db}.raw", "reserved_key"): 1,
                         (f"{lab.db}.board", "key_not_allowed"): 1,
                         (f"{lab.db}.unmapped", "key_not_allowed"): 1}


def dead_reasons(lab) -> list[str]:
    return sorted(dict(r.headers)["reason"].decode() for r in lab.topic_records(lab.dlq))


def test_python_engine_dead_letters_each_untrusted_record(lab, caplog):
    cfg = trust_config(lab)
    records, targets = corpus(lab)
    seed(lab, targets)
    engine = lab.start_engine(cfg)
    producer = KafkaProducer(bootstrap_servers=lab.stack.bootstrap, acks="all")
    with caplog.at_level(logging.WARNING):
        for value in records:
            producer.send(lab.topic, key=b"k", value=value).get(timeout=30)
        producer.close()
        wait_for(lambda: engine.stats.consumed == len(records), 60, what="the corpus consumed")
        wait_for(lambda: len(lab.topic_records(lab.dlq)) == 4, 60, what="four dead letters")
    assert dead_reasons(lab) == EXPECTED_REASONS
    assert {r.value for r in lab.topic_records(lab.dlq)} == set(records[:4])   # original bytes
    assert engine.stats.applied == 1 and engine.stats.dead_lettered == 4
    assert_refused(lab, targets, engine.tables.snapshot())
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for table in ("board", "raw", "unmapped"):
        assert f"{lab.db}.{table}" in warned


def test_spark_partition_applier_dead_letters_each_untrusted_record(lab):
    """The function Spark's Python workers run per partition, on real Redis, MariaDB (dedup)
    and Kafka (dead letters); rows shaped as the Kafka source selects them."""
    cfg = trust_config(lab)
    records, targets = corpus(lab)
    seed(lab, targets)
    rows = [Row(topic=lab.topic, partition=0, offset=i, key=bytearray(b"k"),
                value=bytearray(value), headers=[], timestamp_ms=0)    # KAFKA_SELECT's order
            for i, value in enumerate(records)]
    [out] = consume_partition(rows, ApplyConfig(SettingsAdapters(lab.settings(cfg))), batch_id=0)
    assert out["stats"]["dead_lettered"] == 4 and out["stats"]["applied"] == 1
    wait_for(lambda: len(lab.topic_records(lab.dlq)) == 4, 60, what="four dead letters")
    assert dead_reasons(lab) == EXPECTED_REASONS
    assert_refused(lab, targets, out["tables"])
