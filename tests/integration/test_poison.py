"""The poison corpus: each kind of bad or odd input, its defined outcome, and the operator's
tools for what was dead-lettered (dlq list / replay) and for the dedup table (dedup purge)."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer

from cachesync.schema.event import ChangeEvent, Source, encode
from cachesync.schema.keys import version_key
from tests.support import cli, wait_for

pytestmark = pytest.mark.integration

TABLES = {
    "users": {"keys": ["user:{id}", "user:email:{email}"]},
    "docs": {"keys": ["doc:{tenant}:{uid}"]},
    "broken": {"keys": ["broken:{nope}"]},
    "big": {"keys": ["big:{id}"], "mode": "update", "max_value_bytes": 1000},
}


def event(lab, table, after, n, pk="id"):
    return encode(ChangeEvent(f"poison-{lab.suffix}-{n}", Source("binlog", "s", f"0-1-{n}", 0.0),
                              lab.db, table, "insert", ((pk, after[pk]),), None, after, n))


def produce(lab, values):
    producer = KafkaProducer(bootstrap_servers=lab.stack.bootstrap, acks="all")
    for v in values:
        producer.send(lab.topic, key=b"k", value=v, headers=[("id", b"x")]).get(timeout=30)
    producer.close()


def test_each_poison_kind_has_its_outcome_and_nothing_is_lost(lab):
    cfg = lab.write_config(TABLES)
    engine = lab.start_engine(cfg)
    unknown_version = json.loads(event(lab, "users", {"id": 1, "email": "a@x"}, 1))
    unknown_version["v"] = 99
    lab.cache("user:1", "doc:zürich-東京:0x00ff10", "doc:a\\,b:0x2c", "big:1", "user:email:keep")
    corpus = [
        b"{not json",                                                        # invalid_json
        json.dumps(unknown_version).encode(),                                # unsupported_version
        b'{"v": 1, "id": "x"}',                                              # invalid_envelope
        event(lab, "nope", {"id": 1}, 2),                                    # unknown_table
        event(lab, "broken", {"id": 1}, 3),                                  # missing_column
        event(lab, "users", {"id": 1, "email": None}, 4),                    # NULL key column
        event(lab, "docs", {"tenant": "zürich-東京", "uid": b"\x00\xff\x10"}, 5, pk="tenant"),
        event(lab, "docs", {"tenant": "a\\,b", "uid": b","}, 6, pk="tenant"),
        event(lab, "big", {"id": 1, "blob": "x" * 5000}, 7),                 # oversized value
    ]
    produce(lab, corpus)
    wait_for(lambda: engine.stats.consumed == len(corpus), 60, what="the corpus consumed")
    dead = lab.topic_records(lab.dlq)
    reasons = sorted(dict(r.headers)["reason"].decode() for r in dead)
    assert reasons == ["invalid_envelope", "invalid_json", "missing_column", "unknown_table",
                       "unsupported_version"]
    assert {r.value for r in dead} == set(corpus[:5])                 # the original bytes
    for r in dead:
        h = dict(r.headers)
        assert h["topic"] == lab.topic.encode() and h["attempts"] == b"1"
        assert int(h["offset"]) >= 0 and h["partition"].isdigit()
    # NULL key column: the template is skipped (counted), the other key invalidated
    assert engine.stats.null_key_skips == 1 and not lab.cached("user:1")
    assert lab.cached("user:email:keep") == ["user:email:keep"]
    # composite, binary and unicode primary keys render and invalidate
    assert not lab.cached("doc:zürich-東京:0x00ff10", "doc:a\\,b:0x2c")
    # an oversized value is not written: the key is invalidated and fenced instead
    assert not lab.cached("big:1") and engine.stats.oversized == 1
    assert lab.redis.get(version_key(f"{lab.prefix}big:1")) is not None
    assert engine.stats.dead_lettered == 5 and engine.stats.applied == 4


def test_dlq_list_then_replay_after_the_mapping_is_fixed_and_again_replays_nothing(lab):
    cfg = lab.write_config(TABLES)
    engine = lab.start_engine(cfg)
    produce(lab, [event(lab, "nope", {"id": 9}, 1), b"{not json"])
    wait_for(lambda: engine.stats.dead_lettered == 2, 60, what="two dead letters")
    listed = cli(lab, "dlq", "list", "--config", cfg, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(r["reason"] for r in rows) == ["invalid_json", "unknown_table"]
    assert {r["topic"] for r in rows} == {lab.topic} and {r["attempts"] for r in rows} == {"1"}
    table = cli(lab, "dlq", "list", "--config", cfg)
    assert "unknown_table" in table.stdout and "REASON" in table.stdout

    # The operator adds the missing table, restarts the consumer, replays that reason.
    lab.stop_engine(engine)
    fixed = lab.write_config({**TABLES, "nope": {"keys": ["nope:{id}"]}}, name="fixed.yaml")
    engine = lab.start_engine(fixed)
    lab.cache("nope:9")
    dry = cli(lab, "dlq", "replay", "--config", fixed, "--reason", "unknown_table", "--dry-run")
    assert "would replay 1 dead letter(s)" in dry.stdout and "skipped 1" in dry.stdout
    # no terminal: the progress is a log line at the end (every 5 s on a long run)
    assert f"dlq replay {lab.dlq} (dead letters read): done, 2 of 2 in" in dry.stderr, dry.stderr
    assert lab.cached("nope:9") == ["nope:9"]                      # the dry run touched nothing
    replay = cli(lab, "dlq", "replay", "--config", fixed, "--reason", "unknown_table")
    assert replay.returncode == 0 and "replayed 1 dead letter(s)" in replay.stdout, replay.stderr
    wait_for(lambda: not lab.cached("nope:9"), 60, what="the replayed event applied")
    again = cli(lab, "dlq", "replay", "--config", fixed, "--log-json")
    assert "replayed 0 dead letter(s)" in again.stdout, again.stdout + again.stderr
    progress = [json.loads(line)["progress"] for line in again.stderr.splitlines()
                if '"progress"' in line]
    assert progress[-1] == {"label": f"dlq replay {lab.dlq} (dead letters read)", "done": 0,
                            "total": 0, "elapsed_s": progress[-1]["elapsed_s"], "final": True}
    assert engine.stats.dead_lettered == 0


def test_dedup_purge_forgets_done_records_past_the_retention(lab):
    cfg = lab.write_config({"users": {"keys": ["user:{id}"]}})
    engine = lab.start_engine(cfg)
    produce(lab, [event(lab, "users", {"id": i}, i) for i in range(1, 8)])
    wait_for(lambda: lab.dedup_rows("done") == 7, 60, what="seven done records")
    kept = cli(lab, "dedup", "purge", "--config", cfg)                # default retention: 8 days
    assert "purged 0 done record(s)" in kept.stdout, kept.stdout + kept.stderr
    purged = cli(lab, "dedup", "purge", "--config", cfg, "--retention", "0", "--batch", "3")
    assert purged.returncode == 0 and "purged 7 done record(s)" in purged.stdout, purged.stderr
    assert lab.dedup_rows() == 0
    assert engine.stats.dead_lettered == 0
