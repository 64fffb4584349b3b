"""One contract, two backends: the in-memory dedup store and the real MySQL one."""

from __future__ import annotations

import time
import uuid

import pytest

from consumer.adapters.memory import MemoryDedupStore
from consumer.adapters.mysql_dedup import CLAIM_CHUNK, MySQLDedupStore
from consumer.core.dedup import ClaimState
from producer_outbox.mysql import MySQLParams

O, D, B = ClaimState.OWNED, ClaimState.DONE, ClaimState.BUSY


@pytest.fixture(params=["memory", "mysql"])
def make_store(request):
    """A factory: stores made by one call share a namespace (two consumers, one group)."""
    if request.param == "memory":
        shared = MemoryDedupStore()
        yield lambda: shared
        return
    stack = request.getfixturevalue("stack")
    env = stack.env
    with open(env["CACHESYNC_MYSQL_PASSWORD_FILE"]) as f:
        params = MySQLParams(env["CACHESYNC_MYSQL_HOST"], int(env["CACHESYNC_MYSQL_PORT"]),
                             env["CACHESYNC_MYSQL_USER"], f.read().strip(), database="cachesync")
    ns = f"contract-{uuid.uuid4().hex[:8]}"
    stores = []

    def make():
        stores.append(MySQLDedupStore(params, ns))
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


def test_an_expired_claim_is_taken_over(make_store, request):
    first, second = make_store(), make_store()
    first.claim(["z"], lease_s=0.2)
    if isinstance(first, MemoryDedupStore):
        first._clock = lambda: time.monotonic() + 1   # no real waiting for the in-memory clock
    else:
        time.sleep(0.3)   # the lease is measured by the MySQL server's clock: let it pass
    token, states = second.claim(["z"], lease_s=30)
    assert dict(states) == {"z": O}
    assert dict(make_store().claim(["z"], lease_s=30)[1]) == {"z": B}   # the takeover renewed the lease
    second.confirm(token, ["z"])
    assert dict(make_store().claim(["z"], lease_s=30)[1]) == {"z": D}


def test_batches_larger_than_one_statement(make_store):
    ids = [f"id-{i}" for i in range(CLAIM_CHUNK * 2 + 5)]
    store = make_store()
    token, states = store.claim(ids, lease_s=30)
    assert set(states) == set(ids) and set(states.values()) == {O}
    store.confirm(token, ids)
    assert set(make_store().claim(ids, lease_s=30)[1].values()) == {D}
