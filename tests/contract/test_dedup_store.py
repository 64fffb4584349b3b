"""One contract, three backends: the in-memory dedup store and the real MySQL and Redis ones."""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Iterator

import pytest
import redis

from cachesync.consumer.adapters.memory import MemoryDedupStore
from cachesync.consumer.adapters.mysql_dedup import CLAIM_CHUNK, MySQLDedupStore, rows_sql
from cachesync.consumer.adapters.mysql_dedup_compact import CompactMySQLDedupStore
from cachesync.consumer.adapters import redis_dedup
from cachesync.consumer.adapters.redis_dedup import RedisDedupStore
from cachesync.consumer.hooks import purge_dedup
from cachesync.consumer.core.dedup import ClaimState
from cachesync.runtime.mysql import MySQLParams
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.keys import dedup_key, dedup_retention_key
from tests.support import wait_for
from tests.support.variants import redis_cluster

O, D, B = ClaimState.OWNED, ClaimState.DONE, ClaimState.BUSY


def compact_params(stack) -> Iterator[MySQLParams]:
    """A state database of its own (its windows are no other test's) and an account with the
    state grants plus the compact layout's ALTER, DROP on it; both dropped afterwards."""
    suffix = uuid.uuid4().hex[:6]
    user, db, password = f"cscompact{suffix}", f"cs_compact_{suffix}", secrets.token_hex(12)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP ON {db}.* "
                    f"TO '{user}'@'127.0.0.1'")
    env = stack.env
    yield MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]), user,
                      password, database=db)
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP USER '{user}'@'127.0.0.1'")
        cur.execute(f"DROP DATABASE {db}")


@pytest.fixture
def compact_account(stack):
    yield from compact_params(stack)


ROW_PURGING = ["memory", "mysql", "redis", "redis-cluster"]


@pytest.fixture(params=ROW_PURGING[:2] + ["mysql-compact"] + ROW_PURGING[2:])
def make_store(request):
    """A factory: stores made by one call share a namespace (two consumers, one group)."""
    yield from _factory(request)


@pytest.fixture(params=ROW_PURGING)
def make_purging_store(request):
    """The stores that purge record by record (the compact layout drops whole windows:
    test_compact_* below)."""
    yield from _factory(request)


def _factory(request):
    if request.param == "memory":
        shared = MemoryDedupStore()
        yield lambda: shared
        return
    stack = request.getfixturevalue("stack")
    env = stack.env
    # quote and percent sign: the MySQL store inlines the namespace, escaped, in its claim
    ns = f"contract-{uuid.uuid4().hex[:8]}-%s'x"
    if request.param == "mysql":
        with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
            params = MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                                 env["CACHESYNC_MYSQL_USER"], f.read().strip(),
                                 database="cachesync")
        build = lambda: MySQLDedupStore(params, ns)                      # noqa: E731
    elif request.param == "mysql-compact":
        account = request.getfixturevalue("compact_account")
        build = lambda: CompactMySQLDedupStore(account, ns)              # noqa: E731
    elif request.param == "redis":
        build = lambda: RedisDedupStore(env["CACHESYNC_REDIS_URL"], ns, retention_s=3600)  # noqa: E731
    else:   # a batch's records over many slots of three masters
        build = lambda: RedisDedupStore("", ns, retention_s=3600, client=redis_cluster())  # noqa: E731
    stores = []

    def make():
        stores.append(build())
        return stores[-1]
    yield make
    for s in stores:
        s.close()


def test_new_ids_are_owned_and_done_after_confirm(make_store):
    store = make_store()
    token, states = store.claim(["a", "b"], lease_s=30)
    assert dict(states) == {"a": O, "b": O}
    store.confirm(token, ["a", "b"])
    _, states = store.claim(["a", "b", "c"], lease_s=30)
    assert dict(states) == {"a": D, "b": D, "c": O}


def test_a_live_claim_is_busy_for_others(make_store):
    first, second = make_store(), make_store()
    first.claim(["x"], lease_s=30)
    _, states = second.claim(["x"], lease_s=30)
    assert dict(states) == {"x": B}


