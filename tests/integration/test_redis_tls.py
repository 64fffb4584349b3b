"""The pipeline writing to the devstack's redis-tls variant as its least-privilege ACL user,
through a ``rediss://user:password@host/0?ssl_ca_certs=...`` URL (CA and host name checked),
with the MySQL and the Redis dedup store."""

from __future__ import annotations

import pytest

from tests.support.variants import use_redis_tls
from tests.support import wait_for

pytestmark = pytest.mark.integration

USERS = {"users": {"keys": ["user:{id}"]}}


@pytest.mark.parametrize("dedup_store", ["mysql", "redis"])
def test_pipeline_invalidates_in_tls_redis_as_its_acl_user(lab, monkeypatch, dedup_store):
    url = use_redis_tls(lab, monkeypatch)
    lab.sql("CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(50) NOT NULL)")
    cfg = lab.write_config(USERS, consumer={"dedup_store": dedup_store})
    assert lab.settings(cfg).redis.url == url
    lab.start_tailer(cfg)
    engine = lab.start_engine(cfg)
    lab.cache("user:1", "user:2")
    lab.sql("INSERT INTO users VALUES (1, 'Ada')")
    wait_for(lambda: not lab.cached("user:1"), 60, what="invalidation in the TLS Redis")
    assert lab.cached("user:2") == ["user:2"]
    wait_for(lambda: engine.stats.applied >= 1, 60, what="the event counted as applied")
    assert engine.stats.keys_deleted == 1
    lab.stop_engine(engine)
    lab.redis.delete(lab.prefix + "user:2")
