"""`cachesync status --json` against a running pipeline on the real services."""

from __future__ import annotations

from tests.support import status_json as status, wait_for

USERS = {"users": {"keys": ["user:{id}"]}}


def test_status_json_reports_every_part(lab):
    lab.sql("CREATE TABLE users (id INT PRIMARY KEY, name VARCHAR(50))")
    cfg = lab.write_config(USERS, tailer={"heartbeat_interval_s": 0.2})
    tailer = lab.start_tailer(cfg)
    lab.spawn("consume", cfg)
    lab.sql("INSERT INTO users VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    lab.produce_raw(b"not an event")
    wait_for(lambda: lab.dedup_rows("done") >= 3, 60, interval=0.2, what="3 rows applied")

    def measured():
        rc, doc = status(lab, cfg)
        # the lag is the last heartbeat's: one measured while a starved consumer was still
        # catching up is seconds old, the next ones (every 0.2 s) of a caught-up pipeline not
        ok = (rc == 0 and doc["lag"] and doc["dead_letters"]["depth"] == 1
              and doc["lag"][0]["commit_to_apply_s"] < 5)
        return doc if ok else None
    doc = wait_for(measured, 60, interval=0.5, what="status showing a lag and 1 dead letter")

    assert set(doc) == {"schema_version", "checkpoints", "lag", "kafka", "dedup", "dead_letters",
                        "errors"}
    assert doc["schema_version"] == 1 and doc["errors"] == {}
    mine = [c for c in doc["checkpoints"] if c["name"] == f"tailer-{lab.suffix}"]
    assert len(mine) == 1
    assert set(mine[0]) == {"name", "server", "position", "updated_at", "age_s", "active",
                            "active_since"}
    assert mine[0]["active"].endswith(f":{tailer.pid}") and mine[0]["active_since"]
    assert mine[0]["position"].startswith(("gtid=", "mysql-bin")) and mine[0]["age_s"] < 30
    (lag,) = doc["lag"]
    assert lag["namespace"] == f"g-{lab.suffix}" and lag["source"] == f"tailer-{lab.suffix}"
    assert 0 <= lag["commit_to_apply_s"] < 5 and lag["measured_s_ago"] < 30

    # no backlog is a moment while heartbeats arrive every 0.2 s and a loaded consumer commits
    # its offsets after them; with the tailer stopped it is a state the consumer reaches and keeps
    tailer.terminate()
    assert tailer.wait(60) == 0

    def caught_up():
        rc, doc = status(lab, cfg)
        return doc if rc == 0 and doc["kafka"]["consumer_lag"] == 0 else None
    doc = wait_for(caught_up, 60, interval=0.5, what="status showing no backlog")

    assert doc["errors"] == {}
    assert doc["kafka"]["topic"] == lab.topic and doc["kafka"]["group"] == f"g-{lab.suffix}"
    assert set(doc["kafka"]["partitions"]) == {"0", "1", "2"}
    d = doc["dedup"]
    assert d["namespace"] == f"g-{lab.suffix}" and d["total"] == d["done"] + d["claimed"]
    assert d["done"] >= 3 + 1        # the rows plus at least one heartbeat
    assert doc["dead_letters"] == {"topic": lab.dlq, "depth": 1}


def test_status_names_an_unreachable_kafka_and_exits_1(lab):
    cfg = lab.write_config(USERS)
    returncode, doc = status(lab, cfg, {"CACHESYNC_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert returncode == 1
    assert set(doc["errors"]) == {"kafka", "dead_letters"}
    assert doc["kafka"] is None and doc["dead_letters"] is None
    assert doc["dedup"] == {"namespace": f"g-{lab.suffix}", "claimed": 0, "done": 0, "total": 0}
