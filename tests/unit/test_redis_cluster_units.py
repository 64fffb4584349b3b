"""Hash slots and companion key names (schema.slots, schema.keys): every companion key lands in
its key's slot, whatever braces the key holds; the tag table is complete and deterministic.
And the redis.cluster settings, and which cluster errors are retried."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given, strategies as st
from redis.crc import key_slot as redis_py_slot

from cachesync.runtime.config import RedisSettings, Secret, load
from cachesync.consumer.adapters.redis_cache import redis_call
from cachesync.consumer.adapters.redis_cluster import (WAIT_ON_REPLICA, ReplicaWait, ReplicaWaitError,
                                                       check_wait, run_pipeline)
from cachesync.schema.errors import ConfigError, RetryableError
from cachesync.schema.keys import (DEDUP_SLOTS, companion_owner, dedup_key, lease_key, lease_keys,
                                   legacy_lease_key, legacy_version_key, version_key)
from cachesync.schema import slots
from cachesync.schema.slots import SLOTS, TAG_ALPHABET, hashed_part, key_slot, slot_tags

BRACED = ["user:1", "{user1000}.following", "a{}{b}", "a{x}{y}", "{}", "{", "}", "x}{y}",
          "{{a}}", "user:{id}", "{a}b", "é{ü}", ""]


def test_the_tag_table_reaches_every_slot_with_short_brace_free_tags():
    tags = slot_tags()
    assert len(tags) == SLOTS
    assert all(key_slot(tag) == slot for slot, tag in enumerate(tags))
    assert all(1 <= len(t) <= 3 and set(t) <= set(TAG_ALPHABET) for t in tags)
    assert tags[:3] == ("06S", "Qi", "5L5")       # deterministic: pinned, clients depend on it


@pytest.mark.parametrize("key, hashed", [
    (b"user:1", b"user:1"), (b"{user1000}.following", b"user1000"), (b"a{}{b}", b"a{}{b}"),
    (b"a{x}{y}", b"x"), (b"{", b"{"), (b"x}{y}", b"y"), (b"{{a}}", b"{a"),
])
def test_only_the_first_non_empty_braces_are_hashed(key, hashed):
    assert hashed_part(key) == hashed


@pytest.mark.parametrize("key", BRACED)
def test_slots_agree_with_redis_py(key):
    assert key_slot(key) == redis_py_slot(key.encode())


@pytest.mark.parametrize("key", BRACED)
def test_companions_share_the_slot_of_their_key(key):
    for name in (lease_key(key), version_key(key)):
        assert redis_py_slot(name.encode()) == redis_py_slot(key.encode())
    assert lease_key(key).startswith("cachesync:lease:{") and lease_key(key).endswith(key)


@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode()))
def test_any_key_bytes_and_its_lease_share_a_slot_and_the_owner_is_recovered(key):
    name = lease_key(key)
    assert redis_py_slot(name) == redis_py_slot(key)
    assert companion_owner(name, "cachesync:lease:") == key


_NAMERS = [pytest.param(False, id="python"), pytest.param(True, id="c", marks=[] if slots.ACCELERATED
          else [pytest.mark.skip(reason="cachesync._speedups is not built or switched off")])]


@pytest.mark.parametrize("compiled", _NAMERS)
@given(st.lists(st.text(max_size=30) | st.binary(max_size=30) |
                st.sampled_from(["{", "}", "{}", "a{b}c", "{{x}}", "é{ü}", "\udcff", "\ud800x"]),
                max_size=12))
def test_a_list_of_keys_gets_each_keys_own_companion_and_slot(compiled, keys):
    """companions names what companion names, key by key, compiled or not (a list with a
    key the compiled namer does not take, bytes or a lone surrogate, is named in Python)."""
    slots.use_python(not compiled)
    try:
        expected, error = None, None
        try:
            expected = [lease_key(k) for k in keys]
        except UnicodeEncodeError as e:        # a surrogate no encoding holds: both refuse
            error = e
        if error is not None:
            with pytest.raises(UnicodeEncodeError):
                lease_keys(keys)
        else:
            named = lease_keys(keys)
            assert named == expected and [type(n) for n in named] == [type(n) for n in expected]
    finally:
        slots.use_python(False)


def test_legacy_names_and_foreign_names_are_not_owned_companions():
    assert companion_owner(legacy_lease_key(b"user:1"), "cachesync:lease:") is None
    assert companion_owner(b"cachesync:lease:{zz}user:1", "cachesync:lease:") is None   # wrong tag
    assert legacy_version_key("user:1") == "cachesync:ver:user:1"


def test_dedup_records_spread_over_evenly_spaced_slots_and_stay_put():
    keys = [dedup_key("g", f"binlog:s:0-1-{i}:0") for i in range(5000)]
    slots = {redis_py_slot(k.encode()) for k in keys}
    assert len(slots) == DEDUP_SLOTS
    assert all(s % (SLOTS // DEDUP_SLOTS) == 0 for s in slots)
    assert dedup_key("g", "m1") == dedup_key("g", "m1") != dedup_key("h", "m1")
    assert dedup_key("g", "m1").startswith("cachesync:dedup:g:{") and dedup_key("g", "m1").endswith("}m1")


# -- the settings --------------------------------------------------------------------------------
@pytest.mark.parametrize("values, message", [
    ({"cluster": True, "sentinels": "s1:26379", "master_name": "m"},
     "redis.cluster: a cluster has no sentinels"),
    ({"cluster": True, "url": Secret("unix:///run/redis.sock")}, "redis.cluster: the URL must be"),
    ({"cluster_nodes": "node-2:6379"}, "redis.cluster_nodes: only with redis.cluster"),
    ({"cluster": True, "cluster_nodes": "node-2"}, "expected host:port"),
])
def test_cluster_settings_that_cannot_work_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        RedisSettings(**values)


def test_cluster_settings_load_from_the_environment_and_show_in_the_repr(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("redis:\n  url: redis://app:hunter2@node-1:6379/0\n"
                    "tables:\n  app.users:\n    keys: [\"user:{id}\"]\n")
    settings = load(str(path), {"CACHESYNC_REDIS_CLUSTER": "true",
                                "CACHESYNC_REDIS_CLUSTER_NODES": "node-2:6379,node-3:6379",
                                "CACHESYNC_REDIS_WAIT_REPLICAS": "1",
                                "CACHESYNC_REDIS_LEGACY_COMPANION_KEYS": "false"})
    r = settings.redis
    assert (r.cluster, r.cluster_nodes, r.wait_replicas, r.wait_timeout_ms,
            r.legacy_companion_keys) == (True, "node-2:6379,node-3:6379", 1, 1000, False)
    assert "hunter2" not in repr(r) and "cluster=True" in repr(r)


@pytest.mark.parametrize("replies, refused", [([1, 1, 1], False), ([1, 0, 1], True), ([], False)])
def test_a_wait_short_of_replicas_fails_as_a_connection_error(replies, refused):
    wait = ReplicaWait(1, 100)
    if refused:
        with pytest.raises(redis.ConnectionError, match="0 of the 1 replica"):
            check_wait(replies, wait)
    else:
        check_wait(replies, wait)


class _WaitOnReplica:
    """A client whose pipeline's WAIT reached a node that is a replica now."""

    def pipeline(self, transaction):
        client = self

        class Pipe(list):
            def execute_command(self, *args, **options):
                self.append(args)

            def execute(self):
                client.sent = list(self)
                raise redis.ResponseError(f"Command # 2 (WAIT 1 1000) of pipeline caused error: "
                                          f"{WAIT_ON_REPLICA}. Please also note ...")
        return Pipe()