def test_confirm_with_a_stale_token_does_not_mark_done(make_store):
    store = make_store()
    store.claim(["y"], lease_s=30)
    store.confirm("not-the-token", ["y"])
    _, states = make_store().claim(["y"], lease_s=30)
    assert dict(states) == {"y": B}


def test_confirm_of_an_unclaimed_or_foreign_done_id_changes_nothing(make_store):
    store, other = make_store(), make_store()
    token, _ = store.claim(["z"], lease_s=30)
    store.confirm(token, ["never-claimed"])
    _, states = other.claim(["never-claimed"], lease_s=30)
    assert dict(states) == {"never-claimed": O}           # not created as done
    store.confirm(token, ["z"])
    store.confirm("not-the-token", ["z"])
    _, states = other.claim(["z"], lease_s=30)
    assert dict(states) == {"z": D}                       # still done


def let_leases_expire(store) -> None:
    """Past a 0.2 s lease: the in-memory store's clock moves on, a server's is waited for."""
    if isinstance(store, MemoryDedupStore):
        store._clock = lambda: time.monotonic() + 1   # no real waiting for the in-memory clock
    else:
        time.sleep(0.3)   # the lease is measured by the server's clock: let it pass


def test_an_expired_claim_is_taken_over(make_store, request):
    first, second = make_store(), make_store()
    first.claim(["z"], lease_s=0.2)
    let_leases_expire(first)
    token, states = second.claim(["z"], lease_s=30)
    assert dict(states) == {"z": O}
    assert dict(make_store().claim(["z"], lease_s=30)[1]) == {"z": B}   # the takeover renewed the lease
    second.confirm(token, ["z"])
    assert dict(make_store().claim(["z"], lease_s=30)[1]) == {"z": D}


def test_a_batch_mixing_new_done_busy_and_expired_ids(make_store):
    """The MySQL store claims an all-new batch in one statement and falls back to the
    full claim when some ids exist: each id still gets its own state."""
    first, second = make_store(), make_store()
    token, _ = first.claim(["done"], lease_s=30)
    first.confirm(token, ["done"])
    first.claim(["busy"], lease_s=30)
    first.claim(["expired"], lease_s=0.2)
    let_leases_expire(first)
    token, states = second.claim(["new-1", "done", "busy", "expired", "new-2"], lease_s=30)
    assert dict(states) == {"new-1": O, "done": D, "busy": B, "expired": O, "new-2": O}
    second.confirm(token, ["new-1", "expired", "new-2"])
    _, states = make_store().claim(["new-1", "expired", "new-2", "busy"], lease_s=30)
    assert dict(states) == {"new-1": D, "expired": D, "new-2": D, "busy": B}


def test_batches_larger_than_one_statement(make_store):
    ids = [f"id-{i}" for i in range(CLAIM_CHUNK * 2 + 5)]
    store = make_store()
    token, states = store.claim(ids, lease_s=30)
    assert set(states) == set(ids) and set(states.values()) == {O}
    store.confirm(token, ids)
    assert set(make_store().claim(ids, lease_s=30)[1].values()) == {D}


def test_purge_removes_only_done_records_past_the_retention_in_bounded_batches(make_purging_store):
    make_store = make_purging_store
    store = make_store()
    token, _ = store.claim([f"p{i}" for i in range(5)] + ["open"], lease_s=30)
    store.confirm(token, [f"p{i}" for i in range(5)])          # "open" stays claimed
    assert store.purge(retention_s=3600, limit=10) == 0         # nothing is that old
    if isinstance(store, MemoryDedupStore):
        store._clock = lambda: time.monotonic() + 1
    else:
        time.sleep(0.01)   # done_at is the server's clock, to the microsecond: let it move on
    assert [store.purge(retention_s=0, limit=2) for _ in range(4)] == [2, 2, 1, 0]
    _, states = make_store().claim([f"p{i}" for i in range(5)] + ["open"], lease_s=30)
    assert dict(states) == {**{f"p{i}": O for i in range(5)}, "open": B}   # forgotten; claim kept


