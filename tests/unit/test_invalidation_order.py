"""An invalidation and a read_through fill that races it: the fill must never leave the old
row cached, wherever between the invalidation's commands it lands.

The invalidation is one non-transactional pipeline (RedisCache.delete): other clients'
commands may run between its commands. This records the commands it sends and replays them
against a model of Redis with a fill (lease_fill.lua: write when the lease is the filler's,
then drop the lease) inserted at every point.

Two readers: A missed, took the lease and read the row before the commit; B misses during
the invalidation and reads the row before the commit is visible to it (the server writes the
binlog, so the invalidation can come, before its storage engine commits). While the
invalidation holds the lease (``fill_hold_ms``) B cannot take it, and its fill lasts only as
long as the hold (fill_if_held.lua); without a hold B's fill stays.
"""

from __future__ import annotations

import pytest

from cachesync.consumer.adapters.redis_cache import RedisCache
from cachesync.schema.keys import LEASE_HOLD, lease_key

KEYS = ["app:user:1", "app:user:2"]
TOKEN = "reader-a"
HOLD_MS = 500


class Recording:
    """A redis client that records the pipelines' commands (all replies 1)."""

    def __init__(self):
        self.commands: list[tuple] = []

    def pipeline(self, transaction: bool):
        assert not transaction
        return _Pipe(self)

    def register_script(self, text):
        return object()


class _Pipe:
    def __init__(self, owner: Recording):
        self._owner, self._queued = owner, []

    def execute_command(self, *args):
        self._queued.append(args)

    def __len__(self):
        return len(self._queued)

    def execute(self):
        self._owner.commands.extend(self._queued)
        return [1] * len(self._queued)


def run(commands: list[tuple], fill_at: int, reader: str = "A") -> dict:
    """Redis after ``commands`` with a fill of the old row run before command ``fill_at``:
    reader A took the lease of each key before the invalidation; reader B takes it (SET NX)
    right before its fill."""
    state = {lease_key(k): TOKEN for k in KEYS} if reader == "A" else {}

    def fill():
        for key in KEYS:
            lease = state.get(lease_key(key))
            if reader == "B" and lease is None:
                state[lease_key(key)] = lease = TOKEN
            if lease == TOKEN:
                state[key] = "old row"
                del state[lease_key(key)]
            elif reader == "B" and lease.startswith(LEASE_HOLD):
                state[key] = "old row, until the hold ends"
    for n, (name, *args) in enumerate(commands):
        if n == fill_at:
            fill()
        if name == "SET":
            key, value, px, ms = args
            assert (px, ms, value[:len(LEASE_HOLD)]) == ("PX", HOLD_MS, LEASE_HOLD)
            state[key] = value
        else:
            assert name == "UNLINK"
            for key in args:
                state.pop(key, None)
    if fill_at == len(commands):
        fill()
    return state


def invalidation(fill_hold_ms: int) -> list[tuple]:
    client = Recording()
    RedisCache("redis://unused", client=client, fill_hold_ms=fill_hold_ms).delete(KEYS)
    return client.commands


@pytest.mark.parametrize("fill_hold_ms", [0, HOLD_MS])
def test_a_fill_of_the_old_row_is_refused_wherever_it_lands_in_the_invalidation(fill_hold_ms):
    commands = invalidation(fill_hold_ms)
    named = {key for name, *args in commands for key in (args[:1] if name == "SET" else args)}
    assert named == {*KEYS, *map(lease_key, KEYS)}
    for fill_at in range(len(commands) + 1):
        state = run(commands, fill_at)
        assert not any(state.get(key) == "old row" for key in KEYS), (
            f"the old row stayed cached with the fill before command {fill_at} of {commands}")


def test_a_reader_missing_during_the_invalidation_fills_only_until_the_hold_ends():
    commands = invalidation(HOLD_MS)
    for fill_at in range(1, len(commands) + 1):       # from the first lease held on
        state = run(commands, fill_at, reader="B")
        assert not any(state.get(key) == "old row" for key in KEYS), (fill_at, commands)
        assert all(state[lease_key(k)].startswith(LEASE_HOLD) for k in KEYS), state
    holds = {args[1] for name, *args in commands if name == "SET"}
    assert len(holds) == 1 and holds != {LEASE_HOLD}          # one hold of its own
    assert invalidation(HOLD_MS) != commands                  # the next one another


def test_without_a_hold_a_reader_missing_after_the_invalidation_caches_what_it_read():
    """(Why the hold: a reader that read the row before the commit was visible fills it.)"""
    commands = invalidation(0)
    assert run(commands, len(commands), reader="B") == {k: "old row" for k in KEYS}


def test_a_fill_before_the_invalidation_is_removed_by_it():
    """(The model's sanity: a fill that lands first is an ordinary cached value, deleted.)"""
    for fill_hold_ms in (0, HOLD_MS):
        state = run(invalidation(fill_hold_ms), 0)
        assert not any(key in state for key in KEYS), state