def test_a_wait_that_reached_a_node_now_a_replica_is_retried():
    client = _WaitOnReplica()
    with pytest.raises(ReplicaWaitError, match="a replica now") as raised:
        run_pipeline(client, lambda pipe: pipe.execute_command("UNLINK", "k"), (),
                     ReplicaWait(1, 1000))
    assert client.sent == [("UNLINK", "k"), ("WAIT", 1, 1000)]
    with pytest.raises(RetryableError):          # the engines retry it
        redis_call(lambda: (_ for _ in ()).throw(raised.value))
    # without redis.wait_replicas the same reply is not this case: raised as it came
    with pytest.raises(redis.ResponseError) as plain:
        run_pipeline(client, lambda pipe: pipe.execute_command("UNLINK", "k"))
    assert not isinstance(plain.value, ReplicaWaitError)


# -- errors of a cluster that reshards or fails over -----------------------------------------
@pytest.mark.parametrize("error", [
    redis.exceptions.ClusterError("TTL exhausted."),         # TRYAGAIN until a slot's move ends
    redis.exceptions.TryAgainError("Multiple keys request during rehashing of slot"),
    redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
    redis.exceptions.SlotNotCoveredError("Slot 7 is not covered by the cluster."),
])
def test_a_resharding_or_failing_over_cluster_is_retryable(error):
    def fail():
        raise error
    with pytest.raises(RetryableError, match="resharding or failing over"):
        redis_call(fail)


def test_a_client_side_cross_slot_mistake_is_not_retried():
    def fail():
        raise redis.exceptions.RedisClusterException("UNLINK - all keys must map to the same key slot")
    with pytest.raises(redis.exceptions.RedisClusterException):
        redis_call(fail)