def test_purge_dedup_loops_batches_until_a_short_one(make_purging_store):
    make_store = make_purging_store
    store = make_store()
    ids = [f"q{i}" for i in range(7)]
    token, _ = store.claim(ids, lease_s=30)
    store.confirm(token, ids)
    if isinstance(store, MemoryDedupStore):
        store._clock = lambda: time.monotonic() + 1
    else:
        time.sleep(0.01)
    assert purge_dedup(store, retention_s=0, batch=3, max_batches=2) == 6
    assert purge_dedup(store, retention_s=0, batch=3) == 1


# -- the Redis store scans for old records only while a longer retention is in use ---------
class _CountingRedis(redis.Redis):
    """A real client that counts the SCAN calls it makes (scan_iter calls scan)."""
    scans = 0

    def scan(self, *args, **kwargs):
        self.scans += 1
        return super().scan(*args, **kwargs)


def test_redis_purge_scans_the_keyspace_only_while_a_longer_retention_is_in_use(stack):
    """Records carry the retention as their TTL: a purge with a retention as long as every
    writer's has nothing to do, and must not SCAN a cache of millions of keys for it."""
    url, ns = stack.env["CACHESYNC_REDIS_URL"], f"contract-{uuid.uuid4().hex[:8]}"
    client = _CountingRedis.from_url(url)
    short = RedisDedupStore(url, ns, retention_s=600, client=client)
    longer = RedisDedupStore(url, ns, retention_s=900)  # a consumer still on the old setting
    try:
        token, _ = short.claim(["a", "b"], lease_s=30)
        short.confirm(token, ["a", "b"])
        assert short.purge(retention_s=600, limit=10) == 0
        assert client.scans == 0                            # no record outlives 600 s
        token, _ = longer.claim(["c"], lease_s=30)
        longer.confirm(token, ["c"])
        short._renewed_at = None
        short.claim(["d"], lease_s=30)                      # a shorter writer leaves it
        assert int(client.get(dedup_retention_key(ns))) == 900_000
        # it outlives every record written before the longer writer's next renewal
        renew_ms = redis_dedup.RETENTION_RENEW_S * 1000
        assert 900_000 + renew_ms < client.pttl(dedup_retention_key(ns)) <= 900_000 + 2 * renew_ms
        time.sleep(0.01)
        assert short.purge(retention_s=0, limit=10) == 3    # a, b, c: done, scanned for
        assert client.scans > 0
        # the longer writer stopped and its value expired with its records: the shorter
        # writer's next renewal stores its own, and the purge has nothing to scan for again
        client.delete(dedup_retention_key(ns))
        short._renewed_at = None
        short.claim(["e"], lease_s=30)
        client.scans = 0
        assert short.purge(retention_s=600, limit=10) == 0
        assert client.scans == 0
    finally:
        longer.close()
        client.delete(dedup_retention_key(ns), *(dedup_key(ns, i) for i in "abcde"))
        short.close()


# -- the MySQL store's own layout: a claim is confirmed by one row ------------------------

@pytest.fixture
def mysql_store(stack):
    """A MySQL store on a fresh namespace, and the admin's view of its two tables."""
    env = stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        params = MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                             env["CACHESYNC_MYSQL_USER"], f.read().strip(), database="cachesync")
    ns = f"layout-{uuid.uuid4().hex[:8]}"
    store = MySQLDedupStore(params, ns)
    admin = stack.admin("cachesync")

    def sql(statement, args=()):
        with admin.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall()
    yield store, ns, sql
    store.close()
    admin.close()


