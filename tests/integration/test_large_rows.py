"""Issue 12, size: rows over Kafka's record limit never stall the pipeline (real MariaDB,
Kafka, Redis). Row images carry only the columns the mapping needs; what still does not
fit goes out invalidate-only (update mode: a fenced delete)."""

from __future__ import annotations

import pytest

from cachesync.schema.keys import version_key
from tests.support import wait_for

pytestmark = pytest.mark.integration

DOCS_DDL = "CREATE TABLE docs (id BIGINT PRIMARY KEY, title VARCHAR(100) NOT NULL, body LONGTEXT)"
MODES = {
    "delete": {"docs": {"keys": ["doc:{id}"]}},
    "update": {"docs": {"keys": ["doc:{id}"], "mode": "update",
                        "value_columns": ["id", "title", "body"]}},
}
MB = 1024 * 1024


@pytest.fixture
def big_packets(lab):
    """Room for a 50 MB row on the server; the global setting is restored afterwards."""
    old = lab.sql("SELECT @@GLOBAL.max_allowed_packet")[0][0]
    lab.sql(f"SET GLOBAL max_allowed_packet = {128 * MB}")
    yield
    lab.sql(f"SET GLOBAL max_allowed_packet = {old}")


@pytest.mark.parametrize("mode", ["delete", "update"])
@pytest.mark.parametrize("size_mb", [3, 50])
def test_a_row_over_the_record_limit_still_invalidates_and_the_pipeline_flows(
        lab, big_packets, mode, size_mb):
    lab.sql(DOCS_DDL)
    cfg = lab.write_config(MODES[mode], consumer={"dedup_store": "redis"})
    tailer = lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache("doc:1", "doc:2")
    lab.sql(f"INSERT INTO docs VALUES (1, 'big', REPEAT('x', {size_mb * MB}))")
    lab.sql("INSERT INTO docs VALUES (2, 'small', 'y')")
    if mode == "delete":
        wait_for(lambda: not lab.cached("doc:1", "doc:2"), 60, what="both keys invalidated")
    else:
        wait_for(lambda: lab.redis.get(lab.prefix + "doc:2") == b'{"id":2,"title":"small",'
                                                               b'"body":"y"}', 60,
                 what="the small row written after the big one")
        # invalidated, no partial value written; awaited too: the two keys' records may sit
        # in different partitions, which Kafka does not order against each other
        wait_for(lambda: not lab.cached("doc:1"), 60, what="the big row's key invalidated")
        assert lab.redis.exists(version_key(lab.prefix + "doc:1"))   # and fenced
        assert "over the 1000000-byte Kafka record limit" in lab.log(tailer)
    records = lab.topic_records()
    assert max(len(r.value) for r in records) < 1_000_000
    assert "restarting from the checkpoint" not in lab.log(tailer)
    assert engine.stats.dead_lettered == 0