def test_confirming_a_whole_claim_writes_one_row_and_leaves_the_ids_alone(mysql_store):
    store, ns, sql = mysql_store
    ids = [f"w{i}" for i in range(50)]
    token, _ = store.claim(ids, lease_s=30)
    store.confirm(token, ids)
    assert sql("SELECT COUNT(*) FROM cachesync_dedup_done WHERE ns = %s", (ns,)) == ((1,),)
    assert sql("SELECT status, COUNT(*) FROM cachesync_dedup WHERE ns = %s GROUP BY status",
               (ns,)) == (("claimed", 50),)
    assert sql(f"SELECT status, COUNT(*) FROM {rows_sql()} WHERE ns = %s GROUP BY status",
               (ns,)) == (("done", 50),)
    assert store.counts() == {"claimed": 0, "done": 50}
    assert set(store.claim(ids, lease_s=30)[1].values()) == {D}


def test_records_an_earlier_version_wrote_keep_their_meaning(mysql_store):
    """Before the done table, a confirm set each id's status to 'done' (done_at: when),
    and a claim left done_at NULL: both still read, purge and take over as they did."""
    store, ns, sql = mysql_store
    sql("INSERT INTO cachesync_dedup (ns, msg_id, status, claim_token, claimed_until, done_at) "
        "VALUES (%s, 'old-done', 'done', REPEAT('a', 32), NOW(6), NOW(6) - INTERVAL 1 HOUR), "
        "(%s, 'old-open', 'claimed', REPEAT('b', 32), NOW(6) - INTERVAL 1 SECOND, NULL)",
        (ns, ns))
    assert store.counts() == {"claimed": 1, "done": 1}
    token, states = store.claim(["old-done", "old-open", "new"], lease_s=30)
    assert dict(states) == {"old-done": D, "old-open": O, "new": O}
    store.confirm(token, ["old-open", "new"])
    assert store.counts() == {"claimed": 0, "done": 3}
    time.sleep(0.01)   # done_at is the server's clock, to the microsecond: let it move on
    assert store.purge(retention_s=0, limit=10) == 3
    assert sql("SELECT COUNT(*) FROM cachesync_dedup_done WHERE ns = %s", (ns,)) == ((0,),)
    assert store.counts() == {"claimed": 0, "done": 0}


def test_purge_takes_a_claim_apart_over_several_calls(mysql_store):
    """A claim with more ids than the purge's limit: its done row goes with its last id."""
    store, ns, sql = mysql_store
    for batch in ("a", "b"):
        ids = [f"{batch}{i}" for i in range(5)]
        token, _ = store.claim(ids, lease_s=30)
        store.confirm(token, ids)
    time.sleep(0.01)
    assert [store.purge(retention_s=0, limit=3) for _ in range(5)] == [3, 3, 3, 1, 0]
    assert sql("SELECT COUNT(*) FROM cachesync_dedup_done WHERE ns = %s", (ns,)) == ((0,),)


def test_a_claim_of_new_ids_commits_as_it_returns(mysql_store):
    """The common claim is one autocommitted INSERT: another connection sees the rows at
    once, under the claim's token (no transaction left open on the store's connection)."""
    store, ns, sql = mysql_store
    ids = [f"n{i}" for i in range(CLAIM_CHUNK + 10)]
    token, states = store.claim(ids, lease_s=30)
    assert set(states.values()) == {O}
    assert sql("SELECT claim_token, COUNT(*) FROM cachesync_dedup WHERE ns = %s "
               "GROUP BY claim_token", (ns,)) == ((token, len(ids)),)
    store.confirm(token, ids)
    assert sql("SELECT claim_token FROM cachesync_dedup_done WHERE ns = %s", (ns,)) == ((token,),)


def test_an_id_the_column_cannot_hold_fails_the_claim_and_leaves_no_row(mysql_store):
    store, ns, sql = mysql_store
    ids = [f"ok{i}" for i in range(CLAIM_CHUNK + 10)] + ["x" * 65]
    with pytest.raises(Exception, match="(?i)too long|data"):
        store.claim(ids, lease_s=30)
    assert sql("SELECT COUNT(*) FROM cachesync_dedup WHERE ns = %s", (ns,)) == ((0,),)
    assert set(store.claim(ids[:-1], lease_s=30)[1].values()) == {O}


def test_a_claim_retried_after_failing_midway_owns_the_rows_it_committed(mysql_store):
    """The first chunk's INSERT committed, the second failed (a lost connection): the
    applier's retry of the same ids keeps the claim's token, so the first chunk's rows are
    its own, not another claim's to wait out for the lease."""
    store, ns, sql = mysql_store
    ids = [f"r{i}" for i in range(CLAIM_CHUNK + 10)]
    real, calls = store._insert, []

    def flaky(cur, token, mark, part, lease_s, plain):
        calls.append(token)
        if len(calls) == 2:
            raise RetryableError("MySQL unavailable: lost connection (injected)")
        return real(cur, token, mark, part, lease_s, plain)
    store._insert = flaky
    with pytest.raises(RetryableError):
        store.claim(ids, lease_s=30)
    assert sql("SELECT COUNT(*) FROM cachesync_dedup WHERE ns = %s", (ns,)) == ((CLAIM_CHUNK,),)
    token, states = store.claim(ids, lease_s=30)
    assert set(states.values()) == {O} and token == calls[0]
    store.confirm(token, ids)
    assert store.counts() == {"claimed": 0, "done": len(ids)}
    # a claim of other ids, or of the same ones after a success, gets a new token
    assert store.claim(["other"], lease_s=30)[0] != token


@pytest.fixture(params=["redis", "redis-cluster"])
def make_redis_store(request):
    yield from _factory(request)


def test_a_redis_claim_retried_after_its_scripts_ran_owns_what_they_wrote(make_redis_store,
                                                                          monkeypatch):
    """The claim's scripts ran, then the call failed (a WAIT short of replicas, a reply lost):
    the applier's retry of the same ids keeps the token, so those records are its own again,
    not another claim's to wait out for the lease."""
    from cachesync.consumer.adapters import redis_dedup
    from cachesync.consumer.adapters.redis_cluster import ReplicaWaitError
    store = make_redis_store()
    real, calls = redis_dedup.run_pipeline, []

    def short_of_replicas(*args, **kwargs):
        replies = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise ReplicaWaitError("only 0 of the 1 replica(s) acknowledged (injected)")
        return replies
    monkeypatch.setattr(redis_dedup, "run_pipeline", short_of_replicas)
    ids = [f"w{i}" for i in range(50)]
    with pytest.raises(RetryableError):
        store.claim(ids, lease_s=30)
    token, states = store.claim(ids, lease_s=30)
    assert set(states.values()) == {O}
    store.confirm(token, ids)
    assert store.counts() == {"claimed": 0, "done": len(ids)}
    assert store.claim(["other"], lease_s=30)[0] != token     # other ids: a new token


# -- the compact layout: time-ordered 16-byte keys, windows dropped whole --------------------

@pytest.fixture
def compact_store(stack, compact_account):
    """A compact store on a fresh namespace with 1-second windows, and the admin's SQL."""
    ns = f"compact-{uuid.uuid4().hex[:8]}"
    store = CompactMySQLDedupStore(compact_account, ns, window_s=1)
    admin = stack.admin(compact_account.database)

    def sql(statement, args=()):
        with admin.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall()
    yield store, ns, sql, compact_account
    store.close()
    admin.close()


def test_compact_keys_start_with_the_commit_time_and_find_copies_by_it(compact_store):
    store, ns, sql, _ = compact_store
    now = time.time()
    times = {"late": now, "early": now - 60, "mid": now - 30}
    token, states = store.claim(list(times), lease_s=30, commit_ts=times)
    assert set(states.values()) == {O}
    store.confirm(token, list(times))
    keys = [bytes(k) for (k,) in sql("SELECT id FROM cachesync_dedup_compact WHERE ns = %s "
                                     "ORDER BY id", (ns.encode(),))]
    assert [int.from_bytes(k[:6], "big") for k in keys] == sorted(
        int(t * 1000) for t in times.values())
    # a copy (same id, same commit time) is a duplicate, in any order and batch
    _, states = store.claim(["mid", "new", "early"], lease_s=30,
                            commit_ts={**times, "new": now})
    assert dict(states) == {"mid": D, "new": O, "early": D}


def test_compact_purge_drops_whole_windows_and_adds_the_next(compact_store):
    store, ns, sql, _ = compact_store
    old = [f"old{i}" for i in range(30)]
    now = time.time()
    token, _ = store.claim(old, lease_s=30, commit_ts=dict.fromkeys(old, now - 3600))
    store.confirm(token, old)
    store.claim(["open"], lease_s=30, commit_ts={"open": now - 3600})   # never confirmed
    future = now + 600                      # past every window: the MAXVALUE partition
    token, _ = store.claim(["future"], lease_s=30, commit_ts={"future": future})
    store.confirm(token, ["future"])

    def windows(table):
        return [name for (name,) in sql(
            "SELECT PARTITION_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = "
            "DATABASE() AND TABLE_NAME = %s ORDER BY PARTITION_ORDINAL_POSITION", (table,))]
    first = windows("cachesync_dedup_compact")
    wait_until = int(first[0][1:]) + 0.05   # the first window (holding the old ids) is over
    time.sleep(max(0.0, wait_until - time.time()))
    store.purge(retention_s=0, limit=1)     # a window goes whole, whatever the limit
    after = windows("cachesync_dedup_compact")
    assert first[0] not in after and after[-1] == "pmax"
    assert int(after[-2][1:]) > int(first[-2][1:])          # the next windows were added
    assert windows("cachesync_dedup_compact_done")[:-1] == after[:-1]
    assert store.counts() == {"claimed": 0, "done": 1}      # the future one is kept
    _, states = store.claim(old[:3] + ["open", "future"], lease_s=30,
                            commit_ts={**dict.fromkeys(old + ["open"], now - 3600),
                                       "future": future})
    assert dict(states) == {**dict.fromkeys(old[:3], O), "open": O, "future": D}


def test_compact_partial_confirm_marks_only_those_ids(compact_store):
    store, ns, _, account = compact_store
    times = dict.fromkeys(["a", "b", "c"], time.time())
    token, _ = store.claim(list(times), lease_s=30, commit_ts=times)
    store.confirm(token, ["a", "c"])
    store.confirm(token, ["not-claimed"])
    assert store.counts() == {"claimed": 1, "done": 2}
    other = CompactMySQLDedupStore(account, ns, window_s=1)
    try:
        assert dict(other.claim(list(times), lease_s=30, commit_ts=times)[1]) == {
            "a": D, "b": B, "c": D}
    finally:
        other.close()


def test_compact_needs_alter_and_drop_and_says_so(stack):
    env = stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        params = MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                             env["CACHESYNC_MYSQL_USER"], f.read().strip(), database="cachesync")
    store = CompactMySQLDedupStore(params, "compact-grants")
    try:
        with pytest.raises(FatalError, match="ALTER, DROP"):
            store.claim(["x"], lease_s=30, commit_ts={"x": time.time()})
    finally:
        store.close()


# -- claim, invalidate and confirm in one call (a store on the cache's own server) ------------

@pytest.fixture
def unlinking(stack):
    """(store, other store of the namespace, raw client, key prefix) on the devstack Redis,
    the stores given the cache's lease keys; the test's keys are removed afterwards."""
    from cachesync.consumer.adapters.redis_cache import RedisCache
    url, ns = stack.env["CACHESYNC_REDIS_URL"], f"contract-{uuid.uuid4().hex[:8]}"
    cache = RedisCache(url)
    stores = [RedisDedupStore(url, ns, retention_s=3600, leases=cache.leases) for _ in range(2)]
    client, prefix = redis.Redis.from_url(url), f"contract:{ns}:"
    yield stores[0], stores[1], client, prefix
    for pattern in (f"*{prefix}*", f"cachesync:dedup:{ns}:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.unlink(key)
    for closing in (*stores, cache):
        closing.close()
    client.close()


def test_claim_unlink_applies_new_ids_and_confirms_them_in_one_call(unlinking):
    from cachesync.schema.keys import lease_key
    store, other, client, p = unlinking
    assert store.unlinks
    for key in (f"{p}a", f"{p}b", lease_key(f"{p}b")):
        client.set(key, b"cached")
    states, existed = store.claim_unlink([("1", [f"{p}a", f"{p}b"]), ("2", [f"{p}c"])])
    assert dict(states) == {"1": O, "2": O} and existed == 2
    assert client.exists(f"{p}a", f"{p}b", lease_key(f"{p}b")) == 0
    assert dict(other.claim(["1", "2"], lease_s=30)[1]) == {"1": D, "2": D}   # confirmed
    assert store.counts() == {"claimed": 0, "done": 2}


def test_claim_unlink_leaves_the_keys_of_duplicates_and_busy_ids_alone(unlinking):
    store, other, client, p = unlinking
    token, _ = other.claim(["done"], lease_s=30)
    other.confirm(token, ["done"])
    other.claim(["busy"], lease_s=30)
    other.claim(["expired"], lease_s=0.2)
    time.sleep(0.3)   # the lease is measured by the server's clock: let it pass
    for name in ("done", "busy", "expired", "new"):
        client.set(f"{p}{name}", b"cached")
    states, existed = store.claim_unlink([(n, [f"{p}{n}"]) for n in ("done", "busy", "expired",
                                                                     "new")])
    assert dict(states) == {"done": D, "busy": B, "expired": O, "new": O} and existed == 2
    assert [client.exists(f"{p}{n}") for n in ("done", "busy", "expired", "new")] == [1, 1, 0, 0]
    assert dict(other.claim(["expired", "new"], lease_s=30)[1]) == {"expired": D, "new": D}


def test_a_small_claim_unlink_is_one_script_call_without_a_pipeline_even_after_a_flush(
        unlinking, monkeypatch):
    """At the head of the binlog each batch is one small call: one EVALSHA sent alone (and,
    after the server forgot its scripts, loaded again and sent once more)."""
    store, other, client, p = unlinking
    client.set(f"{p}x", b"cached")
    client.script_flush()                        # as after a restart or a failover
    monkeypatch.setattr(store._client, "pipeline", lambda *a, **k: pytest.fail("a pipeline"))
    states, existed = store.claim_unlink([("x", [f"{p}x"])])
    assert dict(states) == {"x": O} and existed == 1 and client.exists(f"{p}x") == 0
    assert dict(other.claim(["x"], lease_s=30)[1]) == {"x": D}


def test_a_small_claim_unlink_survives_its_connection_being_closed(unlinking):
    """The one script call per batch goes over a connection of the store's own: closed by the
    server between two batches (a restart, `timeout`, CLIENT KILL), the next call opens a new
    one and applies its batch once."""
    store, other, client, p = unlinking
    client.set(f"{p}y", b"cached")
    assert dict(store.claim_unlink([("y", [f"{p}y"])])[0]) == {"y": O}
    own = [c for c in client.client_list() if c["cmd"] == "evalsha"]
    assert own, "the call went over a connection of its own"
    for c in own:
        client.client_kill_filter(_id=c["id"])
    client.set(f"{p}z", b"cached")
    states, existed = store.claim_unlink([("z", [f"{p}z"])])
    assert dict(states) == {"z": O} and existed == 1 and client.exists(f"{p}z") == 0
    assert dict(other.claim(["y", "z"], lease_s=30)[1]) == {"y": D, "z": D}


def test_claim_unlink_takes_batches_larger_than_one_script_call(unlinking):
    store, _, client, p = unlinking
    n = redis_dedup.CLAIM_CHUNK * 2 + 7
    client.mset({f"{p}{i}": b"cached" for i in range(n)})
    states, existed = store.claim_unlink([(str(i), [f"{p}{i}"]) for i in range(n)])
    assert set(states.values()) == {O} and len(states) == n and existed == n
    assert store.counts() == {"claimed": 0, "done": n}


def test_a_store_on_a_cluster_does_not_claim_unlink():
    store = RedisDedupStore("", "contract-x", retention_s=3600, client=redis_cluster(),
                            leases=lambda keys: [])
    try:
        assert not store.unlinks
    finally:
        store.close()


def test_claim_unlink_holds_the_leases_so_fills_expire_with_the_hold(stack):
    """redis.fill_hold_ms: a reader that misses right after the invalidation may read the row
    before the commit is visible to it; what it fills expires with the hold. A reader
    that took its lease before the invalidation is refused, as without a hold."""
    from cachesync import client as cachesync_client
    from cachesync.client import read_through
    from cachesync.consumer.adapters.redis_cache import RedisCache
    from cachesync.schema.keys import LEASE_HOLD, lease_key
    url, ns = stack.env["CACHESYNC_REDIS_URL"], f"contract-{uuid.uuid4().hex[:8]}"
    cache = RedisCache(url, fill_hold_ms=1500)
    store = RedisDedupStore(url, ns, retention_s=3600, leases=cache.leases,
                            fill_hold_ms=cache.fill_hold_ms)
    client, p = redis.Redis.from_url(url), f"contract:{ns}:"
    try:
        client.set(f"{p}a", b"old", ex=60)
        client.set(lease_key(f"{p}b"), b"reader-token", px=60_000)    # a fill in flight
        states, existed = store.claim_unlink([("1", [f"{p}a", f"{p}b"])])
        assert dict(states) == {"1": O} and existed == 1
        hold_a, hold_b = client.get(lease_key(f"{p}a")), client.get(lease_key(f"{p}b"))
        assert hold_a.startswith(LEASE_HOLD.encode()) and hold_a == hold_b  # one id, one hold
        assert 0 < client.pttl(lease_key(f"{p}a")) <= 1500
        # the reader whose lease the invalidation took over is refused
        assert cachesync_client._fill(client, cachesync_client.OWN, f"{p}b", lease_key(f"{p}b"),
                                      "reader-token", b"loaded before", 60) == 0
        assert client.get(f"{p}b") is None
        # a reader missing during the hold fills, for the rest of the hold only
        assert read_through(client, f"{p}a", lambda: b"read during the hold", ttl_s=60) == \
            b"read during the hold"
        assert client.get(f"{p}a") == b"read during the hold"
        # both read in one transaction, at one instant: read one after the other, the hold's
        # TTL has run on by the time between the two round trips
        value_ms, hold_ms = client.pipeline(transaction=True).pttl(f"{p}a").pttl(
            lease_key(f"{p}a")).execute()
        assert 0 < value_ms <= hold_ms + 1
        wait_for(lambda: client.exists(lease_key(f"{p}a"), f"{p}a") == 0, 10, interval=0.05,
                 what="the hold and the value filled during it to end")
        assert read_through(client, f"{p}a", lambda: b"new", ttl_s=60) == b"new"
        assert client.get(f"{p}a") == b"new" and client.pttl(f"{p}a") > 50_000
        # the cache's own invalidation (no dedup store on its server) holds them the same way
        assert cache.delete([f"{p}a"]) == 1
        assert client.get(lease_key(f"{p}a")).startswith(LEASE_HOLD.encode())
        assert read_through(client, f"{p}a", lambda: b"x", ttl_s=60) == b"x"
        assert 0 < client.pttl(f"{p}a") <= 1500
        # a reader that missed during one hold is refused once a later change holds it again
        held = client.get(lease_key(f"{p}a"))
        assert cache.delete([f"{p}a"]) == 1
        assert cachesync_client._fill(client, held, f"{p}a", lease_key(f"{p}a"), "t",
                                      b"loaded before the later change", 60) == 0
        assert client.get(f"{p}a") is None
    finally:
        for pattern in (f"*{p}*", f"cachesync:dedup:{ns}:*"):
            for key in client.scan_iter(match=pattern, count=1000):
                client.unlink(key)
        for closing in (store, cache):
            closing.close()
        client.close()
